"""Where each FLUX encoder comes from (a local folder or a hub id) and loading it.

`--model-path` names a FLUX-layout folder or hub repo (vae/, text_encoder/ + tokenizer/,
text_encoder_2/ + tokenizer_2/); `--vae-path`, `--clip-path` and `--t5-path` replace one encoder
with a folder or hub repo holding that model itself (a tokenizer next to it or in `tokenizer/`).
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from shardcook.encoders.models import FLUX
from shardcook.errors import ConfigError
from shardcook.hftoken import TOKEN_WAYS, redact

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerBase

log = logging.getLogger(__name__)
#: A model class `diffusers_vae` and `text_model` load (a torch module).
M = TypeVar("M", bound="torch.nn.Module")

DEFAULT_MODEL = FLUX.default_model
PRECISIONS = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: sample: z ~ posterior, seeded per key; mode: its mean; resample: the mode as latents.pth plus
#: the posterior (mean.pth, logvar.pth) so training can draw a fresh latent every epoch.
LATENT_MODES = ("sample", "mode", "resample")
#: encoder -> (model subfolder, tokenizer subfolder) inside a FLUX-layout folder
FLUX_LAYOUT = {"vae": ("vae", None), "clip": ("text_encoder", "tokenizer"),
               "t5": ("text_encoder_2", "tokenizer_2")}
OPTION = {"vae": "--vae-path", "clip": "--clip-path", "t5": "--t5-path"}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a precision name (bf16, fp16, fp32)."""
    import torch

    if name not in PRECISIONS:
        raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, not {name!r}.")
    dtype: torch.dtype = getattr(torch, PRECISIONS[name])
    return dtype


@dataclass(frozen=True)
class EncoderSource:
    """Where one encoder (and its tokenizer) is loaded from."""

    name: str  # vae | clip | t5
    source: str  # a local folder or a hub id
    local: bool
    subfolder: str | None
    tokenizer_subfolder: str | None
    revision: str | None
    option: str  # the option that named it

    def describe(self) -> dict[str, Any]:
        return {"source": self.source, "local": self.local, "subfolder": self.subfolder,
                "tokenizer_subfolder": self.tokenizer_subfolder, "revision": self.revision}


def run_facts(model: Any) -> dict[str, Any]:
    """The manifest's last encoder facts, every model's (`model`: the run's `ModelConfig`):
    precision, stored dtype, latent mode and its seed, and `compile` when on (a run without it
    records no such fact, as runs did before the option)."""
    return {"precision": model.precision, "stored_dtype": model.stored_dtype or model.precision,
            "latent_mode": model.latent_mode,
            "latent_seed": model.seed if model.latent_mode == "sample" else None,
            **({"compile": True} if model.compile else {})}


def offline() -> bool:
    """True when HF_HUB_OFFLINE asks for no network access."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


#: The hub's address -> why it cannot be reached ("" when it answered), asked once a process.
_HUB_REACHED: dict[str, str] = {}


def _hub_endpoint() -> str:
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def hub_unreachable() -> str | None:
    """Why the Hugging Face hub cannot be reached (its client's error), or None when it answers:
    one request, no retries, asked once a process. Without it, each file of a model would be
    tried six times over about half a minute, with a warning each time, before failing."""
    endpoint = _hub_endpoint()
    if endpoint not in _HUB_REACHED:
        from huggingface_hub import get_session

        try:
            get_session().head(endpoint, timeout=10)  # any answer, even an error status, will do
            _HUB_REACHED[endpoint] = ""
        except Exception as e:  # noqa: BLE001 - the client's network errors, whatever its library
            _HUB_REACHED[endpoint] = _network_error(e) or type(e).__name__
    return _HUB_REACHED[endpoint] or None


#: The errors of a hub that cannot be reached: the built-in ones, requests' ConnectionError,
#: httpx's NetworkError and TimeoutException, a name not resolved, and the hub client's "not
#: reached and not in the cache".
_NETWORK_ERRORS = frozenset({"ConnectionError", "TimeoutError", "NetworkError", "TimeoutException",
                             "gaierror", "LocalEntryNotFoundError"})


def _network_error(e: BaseException) -> str | None:
    """What the innermost network error in `e`'s chain says (a connection refused or reset, a
    timeout, a name not resolved), or None when there is none: the client wraps it, and a
    model library wraps that in a "file not found"."""
    found = None
    seen: BaseException | None = e
    while seen is not None:
        kinds = {cls.__name__ for cls in type(seen).__mro__}  # by name: requests' or httpx's
        if kinds & _NETWORK_ERRORS:
            found = " ".join(str(seen).split()) or type(seen).__name__
        seen = seen.__cause__ or seen.__context__
    return found


def _is_hub_id(value: str) -> bool:
    if value.startswith((".", "/", "~")) or value.endswith("/") or os.sep in value.replace("/", ""):
        return False
    parts = value.split("/")
    return 1 <= len(parts) <= 2 and all(parts)


def _where(value: str, option: str) -> tuple[str, bool]:
    """(source, is_local); raises ConfigError for a path that does not exist."""
    p = Path(value).expanduser()
    if p.exists():
        if not p.is_dir():
            raise ConfigError(f"{option} {value!r} is a file; name a model folder or a hub id.")
        return str(p.resolve()), True
    if _is_hub_id(value):
        return value, False
    raise ConfigError(f"{option} {value!r} does not exist; name an existing model folder "
                      "or a hub id such as black-forest-labs/FLUX.1-dev.")


def resolve_sources(model_path: str | None, vae_path: str | None = None,
                    clip_path: str | None = None, t5_path: str | None = None,
                    revision: str | None = None) -> dict[str, EncoderSource]:
    """The source of each encoder; raises ConfigError naming a missing local path."""
    overrides = {"vae": vae_path, "clip": clip_path, "t5": t5_path}
    base = model_path or DEFAULT_MODEL
    base_src: tuple[str, bool] | None = None
    out = {}
    for name, (sub, tok_sub) in FLUX_LAYOUT.items():
        own = overrides[name]
        if own:
            src, local = _where(own, OPTION[name])
            tsub = None
            if local and tok_sub and (Path(src) / "tokenizer").is_dir():
                tsub = "tokenizer"
            if local and not (Path(src) / "config.json").is_file():
                raise ConfigError(f"{OPTION[name]} {own!r} has no config.json; name the folder "
                                  f"that holds the {name} model itself.")
            out[name] = EncoderSource(name, src, local, None, tsub, None, OPTION[name])
            continue
        if base_src is None:
            base_src = _where(base, "--model-path")
        src, local = base_src
        if local:
            for folder in (sub, tok_sub):
                if folder and not (Path(src) / folder).is_dir():
                    raise ConfigError(
                        f"--model-path {base!r} has no {folder}/ folder (the FLUX layout is vae/, "
                        f"text_encoder/, tokenizer/, text_encoder_2/, tokenizer_2/); add it or "
                        f"give {OPTION[name]}.")
        out[name] = EncoderSource(name, src, local, sub, tok_sub, None if local else revision,
                                  "--model-path")
    return out


def _failed(src: EncoderSource, e: Exception, token: str | None) -> ConfigError:
    first = redact(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__, token)
    if src.local:
        return ConfigError(f"Could not load the {src.name} encoder from {src.source!r} "
                           f"({src.option}): {first}")
    if offline():
        return ConfigError(
            f"Could not load the {src.name} encoder from the hub repo {src.source!r}: "
            "HF_HUB_OFFLINE is set and it is not in the local cache; unset HF_HUB_OFFLINE or "
            f"give a local folder with {src.option}.")
    why = _HUB_REACHED.get(_hub_endpoint()) or _network_error(e)
    if why:
        return ConfigError(
            f"Could not load the {src.name} encoder: the Hugging Face hub ({_hub_endpoint()}) "
            f"cannot be reached ({redact(why[:200], token)}) and {src.source!r} is not in the "
            "local cache; connect this machine to the hub (or set HF_ENDPOINT to a mirror), or "
            "download the model where the hub can be reached and give its folder with "
            f"{src.option} DIR.")
    return ConfigError(
        f"Could not download the {src.name} encoder from the hub repo {src.source!r} ({first}). "
        "If the model is gated, accept its licence on huggingface.co and give a token in one of "
        f"three ways: {TOKEN_WAYS[0]}; {TOKEN_WAYS[1]}; or {TOKEN_WAYS[2]}.")


def loaded(src: EncoderSource, token: str | None, load: Callable[[], Any]) -> Any:
    """`load()`'s model, a failure turned into one sentence naming the encoder."""
    try:
        return load()
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - turned into one sentence naming the encoder
        raise _failed(src, e, token) from None


def read_dtype(dtype: torch.dtype) -> torch.dtype | str:
    """The dtype a transformers model is read in (`from_pretrained`'s `dtype`): the run's,
    except that an fp32 run reads the checkpoint's own (`"auto"`: its config's dtype, else its
    weights'), for `ready` to widen on the device: a bf16 checkpoint then crosses to the GPU in
    half the bytes, and the host never holds an fp32 copy (T5-XXL's would be 19 GB)."""
    import torch

    return "auto" if dtype == torch.float32 else dtype


def ready(model: torch.nn.Module, device: str, dtype: torch.dtype | None = None) -> None:
    """`model` on `device`, in eval mode, without gradients; read with `read_dtype(dtype)`, it
    is widened to an fp32 run's dtype there, after the move (a model read in the run's own
    dtype is left as its library made it: some keep a buffer in fp32 in a bf16 model)."""
    model.to(device)
    if dtype is not None and read_dtype(dtype) != dtype:
        model.to(dtype)
    model.eval().requires_grad_(False)


def folder_sources(model_path: str, revision: str | None,
                   layout: Mapping[str, tuple[str, str | None]], family: str
                   ) -> dict[str, EncoderSource]:
    """Each encoder's source inside a diffusers-format `--model-path` (`layout`: encoder ->
    (model subfolder, tokenizer subfolder)); a local folder lacking one is one sentence."""
    src, local = _where(model_path, "--model-path")
    out = {}
    for name, (sub, tok_sub) in layout.items():
        for folder in (sub, tok_sub):
            if local and folder and not (Path(src) / folder).is_dir():
                raise ConfigError(f"--model-path {model_path!r} has no {folder}/ folder (a "
                                  f"{family} folder holds {_folders(layout)}); add it.")
        out[name] = EncoderSource(name, src, local, sub, tok_sub, None if local else revision,
                                  "--model-path")
    return out


def _folders(layout: Mapping[str, tuple[str, str | None]]) -> str:
    """"vae/, text_encoder/ and tokenizer/": the folders of a layout, in its order."""
    names = [f"{f}/" for pair in layout.values() for f in pair if f]
    return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]


def diffusers_vae(cls: type[M], src: EncoderSource, token: str | None, dtype: torch.dtype,
                  device: str) -> M:
    """A diffusers model class's model (a VAE, LTX-2's text connectors), read in the run's
    dtype, in eval mode on `device`."""
    vae: M = loaded(src, token, lambda: cls.from_pretrained(  # type: ignore[attr-defined]
        src.source, torch_dtype=dtype, **_kwargs(src, token, src.subfolder)))
    ready(vae, device)
    return vae


def text_model(cls: type[M], tokenizer: Any, src: EncoderSource, token: str | None,
               dtype: torch.dtype, device: str) -> tuple[M, Any]:
    """A transformers text encoder read as `read_dtype` says, in eval mode on `device` in the
    run's dtype, and its tokenizer (`tokenizer`: the class whose `from_pretrained` reads it)."""
    model = loaded(src, token, lambda: cls.from_pretrained(  # type: ignore[attr-defined]
        src.source, dtype=read_dtype(dtype), **_kwargs(src, token, src.subfolder)))
    tok = loaded(src, token, lambda: tokenizer.from_pretrained(
        src.source, **_kwargs(src, token, src.tokenizer_subfolder)))
    assert isinstance(model, cls)  # the class loads itself
    ready(model, device, dtype)
    return model, tok


#: A `VaeAndText` family's encoders class.
E = TypeVar("E", bound="VaeAndText")


class VaeAndText:
    """What the families of one diffusers VAE and one text encoder in a diffusers-format folder
    (Wan, Qwen-Image, FLUX.2) load alike. A family says where its parts are (`sources`), how
    each is read (`read_vae`, `read_text`), and the name of its text encoder's source (`TEXT`);
    its class takes (vae, tokenizer, text encoder, *, device, dtype, latent_mode, seed)."""

    #: The text encoder's name among `sources`.
    TEXT: str

    if TYPE_CHECKING:
        def __init__(self, vae: Any, tokenizer: Any, text: Any, *, device: str,
                     dtype: torch.dtype, latent_mode: str, seed: int) -> None: ...

        @staticmethod
        def sources(model_path: str | None, revision: str | None
                    ) -> dict[str, EncoderSource]: ...

        @staticmethod
        def read_vae(src: EncoderSource, token: str | None, dtype: torch.dtype,
                     device: str) -> Any: ...

        @staticmethod
        def read_text(src: EncoderSource, token: str | None, dtype: torch.dtype,
                      device: str) -> tuple[Any, Any]: ...

    @classmethod
    def parts(cls, model_path: str | None, revision: str | None, token_file: str | None,
              vae_dtype: torch.dtype, text_dtype: torch.dtype, device: str
              ) -> tuple[Any, Any, Any]:
        """(vae, tokenizer, text encoder), each on `device` in its dtype; the token is read
        for the loads and dropped."""
        from shardcook.hftoken import resolve_token

        token, _ = resolve_token(token_file)
        sources = cls.sources(model_path, revision)
        vae = cls.read_vae(sources["vae"], token, vae_dtype, device)
        text, tokenizer = cls.read_text(sources[cls.TEXT], token, text_dtype, device)
        del token
        return vae, tokenizer, text

    @classmethod
    def load(cls: type[E], *, model_path: str | None, revision: str | None,
             token_file: str | None, precision: str, device: str, latent_mode: str,
             seed: int) -> E:
        """The encoders in `precision` on `device`."""
        dtype = torch_dtype(precision)
        return cls(*cls.parts(model_path, revision, token_file, dtype, dtype, device),
                   device=device, dtype=dtype, latent_mode=latent_mode, seed=seed)

    @classmethod
    def for_run(cls: type[E], model: Any, spec: Any, device: str, token_file: str | None
                ) -> E:
        """The encoders of an `encode` run (`model`: its `ModelConfig`, resolved for encode;
        `spec`: its layout's `EncodeSpec`, which sets nothing for these families)."""
        return cls.load(model_path=model.model_path, revision=model.revision,
                        token_file=token_file, precision=model.precision, device=device,
                        latent_mode=model.latent_mode, seed=model.seed)


def _kwargs(src: EncoderSource, token: str | None, sub: str | None) -> dict[str, Any]:
    # an unreachable hub: the local cache only, at once, rather than every file tried six times
    kw: dict[str, Any] = {"local_files_only": src.local or offline() or bool(hub_unreachable())}
    if sub:
        kw["subfolder"] = sub
    if not src.local:
        kw["token"] = token
        if src.revision:
            kw["revision"] = src.revision
    return kw


@contextmanager
def _quiet() -> Iterator[None]:
    """Leaves out a deprecation warning diffusers makes the hub client give on every download
    (diffusers still passes `local_dir_use_symlinks`): nothing a user can act on."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*local_dir_use_symlinks.*")
        yield


def vae_config(src: EncoderSource, token: str | None) -> dict[str, Any]:
    """The VAE's config.json (FLUX's scaling_factor, shift_factor, latent_channels; Wan's
    latents_mean, latents_std, z_dim; ...): read as it is, whatever the VAE's class."""
    try:
        if src.local:
            folder = Path(src.source) / (src.subfolder or "")
            config: dict[str, Any] = json.loads((folder / "config.json").read_text("utf-8"))
            return config
        from diffusers import AutoencoderKL

        with _quiet():
            return dict(AutoencoderKL.load_config(src.source,
                                                  **_kwargs(src, token, src.subfolder)))
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - turned into one sentence naming the encoder
        raise _failed(src, e, token) from None


def _load(src: EncoderSource, token: str | None, dtype: torch.dtype
          ) -> tuple[torch.nn.Module, PreTrainedTokenizerBase | None]:
    if src.name == "vae":
        from diffusers import AutoencoderKL

        vae = AutoencoderKL.from_pretrained(src.source, torch_dtype=dtype,
                                            **_kwargs(src, token, src.subfolder))
        return vae, None
    from transformers import AutoTokenizer, CLIPTextModel, T5EncoderModel

    cls = CLIPTextModel if src.name == "clip" else T5EncoderModel
    model = cls.from_pretrained(src.source, dtype=read_dtype(dtype),
                                **_kwargs(src, token, src.subfolder))
    return model, AutoTokenizer.from_pretrained(src.source,
                                                **_kwargs(src, token, src.tokenizer_subfolder))


def load_encoder(
    src: EncoderSource, token: str | None, dtype: torch.dtype, device: str
) -> tuple[torch.nn.Module, PreTrainedTokenizerBase | None]:
    """(model, tokenizer or None) for one encoder, in eval mode on `device` in `dtype` (a text
    encoder read in its stored dtype and widened there, `read_dtype`)."""
    try:
        with _quiet():
            model, tok = _load(src, token, dtype)
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - turned into one sentence naming the encoder
        raise _failed(src, e, token) from None
    ready(model, device, dtype)
    return model, tok

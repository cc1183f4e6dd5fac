"""Checks of one sample: the parts its layout requires, each part decodable as what its name says
(image, UTF-8 text, JSON, a plain saved tensor), and the layout's own checker (docs/FORMAT.md §3).
Every finding is one sentence; nothing here imports torch or runs pickled code."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardcook.dataset.check.tensorinfo import (
    TensorInfo,
    is_torch_save_part,
    tensor_info,
    torch_save_damage,
)
from shardcook.layouts import IMAGE_PARTS, Layout
from shardcook.layouts.base import registry_function
from shardcook.layouts.chatml import (
    CONVERSATION_PART,
    MULTI_IMAGE_PART,
    VIDEO_FRAMES_PARTS,
    load_jpgs,
    load_videos,
    turns_problem,
)
from shardcook.layouts.preencoded import POSTERIOR_PARTS

if TYPE_CHECKING:
    from shardcook.encoders.models import ModelFamily

#: A layout checker: (parts, manifest, deep) -> one sentence per problem.
Checker = Callable[[Mapping[str, bytes], Mapping[str, Any], bool], list[str]]
#: A layout's check across a split: (root, split, shards) -> one sentence per problem.
SplitChecker = Callable[[Path, str, Sequence[str]], list[str]]
#: What every sample of a split shares in a layout: (key, parts) -> {fact: value}, a value None
#: where the part is not readable (the sample's own check names it).
Agreement = Callable[[str, Mapping[str, bytes]], dict[str, object]]

TENSOR_EXTENSIONS = ("pth", "pt", "npy")


def image_problem(data: bytes) -> str | None:
    """Why `data` is not a decodable image (Pillow verify, then a full load), or None."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
        with Image.open(io.BytesIO(data)) as img:
            img.load()
    except Exception as e:  # noqa: BLE001 (any decoder failure is the finding)
        detail = str(e).splitlines()[0] if str(e) else ""
        return f"is not a decodable image ({type(e).__name__}: {detail})"
    return None


def part_problem(name: str, data: bytes) -> str | None:
    """Why part `name` does not hold what its extension says, or None (unknown kinds pass)."""
    ext = name.rsplit(".", 1)[-1]
    if ext in IMAGE_PARTS:
        return image_problem(data)
    if ext in ("txt", "json"):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            return f"is not UTF-8 text (byte {e.start})"
        if ext == "json":
            try:
                json.loads(text)
            except (ValueError, RecursionError) as e:
                return f"is not valid JSON ({str(e).splitlines()[0]})"
    if ext in TENSOR_EXTENSIONS:
        damage = torch_save_damage(data) if is_torch_save_part(name) else None
        if damage is not None:
            return f"is damaged: {damage}"
        if tensor_info(data, name) is None:
            return "is not a plain saved tensor"
    return None


def load_checker(layout: Layout | None) -> Checker | None:
    """The layout's `checker` function, imported."""
    if layout is None or layout.reading.checker is None:
        return None
    checker: Checker = registry_function(layout.reading.checker)
    return checker


def load_split_checker(layout: Layout | None) -> SplitChecker | None:
    """The layout's `split_checker` function, imported."""
    if layout is None or layout.reading.split_checker is None:
        return None
    checker: SplitChecker = registry_function(layout.reading.split_checker)
    return checker


def load_agreement(layout: Layout | None) -> Agreement | None:
    """The layout's `agreement` function, imported."""
    if layout is None or layout.reading.agreement is None:
        return None
    agreement: Agreement = registry_function(layout.reading.agreement)
    return agreement


class SplitAgreement:
    """`validate --deep`'s check that the samples of each split agree on what their layout says
    they share (`Reading.agreement`): each against the first sound one read of its split, whatever
    window of shards it is read in; the first `SHOWN` that differ are named, the rest counted
    by `rest`."""

    SHOWN = 10

    def __init__(self, facts: Agreement, splits: Mapping[str, Sequence[str]]) -> None:
        self.facts = facts
        self.split_of: dict[str, str] = {}
        for split, shards in splits.items():
            for shard in shards:
                self.split_of.setdefault(shard, split)
        #: split -> (shard, key, facts) of its first sample
        self.first: dict[str, tuple[str, str, dict[str, object]]] = {}
        self.differing: Counter[str] = Counter()

    def check(self, shard: str, key: str, parts: Mapping[str, bytes]) -> list[str]:
        """The problem when sample `key` of `shard` does not share its split's facts."""
        split = self.split_of.get(shard)
        if split is None:
            return []
        facts = self.facts(key, parts)
        if split not in self.first:
            self.first[split] = (shard, key, facts)
            return []
        first_shard, first_key, want = self.first[split]
        differ = [name for name in dict.fromkeys([*want, *facts])
                  if want.get(name) is not None and facts.get(name) is not None
                  and want[name] != facts[name]]
        if not differ:
            return []
        self.differing[split] += 1
        if self.differing[split] > self.SHOWN:
            return []
        said = "; ".join(f"{name} {facts[name]}, not {want[name]}" for name in differ)
        return [f"{shard}: sample {key} does not match sample {first_key} ({first_shard}), the "
                f"first of the {split} split: {said}; a split's samples must agree on these "
                "(were two runs with other options mixed?)"]

    def rest(self) -> list[str]:
        """How many more samples of each split differ than were named."""
        return [f"{n - self.SHOWN} more samples of the {split} split do not match its first"
                for split, n in self.differing.items() if n > self.SHOWN]


def check_sample(
    parts: Mapping[str, bytes],
    layout: Layout | None,
    *,
    manifest: Mapping[str, Any],
    checker: Checker | None,
    deep: bool,
) -> list[str]:
    """Problems of one sample, each phrased to follow `sample KEY `: missing parts first (and
    then nothing else), else undecodable parts (when `deep`) and the layout checker's findings."""
    missing = layout.missing_parts(parts) if layout else []
    if missing:
        return [f"lacks {', '.join(missing)}"]
    problems = []
    if deep:
        for name, data in parts.items():
            why = part_problem(name, data)
            if why:
                problems.append(f"part {name} {why}")
    if checker is not None:
        problems += checker(parts, manifest, deep)
    return problems


# ---- layout checkers (named by `Reading.checker`) -------------------------------------------


def _tensor(parts: Mapping[str, bytes], name: str) -> TensorInfo | None:
    return tensor_info(parts[name], name) if name in parts else None


def _size(parts: Mapping[str, bytes]) -> tuple[int, int] | None:
    try:
        size = json.loads(parts["meta.json"]).get("size")
    except (KeyError, ValueError, AttributeError, RecursionError):
        return None
    if (isinstance(size, list) and len(size) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in size)):
        return size[0], size[1]
    return None


def family_of(layout: Layout) -> ModelFamily:
    """The model family whose encoders write `layout` (its registry entry says how its latents
    are checked: rank, downsampling, frames, normalisation)."""
    from shardcook.encoders.models import MODELS

    assert layout.encode is not None  # the layouts with latents are written by `encode`
    return MODELS[layout.encode.model]


def latent_form(family: ModelFamily) -> str:
    """The shape of one of the family's latents, in words: `[C, H/8, W/8]`, `[C, T', H/8, W/8]`."""
    d = family.sizes.downsample
    frames = "T', " if family.latents.rank == 4 else ""
    return f"[C, {frames}H/{d}, W/{d}]"


def check_preencoded(parts: Mapping[str, bytes], manifest: Mapping[str, Any],
                     deep: bool) -> list[str]:
    """Tensor ranks, and shapes that agree with each other, meta.json and the manifest:
    latents `[C, H/8, W/8]` (the rank and downsampling of the FLUX registry entry),
    prompt_embeds `[L, D]`, pooled_prompt_embeds `[D]`, one dtype; a stored posterior
    (`mean.pth`, `logvar.pth`) of the latent's shape."""
    from shardcook.layouts.preencoded import PREENCODED

    family = family_of(PREENCODED)
    d = family.sizes.downsample
    latents = _tensor(parts, "latents.pth")
    prompt = _tensor(parts, "prompt_embeds.pth")
    pooled = _tensor(parts, "pooled_prompt_embeds.pth")
    problems = []
    for name, info, rank, form in (("latents.pth", latents, family.latents.rank,
                                    latent_form(family)),
                                   ("prompt_embeds.pth", prompt, 2, "[L, D]"),
                                   ("pooled_prompt_embeds.pth", pooled, 1, "[D]")):
        if info is not None and len(info.shape) != rank:
            problems.append(f"part {name} has shape {list(info.shape)}, not {form}")
    if problems:
        return problems
    if latents is not None:
        channels = manifest.get("latent_channels")
        if channels is not None and latents.shape[0] != channels:
            problems.append(f"part latents.pth has {latents.shape[0]} channels but the manifest "
                            f"says {channels}")
        size = _size(parts)
        if size is not None and latents.shape[1:] != (size[0] // d, size[1] // d):
            problems.append(f"part latents.pth is {latents.shape[1]}x{latents.shape[2]} but "
                            f"meta.json's size {size[0]}x{size[1]} needs "
                            f"{size[0] // d}x{size[1] // d}")
    max_length = manifest.get("t5_max_length")
    if prompt is not None and max_length is not None and prompt.shape[0] != max_length:
        problems.append(f"part prompt_embeds.pth has {prompt.shape[0]} tokens but the manifest's "
                        f"t5_max_length is {max_length}")
    for name in POSTERIOR_PARTS:
        posterior = _tensor(parts, name)
        if latents is not None and posterior is not None and posterior.shape != latents.shape:
            problems.append(f"part {name} has shape {list(posterior.shape)} but latents.pth has "
                            f"{list(latents.shape)}")
    dtypes = {info.dtype for info in (latents, prompt, pooled) if info is not None}
    if len(dtypes) > 1:
        problems.append(f"the tensor parts mix dtypes {', '.join(sorted(dtypes))}")
    return problems


def check_chatml(parts: Mapping[str, bytes], manifest: Mapping[str, Any], deep: bool) -> list[str]:
    """conversation.json holds the turns; `jpgs` a pickled list of bytes and `videos` a pickled
    list of lists of bytes, each an image when deep."""
    problems = []
    conversation = parts.get(CONVERSATION_PART, b"[]")
    undecodable = part_problem(CONVERSATION_PART, conversation)  # when deep: already reported
    why = (None if deep else undecodable) if undecodable else turns_problem(conversation)
    if why:
        problems.append(f"part {CONVERSATION_PART} {why}")
    for frames_part in (p for p in VIDEO_FRAMES_PARTS if p in parts):
        try:
            videos = load_videos(parts[frames_part], frames_part)
        except ValueError as e:
            return [*problems, f"part {frames_part}: {e}"]
        for v, frames in enumerate(videos if deep else ()):
            for n, data in enumerate(frames):
                why = image_problem(data)
                if why:
                    problems.append(f"frame {n} of video {v} of part {frames_part} {why}")
    if MULTI_IMAGE_PART in parts:
        try:
            images = load_jpgs(parts[MULTI_IMAGE_PART])
        except ValueError as e:
            return [*problems, f"part {MULTI_IMAGE_PART}: {e}"]
        for n, data in enumerate(images if deep else ()):
            why = image_problem(data)
            if why:
                problems.append(f"image {n} of part {MULTI_IMAGE_PART} {why}")
    return problems


def _pickled(parts: Mapping[str, bytes], part: str) -> tuple[object, list[str]]:
    """What pickle part `part` holds (tensors as `TensorInfo`, nothing run), or the problem."""
    import pickle

    from shardcook.dataset.check.tensorinfo import pickled_tensors_info

    try:
        return pickled_tensors_info(parts[part]), []
    except pickle.UnpicklingError as e:
        return None, [f"part {part} holds more than tensors and plain types ({e}); it was not run"]
    except Exception as e:  # noqa: BLE001 (arbitrary bytes can fail anywhere in a pickle)
        detail = str(e).partition("\n")[0]
        return None, [f"part {part} is not a readable pickle ({type(e).__name__}"
                      + (f": {detail})" if detail else ")")]


def _latent_fits_json(parts: Mapping[str, bytes], part: str, shape: tuple[int, ...],
                      meta_part: str, family: ModelFamily) -> list[str]:
    """The problems when a latent's `shape` past its channels ([T', h, w] or [h, w]) does not
    fit the json's processed size (Megatron-Bridge's `processed_height` / `processed_width`,
    divided by the family's downsampling) or, for a video family, its `processed_frames` (1 +
    (T - 1) // the VAE's frame step); none for what json lacks."""
    try:
        meta = json.loads(parts[meta_part])
        size = (int(meta["processed_height"]), int(meta["processed_width"]))
    except (KeyError, ValueError, TypeError, RecursionError):
        return []
    problems = []
    d, step, hw = family.sizes.downsample, family.sizes.frame_step, shape[-2:]
    if tuple(hw) != (size[0] // d, size[1] // d):
        problems.append(f"part {part} is {hw[0]}x{hw[1]} but {meta_part}'s processed size "
                        f"{size[0]}x{size[1]} needs {size[0] // d}x{size[1] // d}")
    frames = meta.get("processed_frames")
    if step is not None and len(shape) == 3 and isinstance(frames, int) and frames > 0 and (
            shape[0] != 1 + (frames - 1) // step):
        problems.append(f"part {part} has {shape[0]} latent frames but {meta_part}'s "
                        f"processed_frames {frames} make {1 + (frames - 1) // step} (the VAE "
                        f"keeps the first frame and one latent frame per {step})")
    return problems


def check_wan(parts: Mapping[str, bytes], manifest: Mapping[str, Any], deep: bool) -> list[str]:
    """`pickle` holds one tensor [226, D] (read without running anything); `pth` is
    [C, T', H/8, W/8] for json's processed size; and a dataset whose manifest records its
    normalisation recorded the Wan VAE's (`latents_mean` / `latents_std`, one per channel)."""
    from shardcook.layouts.wan import EMBEDDING_PART, LATENT_PART, META_PART, WAN

    family = family_of(WAN)
    text, problems = _pickled(parts, EMBEDDING_PART)
    if not problems and (not isinstance(text, TensorInfo) or len(text.shape) != 2):
        problems.append(f"part {EMBEDDING_PART} is not one tensor [L, D]")
    latent = _tensor(parts, LATENT_PART)
    if latent is not None and len(latent.shape) != family.latents.rank:
        problems.append(f"part {LATENT_PART} has shape {list(latent.shape)}, not "
                        f"{latent_form(family)}")
    norm = manifest.get("normalisation")
    if manifest and (not isinstance(norm, dict) or norm.get("kind") != family.latents.convention):
        kind = norm.get("kind") if isinstance(norm, dict) else None
        problems.append(f"the manifest records the normalisation {kind or 'none'}, but the wan "
                        "layout holds latents normalised by the Wan VAE's latents_mean and "
                        "latents_std")
    if problems or latent is None:
        return problems
    if isinstance(norm, dict) and len(norm.get("latents_mean") or []) != latent.shape[0]:
        problems.append(f"part {LATENT_PART} has {latent.shape[0]} channels but the manifest's "
                        "normalisation has one mean per channel of another VAE")
    return problems + _latent_fits_json(parts, LATENT_PART, latent.shape[1:], META_PART, family)


def check_bridge_flux(parts: Mapping[str, bytes], manifest: Mapping[str, Any],
                      deep: bool) -> list[str]:
    """`pickle` holds only tensors and plain types (read without loading any class, so a
    payload is refused, never run): a dict of `prompt_embeds` `[L, D]` and
    `pooled_prompt_embeds` `[D]`; `pth` is `[C, H/8, W/8]` for json's processed size; channels
    and T5 length agree with the manifest."""
    from shardcook.layouts.bridge_flux import (
        BRIDGE_FLUX,
        EMBEDDINGS_PART,
        LATENT_PART,
        META_PART,
        POOLED_PROMPT_EMBEDS,
        PROMPT_EMBEDS,
    )

    family = family_of(BRIDGE_FLUX)
    embeddings, problems = _pickled(parts, EMBEDDINGS_PART)
    if problems:
        return problems
    wanted = ((PROMPT_EMBEDS, 2, "[L, D]"), (POOLED_PROMPT_EMBEDS, 1, "[D]"))
    if not isinstance(embeddings, dict):
        return [(f"part {EMBEDDINGS_PART} holds a {type(embeddings).__name__}, not a dict of "
                f"{PROMPT_EMBEDS} and {POOLED_PROMPT_EMBEDS}")]
    for name, rank, form in wanted:
        info = embeddings.get(name)
        if not isinstance(info, TensorInfo) or len(info.shape) != rank:
            problems.append(f"part {EMBEDDINGS_PART}'s {name} is not a tensor {form}")
    latent = _tensor(parts, LATENT_PART)
    if latent is not None and len(latent.shape) != family.latents.rank:
        problems.append(f"part {LATENT_PART} has shape {list(latent.shape)}, not "
                        f"{latent_form(family)}")
    if problems:
        return problems
    prompt = embeddings[PROMPT_EMBEDS]
    max_length = manifest.get("t5_max_length")
    if max_length is not None and prompt.shape[0] != max_length:
        problems.append(f"part {EMBEDDINGS_PART}'s {PROMPT_EMBEDS} has {prompt.shape[0]} tokens "
                        f"but the manifest's t5_max_length is {max_length}")
    if latent is not None:
        channels = manifest.get("latent_channels")
        if channels is not None and latent.shape[0] != channels:
            problems.append(f"part {LATENT_PART} has {latent.shape[0]} channels but the "
                            f"manifest says {channels}")
        problems += _latent_fits_json(parts, LATENT_PART, latent.shape[1:], META_PART, family)
    return problems


# ---- what a split's samples share (named by `Reading.agreement`) ------------------------------


def _tensor_facts(parts: Mapping[str, bytes], name: str, whole: bool) -> dict[str, object]:
    """A tensor part's dtype and its whole shape (`whole`), or its rank and channel count (the
    first dimension): a latent's height and width vary with each image's size."""
    info = _tensor(parts, name)
    if info is None:
        return {}
    if whole:
        return {f"{name} shape": list(info.shape), f"{name} dtype": info.dtype}
    return {f"{name} rank": len(info.shape),
            f"{name} channels": info.shape[0] if info.shape else None,
            f"{name} dtype": info.dtype}


def _pickled_facts(parts: Mapping[str, bytes], part: str) -> dict[str, object]:
    """The shape and dtype of each tensor pickle part `part` holds (one, or a dict of them)."""
    if part not in parts:
        return {}
    held, problems = _pickled(parts, part)
    if problems:
        return {}
    named = held.items() if isinstance(held, dict) else [(None, held)]
    facts: dict[str, object] = {}
    for name, info in named:
        if isinstance(info, TensorInfo):
            where = part if name is None else f"{part}'s {name}"
            facts.update({f"{where} shape": list(info.shape), f"{where} dtype": info.dtype})
    return facts


def _part_names(parts: Mapping[str, bytes], optional: Collection[str] = ()) -> dict[str, object]:
    return {"parts": ", ".join(sorted(name for name in parts if name not in optional))}


def preencoded_agreement(key: str, parts: Mapping[str, bytes]) -> dict[str, object]:
    """The parts but the optional caption.txt and meta.json (a Primus dataset may hold them for
    some samples only), so the posterior too; the latents' rank, channels and dtype (their height
    and width follow each image with --resize-mode variable or bucket); the text embeddings'
    whole shapes and dtype."""
    from shardcook.layouts.preencoded import PREENCODED

    optional = set(PREENCODED.parts) - set(PREENCODED.required)
    return {**_part_names(parts, optional), **_tensor_facts(parts, "latents.pth", False),
            **_tensor_facts(parts, "prompt_embeds.pth", True),
            **_tensor_facts(parts, "pooled_prompt_embeds.pth", True)}


def bridge_flux_agreement(key: str, parts: Mapping[str, bytes]) -> dict[str, object]:
    """As `preencoded_agreement`, for Bridge's `pth` latent and its `pickle` of embeddings."""
    from shardcook.layouts.bridge_flux import EMBEDDINGS_PART, LATENT_PART

    return {**_part_names(parts), **_tensor_facts(parts, LATENT_PART, False),
            **_pickled_facts(parts, EMBEDDINGS_PART)}


#: Bridge's key of one frame of a video, `{video:06}_{frame:02}` (a clip's is `{video:06}`).
_FRAME_KEY = re.compile(r"\d+_\d+")


def wan_agreement(key: str, parts: Mapping[str, bytes]) -> dict[str, object]:
    """The parts; the latent's rank, channels and dtype (its frames, height and width follow
    each clip); the embedding's whole shape and dtype; whether the samples are clips or single
    frames (the key's kind and json's `processing_mode`: one run makes one kind)."""
    from shardcook.layouts.wan import EMBEDDING_PART, LATENT_PART, META_PART

    facts = {**_part_names(parts), **_tensor_facts(parts, LATENT_PART, False),
             **_pickled_facts(parts, EMBEDDING_PART)}
    name = key.rpartition("/")[2]
    facts["key kind"] = "frame" if _FRAME_KEY.fullmatch(name) else "clip"
    try:
        mode = json.loads(parts[META_PART]).get("processing_mode")
    except (KeyError, ValueError, AttributeError, RecursionError):
        mode = None
    facts[f"{META_PART}'s processing_mode"] = mode if isinstance(mode, str) else None
    return facts

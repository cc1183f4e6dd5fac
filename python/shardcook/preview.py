"""`shardcook preview`: a contact sheet PNG of a dataset's first samples with their captions.

Raw datasets show their images. Encoded datasets show their latents decoded by a VAE when a model
is given (`(latent / scaling) + shift`, then `vae.decode`; `megatron-bridge` latents and the
posterior mean of `preencoded_numpy` (MLPerf) samples are stored unscaled and go to `vae.decode` as
they are), else the first three latent channels as false colour (each channel stretched to its own
min..max). MLPerf samples have no caption; their tile shows the validation timestep, if any. A
sample that cannot be read shows as a grey tile saying why; the sheet is written under a temporary
name and renamed, so a failed write leaves nothing behind. What a layout shows comes from its
registry entry (`Layout.reading.preview`, `Layout.encode.latents_scaled`).
"""

from __future__ import annotations

import io
import json
import logging
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardcook.dataset import metadata
from shardcook.dataset.jsonl.file import PART
from shardcook.dataset.kind import dataset_kind
from shardcook.dataset.location import dataset_view
from shardcook.dataset.view import DatasetView
from shardcook.errors import ConfigError, DatasetError, ShardcookError
from shardcook.files import write_atomic
from shardcook.htmlreport.pictures import false_colour
from shardcook.layouts import IMAGE_PARTS, LAYOUTS, Layout, by_encoding, registry_function
from shardcook.layouts.bridge_flux import LATENT_PART, META_PART
from shardcook.layouts.mlperf import JSON_PART, MEAN_PART, TIMESTEP_COLUMN
from shardcook.layouts.names import DATASET_YAML, JSONL_SUFFIX, MANIFEST_JSON, META_DIR, OURS_DIR
from shardcook.storage.local import check_local_path
from shardcook.storage.location import Location, locate

if TYPE_CHECKING:
    import numpy as np
    import torch
    from PIL import Image as PILImage

log = logging.getLogger(__name__)

TILE = 192
CAPTION_LINES = 3


def _layout(root: Path) -> Layout:
    """The layout of `root`'s samples, when preview can show them."""
    encoding = metadata.recorded_encoding(root)
    if encoding is None:
        raise DatasetError(f"{root} has no {META_DIR}/{DATASET_YAML} or {OURS_DIR}/{MANIFEST_JSON} "
                           "saying its layout; is it a shardcook dataset?")
    layout = by_encoding(encoding)
    if layout is None or layout.reading.preview is None:
        encoded = [lay.encoding for lay in LAYOUTS.values()
                   if lay.reading.preview and _latents_scaled(lay) is not None]
        raise DatasetError(f"{root} holds {encoding!r} samples; preview shows raw and encoded "
                           f"({', '.join(encoded)}) datasets")
    return layout


def _latents_scaled(layout: Layout) -> bool | None:
    """Whether the layout's picture is a scaled latent; None when it is an image."""
    return layout.encode.latents_scaled if layout.encode else None


def _first_samples(view: DatasetView, count: int) -> list[tuple[str, dict[str, bytes]]]:
    """The first `count` samples, reading (fetching) only the shards that hold them."""
    from shardcook import read_shard

    root = view.root
    shards = sorted(p for p in root.glob("*.tar") if p.is_file())  # never a FIFO or device
    if not shards:
        raise DatasetError(f"{root} holds no .tar shards to preview.")
    got: list[tuple[str, dict[str, bytes]]] = []
    for shard in shards:
        with view.fetched([shard.name]):
            for key, parts in read_shard(shard):
                got.append((key, dict(parts)))
                if len(got) == count:
                    return got
    return got


def mlperf_picture(key: str, parts: dict[str, bytes]) -> tuple[torch.Tensor, str]:
    """An MLPerf sample's posterior mean and its validation timestep, if any."""
    from shardcook.energon.mlperf import load_numpy_tensor

    latent = load_numpy_tensor(parts[MEAN_PART], key=key, part=MEAN_PART)
    meta = json.loads(parts.get(JSON_PART, b"{}"))
    t = meta.get(TIMESTEP_COLUMN) if isinstance(meta, dict) else None
    return latent, "" if t is None else f"timestep {t}"


def bridge_flux_picture(key: str, parts: dict[str, bytes]) -> tuple[torch.Tensor, str]:
    """A `megatron-bridge` sample's latent and the caption its json records."""
    from shardcook.energon.cookers import load_tensor

    latent = load_tensor(parts[LATENT_PART], key=key, part=LATENT_PART)
    try:
        meta = json.loads(parts.get(META_PART, b"{}"))
    except ValueError:  # not JSON, not UTF-8: the latent is still worth showing
        return latent, f"(the {META_PART} part is not valid JSON)"
    return latent, str(meta.get("caption", "")) if isinstance(meta, dict) else ""


def wan_picture(key: str, parts: dict[str, bytes]) -> tuple[torch.Tensor, str]:
    """A `wan` sample's first latent frame [C, h, w] and the caption its json records."""
    from shardcook.energon.cookers import load_tensor
    from shardcook.layouts.wan import LATENT_PART, META_PART

    latent = load_tensor(parts[LATENT_PART], key=key, part=LATENT_PART)
    try:
        meta = json.loads(parts.get(META_PART, b"{}"))
    except ValueError:
        return latent[:, 0], f"(the {META_PART} part is not valid JSON)"
    return latent[:, 0], str(meta.get("caption", "")) if isinstance(meta, dict) else ""


def preencoded_picture(key: str, parts: dict[str, bytes]) -> tuple[torch.Tensor, str]:
    """A `primus` sample's latent and caption."""
    from shardcook.energon.cookers import load_tensor

    latent = load_tensor(parts["latents.pth"], key=key, part="latents.pth")
    return latent, parts.get("caption.txt", b"").decode("utf-8", "replace")


def raw_picture(key: str, parts: dict[str, bytes]) -> tuple[PILImage.Image, str]:
    """A raw sample's image and caption."""
    from PIL import Image

    part = next((p for p in IMAGE_PARTS if p in parts), None)
    if part is None:
        raise DatasetError(f"sample {key} has no image part ({', '.join(parts)}).")
    img = Image.open(io.BytesIO(parts[part])).convert("RGB")
    return img, parts.get("txt", b"").decode("utf-8", "replace")


class _Decoder:
    def __init__(self, model_path: str, manifest: dict[str, Any], *, scaled: bool = True,
                 token_file: str | None = None) -> None:
        import torch

        from shardcook.jobs.encode.job import quiet_model_libraries

        quiet_model_libraries()
        from shardcook.encoders.flux import latent_factors
        from shardcook.encoders.loading import load_encoder, resolve_sources
        from shardcook.hftoken import resolve_token

        src = resolve_sources(model_path)["vae"]
        token, _ = resolve_token(token_file)
        vae, _ = load_encoder(src, token, torch.float32, "cpu")
        del token
        # the full path: type checkers read diffusers' top-level name as a torch-less placeholder
        from diffusers.models.autoencoders.autoencoder_kl import AutoencoderKL

        assert isinstance(vae, AutoencoderKL)  # load_encoder loads the VAE with its own class
        self.vae = vae
        f = latent_factors(dict(self.vae.config))
        self.scale: float = manifest.get("scaling_factor", f.scaling_factor) if scaled else 1.0
        self.shift: float = manifest.get("shift_factor", f.shift_factor) if scaled else 0.0

    def __call__(self, latent: torch.Tensor) -> np.ndarray:
        import torch

        with torch.inference_mode():
            z = latent.float()[None] / self.scale + self.shift
            x: torch.Tensor = self.vae.decode(z).sample[0]
        return ((x.clamp(-1, 1) + 1) * 127.5).round().to(torch.uint8).permute(1, 2, 0).numpy()


#: What reading one sample for its tile can raise: our decode errors, and PIL's and torch's on
#: damaged bytes or a tensor of the wrong shape (PIL's decompression-bomb error is no OSError).
TILE_ERRORS: tuple[type[Exception], ...] = (ShardcookError, OSError, ValueError, RuntimeError,
                                            IndexError)


def _decoder(layout: Layout, model_path: str, manifest: dict[str, Any],
             token_file: str | None) -> Callable[[torch.Tensor], np.ndarray]:
    """What decodes the layout's latents: its model family's decoder, else FLUX's VAE."""
    from shardcook.encoders.models import MODELS

    family = MODELS[layout.encode.model] if layout.encode else None
    if family is not None and family.decoder is not None:
        decoder: Callable[[torch.Tensor], np.ndarray] = family.function("decoder")(
            model_path, manifest, token_file)
        return decoder
    return _Decoder(model_path, manifest, scaled=bool(_latents_scaled(layout)),
                    token_file=token_file)


def _tile(layout: Layout, key: str, parts: dict[str, bytes],
          decode: Callable[[torch.Tensor], np.ndarray] | None) -> tuple[PILImage.Image, str]:
    """One sample's picture and caption, a latent shown decoded or in false colour."""
    from PIL import Image

    assert layout.reading.preview is not None  # _layout returns only layouts preview can show
    picture, caption = registry_function(layout.reading.preview)(key, parts)
    if _latents_scaled(layout) is None:
        image: PILImage.Image = picture
        return image, caption
    return Image.fromarray(decode(picture) if decode else false_colour(picture)), caption


def _unreadable_tile(error: Exception) -> tuple[PILImage.Image, str]:
    """A grey tile for a sample that cannot be shown; its caption says why."""
    from PIL import Image

    first = (str(error).splitlines() or [type(error).__name__])[0]
    return Image.new("RGB", (TILE, TILE), (200, 200, 200)), f"unreadable: {first}"


def _save(sheet: PILImage.Image, target: Path) -> None:
    """Writes the PNG under a temporary name beside `target`, then renames it; ConfigError in
    one sentence (and nothing left behind) when the folder cannot take it."""
    png = io.BytesIO()
    sheet.save(png, format="PNG")
    try:
        write_atomic(target, png.getvalue())
    except OSError as e:
        raise ConfigError(f"--out {str(target)!r} cannot be written ({e.strerror or e}); "
                          "choose a .png in a folder you can write to.") from None


#: One sample's tile: its picture and caption, from its key and parts.
Tiler = Callable[[str, dict[str, bytes]], "tuple[PILImage.Image, str]"]


def _folder_samples(location: Location, count: int, model_path: str | None,
                    hf_token_file: str | None, scratch_dir: str | Path | None
                    ) -> tuple[str, list[tuple[str, dict[str, bytes]]], Tiler]:
    """A dataset folder's name, its first `count` samples, and how its layout shows them."""
    with dataset_view(location, scratch_dir=scratch_dir) as view:
        root = view.root
        layout = _layout(root)
        rows = _first_samples(view, count)
        manifest = metadata.read_manifest(root) or {}
    scaled = _latents_scaled(layout)
    decode = (_decoder(layout, model_path, manifest, hf_token_file)
              if (model_path and scaled is not None) else None)
    return (root.resolve().name, rows,
            lambda key, parts: _tile(layout, key, parts, decode))


def json_picture(key: str, parts: dict[str, bytes]) -> tuple[PILImage.Image, str]:
    """A JSONL record as text (indented, non-ASCII escaped), and its size."""
    from PIL import Image, ImageDraw

    data = parts[PART]
    text = json.dumps(json.loads(data), indent=1)
    width, height = TILE // 6, TILE // 12  # the default font's characters
    lines = [piece for line in text.splitlines()
             for piece in textwrap.wrap(line, width, drop_whitespace=False) or [""]][:height]
    img = Image.new("RGB", (TILE, TILE), (245, 245, 245))  # the tile stands out of the sheet
    draw = ImageDraw.Draw(img)
    for n, line in enumerate(lines):
        draw.text((4, 2 + 12 * n), line, fill=(0, 0, 0))
    return img, f"{len(data):,} bytes"


def preview(directory: str | Path, out: str | Path | None = None, *, count: int = 16,
            model_path: str | None = None, columns: int | None = None,
            hf_token_file: str | None = None, scratch_dir: str | Path | None = None) -> Path:
    """Writes a contact sheet of the first `count` samples of `directory`; returns its path.

    Args:
        directory: The dataset folder, or its URL (`msc://PROFILE/path`, `s3://bucket/path`):
            then only the shards holding those samples are downloaded, into a folder under
            `scratch_dir` (default: the temporary folder) removed afterwards. A `.jsonl` file
            or URL: its first records, shown as text.
        hf_token_file: A file holding the Hugging Face token for a gated `model_path` (else
            HF_TOKEN, else the saved login); checked before any work, never printed.
    """
    import math

    from PIL import Image, ImageDraw

    from shardcook.hftoken import read_token_file

    location = locate(directory, "The dataset folder")
    if out is not None:
        check_local_path(out, "out")
    if count < 1:
        raise DatasetError(f"--count must be at least 1, not {count}.")
    if hf_token_file:
        read_token_file(hf_token_file)  # a missing or loose file stops here; the token is dropped
    what = dataset_kind(location)
    what.refuse_cache("`shardcook preview`")
    records = what.records
    if records is not None:
        name = records.name.removesuffix(JSONL_SUFFIX)
        rows = [(str(n), {PART: data}) for n, data in enumerate(records.first_records(count))]
        tile: Tiler = json_picture
    else:
        name, rows, tile = _folder_samples(location, count, model_path, hf_token_file,
                                           scratch_dir)
    tiles = []
    unreadable = 0
    for key, parts in rows:
        try:
            img, caption = tile(key, parts)
        except TILE_ERRORS as e:
            img, caption = _unreadable_tile(e)
            unreadable += 1
        k = TILE / max(img.size)  # fit the tile, enlarging small images (nearest: crisp)
        img = img.resize((max(1, round(img.width * k)), max(1, round(img.height * k))),
                         Image.Resampling.NEAREST if k >= 1 else Image.Resampling.LANCZOS)
        tiles.append((key, img, caption))
    cols = columns or min(len(tiles), math.ceil(math.sqrt(len(tiles))))
    nrows = math.ceil(len(tiles) / cols)
    line_h = 12
    cell_h = TILE + (CAPTION_LINES + 1) * line_h + 8
    sheet = Image.new("RGB", (cols * (TILE + 8) + 8, nrows * cell_h + 8), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for n, (key, img, caption) in enumerate(tiles):
        x0 = 8 + (n % cols) * (TILE + 8)
        y0 = 8 + (n // cols) * cell_h
        sheet.paste(img, (x0 + (TILE - img.width) // 2, y0 + (TILE - img.height) // 2))
        lines = [key, *textwrap.wrap(caption, width=TILE // 6)[:CAPTION_LINES]]
        for i, line in enumerate(lines):
            draw.text((x0, y0 + TILE + 2 + i * line_h), line, fill=(0, 0, 0))
    target = Path(out) if out else Path(f"{name}-preview.png")
    _save(sheet, target)
    if unreadable:
        log.warning("%d of the %d samples could not be read; their tiles say why.", unreadable,
                    len(tiles))
    return target

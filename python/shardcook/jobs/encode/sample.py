"""What a layout's part builder gets from `encode`: one sample's encoder outputs with what it
needs beside them. Each layout `encode` writes names its builder in the registry
(`Layout.part_builder`); `encode` imports it once per run.

The samples are family-neutral: the text is a dict of the family's named tensors (its registry
entry's `text.outputs`, e.g. FLUX's `prompt_embeds` and `pooled_prompt_embeds`), the latent is
what its `encode_pixels` gave, and `family` is its registry entry."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from shardcook.config import ImageConfig
    from shardcook.encoders.models import ModelFamily
    from shardcook.imaging import ImageResult
    from shardcook.sources.base import Item


@dataclass(frozen=True)
class EncodedSample:
    """One input after the encoders, its tensors on the CPU in the stored dtype.

    Attributes:
        item: The input (key, caption, source).
        result: The image core's result for its image.
        latent: The latent [C, h, w] (scaled unless the layout's encoders keep it raw).
        text: The family's text tensors by name (FLUX: `prompt_embeds` [L, D_t5],
            `pooled_prompt_embeds` [D_clip]).
        posterior: (mean, logvar) with `--latent-mode resample`, else ().
        image: The run's image options.
        facts: The run's latent facts: `latent_mode`, the encoders' `latent_facts` (FLUX:
            `scaling_factor`, `shift_factor`), `latent_seed`.
        family: The model family's registry entry.
    """

    item: Item
    result: ImageResult
    latent: torch.Tensor
    text: dict[str, torch.Tensor]
    posterior: tuple[torch.Tensor, ...]
    image: ImageConfig
    facts: dict[str, object]
    family: ModelFamily


@dataclass(frozen=True)
class EncodedClip:
    """One clip of a video input after the encoders (a video model's part builders get these).

    Attributes:
        item: The input (key, caption, source).
        key: The sample's key: Bridge's `{video:06}`, or `{video:06}_{frame:02}` for frames.
        latent: The normalised latent [C, T', h, w], on the CPU in the stored dtype.
        text: The family's text tensors by name (Wan: `prompt_embeds` [L, D]).
        frames: (frames encoded, height, width) of the clip's pixels.
        frame: (1-based index, clips of the video) in `--video-mode frames`, else None.
        settings: Bridge's `resize_settings`.
        facts: The run's facts the json records (latent_mode, processing_mode, ...).
        family: The model family's registry entry.
    """

    item: Item
    key: str
    latent: torch.Tensor
    text: dict[str, torch.Tensor]
    frames: tuple[int, int, int]
    frame: tuple[int, int] | None
    settings: dict[str, object]
    facts: dict[str, object]
    family: ModelFamily


#: A layout's `part_builder`: one sample's (part, bytes), in the layout's order.
PartBuilder = Callable[[EncodedSample], list[tuple[str, bytes]]]
#: A video layout's `part_builder`.
ClipPartBuilder = Callable[[EncodedClip], list[tuple[str, bytes]]]

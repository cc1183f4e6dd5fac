"""What a layout is: the parts one sample holds, which of them are required, and how Energon is
told to read them. Each layout is one declarative `Layout` in its own module of this package."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

#: A required part: one name, or a tuple of names of which any one will do.
Need = str | tuple[str, ...]

CRUDE_WEBDATASET = "megatron.energon:CrudeWebdataset"


def registry_function(spec: str) -> Any:
    """The object `module:name` that the layout registry names (a cooker, a checker, a task
    encoder); never a name a dataset gives."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Layout:
    """One on-disk sample layout.

    Attributes:
        name: The registry name (what `--layout` and the manifest say).
        encoding: The `encoding` recorded in the manifest and, for crude datasets, dataset.yaml's
            `subflavors.encoding`.
        parts: The parts a writer emits, in their order inside a sample.
        required: The parts every sample must have; a tuple means any one of them.
        sample_type: dataset.yaml's class, `module:Class`.
        subflavored: Whether dataset.yaml carries `subflavors: {encoding: ...}` (crude datasets
            selecting a cooker by subflavor) or names its own sample class and no subflavor.
        cooker: `module:function` of the Energon cooker that reads this layout, or None.
        checker: `module:function` of this layout's per-sample check beyond its parts' own
            decoding (tensor shapes, pickled image lists): called as `checker(parts, manifest,
            deep)` with a sample's parts and the dataset's manifest (or {}), it returns one
            sentence per problem. Named as a string so layouts import nothing heavy.
        split_checker: `module:function` of a check across the samples of each split, for
            `validate --deep` (shapes that agree, a field all or none carry), or None: called
            as `split_checker(root, split, shards)`, it returns one sentence per problem.
        split_folders: Each split is a folder of its own in the dataset (MLPerf's
            `OUTPUT_DIR/val/`, split part `val: val/.*`), and a dataset holding only a val or
            test split is whole; other layouts need a train split.
        task_encoder: `module:Class` of the shardcook task encoder `get_diffusion_loader` picks
            for this layout, or None (the user brings one).
        task_encoder_options: Which of the loader's `image_format` and `resample_latents` that
            class takes; a layout taking `resample_latents` holds a VAE posterior.
        posterior_parts: Parts holding an optional posterior (and `meta.json` its VAE factors)
            that resampling needs, checked on the first sample; empty when always present.
        preview: `module:function` called as `preview(key, parts)`, returning a sample's picture
            (a PIL image, or a latent [C, h, w] tensor) and caption for `shardcook preview`.
        latents_scaled: For a latent picture: whether it is stored scaled (VAE shift and
            scaling factor applied); None for layouts whose picture is an image.
        part_builder: `module:function` building one `encode` sample's parts from an
            `pipeline.encoded.EncodedSample`; None for layouts `encode` does not write.
        summary: What the layout stores, in a few words, for `encode --layout`'s help.
        encode_defaults: (option, value) pairs `encode` fills in when not given.
        latent_modes: The `--latent-mode` values `encode` accepts for this layout.
        stored_dtypes: The stored dtypes `encode` accepts (empty: any).
        encode_refusal: The sentence refusing a latent mode or dtype outside those two
            (`{latent_mode}` is filled in).
        encoder_facts: (key, value) pairs the manifest records for this layout's encoders;
            `latents_scaled` and `t5_attention_mask` there also set the encoders.
    """

    name: str
    encoding: str
    parts: tuple[str, ...]
    required: tuple[Need, ...]
    sample_type: str = CRUDE_WEBDATASET
    subflavored: bool = True
    cooker: str | None = None
    checker: str | None = None
    split_checker: str | None = None
    split_folders: bool = False
    task_encoder: str | None = None
    task_encoder_options: tuple[str, ...] = ()
    posterior_parts: tuple[str, ...] = ()
    preview: str | None = None
    latents_scaled: bool | None = None
    part_builder: str | None = None
    summary: str = ""
    encode_defaults: tuple[tuple[str, str], ...] = ()
    latent_modes: tuple[str, ...] = ()
    stored_dtypes: tuple[str, ...] = ()
    encode_refusal: str = ""
    encoder_facts: tuple[tuple[str, object], ...] = ()

    def encoder_fact(self, key: str, default: object) -> object:
        """The value this layout's `encoder_facts` give `key`, else `default`."""
        return dict(self.encoder_facts).get(key, default)

    def missing_parts(self, present: Collection[str]) -> list[str]:
        """The required parts a sample with parts `present` lacks, as `a|b` for alternatives."""
        missing = []
        for need in self.required:
            options = need if isinstance(need, tuple) else (need,)
            if not any(o in present for o in options):
                missing.append("|".join(options))
        return missing

    def dataset_yaml(self) -> dict[str, Any]:
        """dataset.yaml's content for this layout (before any field_map or extra subflavors)."""
        module, _, cls = self.sample_type.rpartition(":")
        out: dict[str, Any] = {"__module__": module, "__class__": cls}
        if self.subflavored:
            out["subflavors"] = {"encoding": self.encoding}
        return out

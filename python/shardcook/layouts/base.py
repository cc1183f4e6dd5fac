"""What a layout is: a small format core (the parts one sample holds, which of them are required,
its dataset.yaml), how it is read back (`Reading`) and, for the layouts `encode` writes, how it is
written (`EncodeSpec`). Each layout is one declarative `Layout` in its own module of this
package; every `module:name` is a string, so this package imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from shardcook.layouts.names import (
    DATASET_YAML,
    FINALIZE_JSON,
    INFO_JSON,
    META_DIR,
    OURS_DIR,
    SPLIT_YAML,
)

#: A required part: one name, or a tuple of names of which any one will do.
Need = str | tuple[str, ...]

CRUDE_WEBDATASET = "megatron.energon:CrudeWebdataset"
#: What reads a crude layout that declares no cooker or task encoder of its own: every part,
#: decoded as Energon's default decoder does (pickles left as bytes), batched by Energon's rules.
PARTS_COOKER = "shardcook.energon.cookers:cook_parts"
PARTS_TASK_ENCODER = "shardcook.energon:PartsTaskEncoder"
#: What a run's Energon finalize writes that the loader and validate need (finalize.json before
#: dataset.yaml: a finalize killed between them leaves the first without the second).
ENERGON_FINALIZED = (f"{OURS_DIR}/{FINALIZE_JSON}", f"{META_DIR}/{INFO_JSON}",
                     f"{META_DIR}/{SPLIT_YAML}", f"{META_DIR}/{DATASET_YAML}")


def registry_function(spec: str) -> Any:
    """The object `module:name` that the layout registry names (a cooker, a checker, a task
    encoder); never a name a dataset gives."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class Reading:
    """How a layout is read back: by Energon in training, by `validate`, `info` and `preview`.

    Attributes:
        cooker: `module:function` of the Energon cooker that reads this layout (`cook(sample,
            **options)`), or None for a layout Energon reads through its own sample class or
            the user's task encoder. Task encoders build their cookers from this.
        cooker_options: Which of the task encoder's options the cooker is given (`image_format`).
        reads_unmarked: The cooker also reads a dataset recording no `encoding` subflavor (one
            Primus or Megatron-Bridge wrote), when its task encoder is given explicitly.
        task_encoder: `module:Class` of the task encoder `get_diffusion_loader` picks for this
            layout, or None (the user brings one). Its cookers are those of every layout that
            names it.
        task_encoder_options: Which of the loader's `image_format` and `resample_latents` that
            class takes; a layout taking `resample_latents` holds a VAE posterior.
        posterior_parts: Parts holding an optional posterior (and `meta.json` its VAE factors)
            that resampling needs, checked on the first sample; empty when always present.
        checker: `module:function` of this layout's per-sample check beyond its parts' own
            decoding (tensor shapes, pickled image lists): called as `checker(parts, manifest,
            deep)` with a sample's parts and the dataset's manifest (or {}), it returns one
            sentence per problem.
        split_checker: `module:function` of a check across the samples of each split, for
            `validate --deep` (shapes that agree, a field all or none carry), or None: called
            as `split_checker(root, split, shards)`, it returns one sentence per problem.
        agreement: `module:function` of what every sample of a split shares, for `validate
            --deep` (the parts, tensor ranks and channels, the kind of sample): called as
            `agreement(key, parts)`, it returns {fact: value} (None: not readable), and a
            sample whose facts differ from its split's first sample's is a problem; None: no
            such check.
        timesteps: `module:function` counting the validation timesteps of the val split's
            samples (`timesteps(root, shards) -> {timestep: count}`), which `info` shows, or None.
        preview: `module:function` called as `preview(key, parts)`, returning a sample's picture
            (a PIL image, or a latent [C, h, w] tensor) and caption for `shardcook preview`.
    """

    cooker: str | None = PARTS_COOKER
    cooker_options: tuple[str, ...] = ()
    reads_unmarked: bool = False
    task_encoder: str | None = PARTS_TASK_ENCODER
    task_encoder_options: tuple[str, ...] = ()
    posterior_parts: tuple[str, ...] = ()
    checker: str | None = None
    split_checker: str | None = None
    agreement: str | None = None
    timesteps: str | None = None
    preview: str | None = None


#: A layout whose samples shardcook does not cook: Energon's sample class, or the user's task
#: encoder, reads them.
NOT_COOKED = Reading(cooker=None, task_encoder=None)


@dataclass(frozen=True)
class EncodeSpec:
    """How `encode --layout` writes a layout.

    Attributes:
        part_builder: `module:function` building one sample's parts from a
            `jobs.encode.sample.EncodedSample`.
        summary: What the layout stores, in a few words, for `encode --layout`'s help.
        defaults: (option, value) pairs `encode` fills in when not given.
        latent_modes: The `--latent-mode` values `encode` accepts for this layout.
        stored_dtypes: The stored dtypes `encode` accepts (empty: any).
        refusal: The sentence refusing a latent mode or dtype outside those two
            (`{latent_mode}` is filled in).
        latents_scaled: Whether the latent picture is stored scaled (VAE shift and scaling
            factor applied).
        encoder_facts: (key, value) pairs the manifest records for this layout's encoders;
            `latents_scaled` and `t5_attention_mask` there also set the encoders.
        model: The model family whose encoders write it (a key of `encoders.models.MODELS`,
            whose entry declares its encoders, input kind, sizes, text and latents).
        job: `module:Class` of the job writing it, when not `encode`'s own (`EncodeJob`'s
            subclass for a layout whose inputs, samples or finalize differ), else None.
        model_by_type: The family is the one `--model-type` names (NeMo AutoModel's processor
            names, which each family's `automodel` entry declares), not `model`.
    """

    part_builder: str
    summary: str
    defaults: tuple[tuple[str, str], ...]
    latent_modes: tuple[str, ...]
    latents_scaled: bool
    stored_dtypes: tuple[str, ...] = ()
    refusal: str = ""
    encoder_facts: tuple[tuple[str, object], ...] = ()
    model: str = "flux"
    job: str | None = None
    model_by_type: bool = False

    def encoder_fact(self, key: str, default: object) -> object:
        """The value this layout's `encoder_facts` give `key`, else `default`."""
        return dict(self.encoder_facts).get(key, default)


@dataclass(frozen=True)
class Layout:
    """One on-disk sample layout.

    Attributes:
        name: The registry name (what `--layout` and the manifest say).
        encoding: The `encoding` recorded in the manifest and, for crude datasets, dataset.yaml's
            `subflavors.encoding` (docs/FORMAT.md §3 maps names to encodings).
        parts: The parts a writer emits, in their order inside a sample.
        required: The parts every sample must have; a tuple means any one of them.
        sample_type: dataset.yaml's class, `module:Class`.
        subflavored: Whether dataset.yaml carries `subflavors: {encoding: ...}` (crude datasets
            selecting a cooker by subflavor) or names its own sample class and no subflavor.
        split_folders: Each split is a folder of its own in the dataset (MLPerf's
            `OUTPUT_DIR/val/`, split part `val: val/.*`), and a dataset holding only a val or
            test split is whole; other layouts need a train split.
        reading: How it is read back (cooker, task encoder, checkers, preview).
        encode: How `encode` writes it, or None for layouts `encode` does not write.
        field_map_from: For a sample class built by Energon's generic webdataset factory, which
            refuses a dataset.yaml with neither a `field_map` nor a `sample_loader`: the
            `module:function` giving the field_map from the part names the shards hold (it
            raises ValueError, saying why, when they fit no field_map). None for other classes.
        finalized: The files, inside the dataset, a run's finalize writes last: all present,
            `status` calls the run complete.
    """

    name: str
    encoding: str
    parts: tuple[str, ...]
    required: tuple[Need, ...]
    sample_type: str = CRUDE_WEBDATASET
    subflavored: bool = True
    split_folders: bool = False
    reading: Reading = field(default_factory=Reading)
    encode: EncodeSpec | None = None
    field_map_from: str | None = None
    finalized: tuple[str, ...] = ENERGON_FINALIZED

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

"""What a layout is: the parts one sample holds, which of them are required, and how Energon is
told to read them. Each layout is one declarative `Layout` in its own module of this package."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

#: A required part: one name, or a tuple of names of which any one will do.
Need = str | tuple[str, ...]

CRUDE_WEBDATASET = "megatron.energon:CrudeWebdataset"


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
        split_folders: Each split is a dataset folder of its own (MLPerf's `OUTPUT_DIR/val`), so
            a folder holding only a val or test split is whole; other layouts need a train split.
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

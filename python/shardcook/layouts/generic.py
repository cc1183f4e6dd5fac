"""Any WebDataset tars, read as Energon's crude samples (`finalize --encoding generic`): the
dataset.yaml `energon prepare --sample-type CrudeWebdataset` writes, no part required, no cooker
of ours (the user's task encoder cooks the samples). With `--sample-type`/`--field-map`, finalize
writes a typed dataset.yaml instead, as `energon prepare` does for a sample class."""

from shardcook.layouts.base import NOT_COOKED, Layout

GENERIC = Layout(
    name="generic",
    encoding="generic",
    parts=(),
    required=(),
    subflavored=False,
    reading=NOT_COOKED,
)

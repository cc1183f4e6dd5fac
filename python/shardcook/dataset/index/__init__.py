"""The index of a finished folder of shards: what Energon's `.nv-meta` holds, its splits and
the renames of repeated keys, built from the shards' own bytes or from what a run recorded."""

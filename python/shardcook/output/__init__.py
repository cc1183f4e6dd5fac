"""A run's output folder: the protocol the engine writes through (`folder`), its local and bucket
implementations (`local`, `bucket`, with `uploader`), one run at a time (`lock`), where a run may
write (`place`) and what `--overwrite` deletes (`overwrite`)."""

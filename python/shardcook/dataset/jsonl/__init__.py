"""JSONL datasets: a `.jsonl` file and its `.jsonl.idx`, read and indexed through the folder's
store."""

"""`torchrun --nproc_per_node=2 -m shardcook chatml` writes the same bytes as one process."""

from __future__ import annotations

import sys

from tests.helpers.chatml import turns, write_images, write_jsonl
from tests.helpers.raw import report, run_cli, shard_hashes


def test_torchrun_two_ranks_match_one_process(tmp_path):
    names = write_images(tmp_path / "in", 4, photos=1)
    records = [{"id": f"s{i}", "images": [names[i % 4], names[(i + 1) % 4]][: 1 + i % 2],
                "conversation": turns(1 + i % 2)} for i in range(30)]
    records[7]["conversation"] = turns(3)  # a skip on one rank
    jsonl = write_jsonl(tmp_path / "in" / "d.jsonl", records)
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["chatml", "--input", str(jsonl), "--shard-size", "4", "--val-fraction", "0.25",
              "--workers", "1", "--quiet"]
    run_cli(*common, "--output-dir", str(one))
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2")
    r = run_cli(*common, "--output-dir", str(two), prefix=torchrun)
    assert "Traceback" not in r.stderr
    assert report(two)["world_size"] == 2
    hashes = shard_hashes(two)
    assert any(n.startswith("val-shard-") for n in hashes)
    assert any(n.startswith("train-shard-") for n in hashes)
    assert hashes == shard_hashes(one)
    for name in (".info.json", "split.yaml", "dataset.yaml"):
        assert (two / ".nv-meta" / name).read_bytes() == (one / ".nv-meta" / name).read_bytes()
    for key in ("num_inputs", "num_written", "skipped_by_reason", "shards"):
        assert report(two)[key] == report(one)[key]
    assert report(one)["skipped_by_reason"] == {"image_count_mismatch": 1}

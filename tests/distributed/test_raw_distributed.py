"""`torchrun --nproc_per_node=2 -m shardcook raw` writes the same bytes as one process."""

from __future__ import annotations

import sys

from tests.helpers.raw import make_folder, report, run_cli, shard_hashes


def test_torchrun_two_ranks_match_one_process(tmp_path):
    src = make_folder(tmp_path / "in", 23, photos=6)
    (src / "images" / "0005.jpg").write_bytes(b"broken")  # a skip on one rank
    one, two = tmp_path / "one", tmp_path / "two"
    common = ["raw", "--input-dir", str(src), "--shard-size", "3", "--image-size", "48",
              "--split", "0.75,0.25,0", "--workers", "1", "--quiet"]
    run_cli(*common, "--output-dir", str(one))
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2")
    r = run_cli(*common, "--output-dir", str(two), prefix=torchrun)
    assert "Traceback" not in r.stderr
    assert report(two)["world_size"] == 2
    assert report(one)["world_size"] == 1
    hashes = shard_hashes(two)
    assert len(hashes) == 2 * 8  # 8 shards and their .tar.idx
    assert hashes == shard_hashes(one)
    for name in (".info.json", "split.yaml", "dataset.yaml"):
        assert (two / ".nv-meta" / name).read_bytes() == (one / ".nv-meta" / name).read_bytes()
    for key in ("num_inputs", "num_written", "skipped_by_reason", "shards"):
        assert report(two)[key] == report(one)[key]
    assert [(s["key"], s["reason"]) for s in report(two)["skipped"]] == [
        (s["key"], s["reason"]) for s in report(one)["skipped"]]
    assert ("0000000005", "decode_error") in [(s["key"], s["reason"])
                                              for s in report(one)["skipped"]]
    # every rank did its own units: (u % 2 == rank)
    assert report(two)["units"] == {"total": 8, "resumed": 0, "this_run": 8}


def test_plan_units_and_rank_assignment():
    from shardcook.pipeline.ledger import Split, units_for
    from shardcook.pipeline.plan import plan_units, sample_key
    from shardcook.runtime.workers import Place

    units = plan_units(10, 4)
    assert [(u.unit, u.start, u.stop, u.name) for u in units] == [
        (0, 0, 4, "000000.tar"), (1, 4, 8, "000001.tar"), (2, 8, 10, "000002.tar")]
    assert sample_key(42) == "0000000042"
    assert plan_units(0, 4) == []
    for world in (1, 2, 3, 5):
        def mine(rank: int, world: int = world) -> list:
            return units_for(plan_units(23, 2), Place("torchrun", rank, world),
                             Split(world, 12, "torchrun"))

        taken = [u.unit for r in range(world) for u in mine(r)]
        assert sorted(taken) == list(range(12))  # every unit exactly once
        assert all(u.unit % world == 1 for u in mine(1)) or world == 1


def test_torchrun_bad_setup_stops_every_rank(tmp_path):
    """Rank 0 finds the problem (a different earlier run); every rank stops, and the sentence
    is said once, by rank 0, not once per rank."""
    src = make_folder(tmp_path / "in", 4, photos=0)
    out = tmp_path / "out"
    base = ["raw", "--input-dir", str(src), "--output-dir", str(out), "--shard-size", "1",
            "--quiet", "--no-finalize"]
    run_cli(*base, "--image-size", "32")
    before = shard_hashes(out)
    torchrun = (sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2")
    r = run_cli(*base, "--image-size", "48", prefix=torchrun, check=False)
    assert r.returncode != 0
    assert r.stderr.count("holds a run made with different options (image_size: 32 -> 48)") == 1
    assert r.stderr.count("error: ") == 1
    assert shard_hashes(out) == before

"""`ingest` runs on the shared engine: a bucket is its output folder (finalize and validate
there), and a shard renamed into place before its marker was written is redone, not refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from shardcook.dataset import info, validate

from tests.helpers.mlperf import write_arrow_set


def _ingest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "shardcook", "ingest", *args],
                          check=False, capture_output=True, text=True, timeout=300)


def test_ingest_into_a_bucket_writes_the_dataset_there(s3_store, tmp_path, monkeypatch):
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    val = write_arrow_set(tmp_path / "coco", 1, 3, timesteps=True, key_prefix="v")
    monkeypatch.chdir(tmp_path)
    url = s3_store.url("mlperf")
    assert (run := _ingest(str(train.folder), "--output-dir", url)).returncode == 0, run.stderr
    assert (run := _ingest(str(val.folder), "--split-part", "val", "--output-dir", url)
            ).returncode == 0, run.stderr
    assert not (tmp_path / "msc:").exists()
    keys = s3_store.keys()
    assert {"mlperf/train/train-shard-000000.tar", "mlperf/train/train-shard-000001.tar",
            "mlperf/val/val-shard-000000.tar", "mlperf/.nv-meta/split.yaml"} <= set(keys), keys
    report = validate(url, deep=True)
    assert report.ok, report.problems
    assert {split: s.samples for split, s in info(url).splits.items()} == {"train": 6, "val": 3}


def test_a_shard_without_its_marker_is_redone(tmp_path):
    """A kill after a shard got its name but before its marker: the rerun writes it again."""
    train = write_arrow_set(tmp_path / "in", 3, 2, timesteps=False)
    out = tmp_path / "out"
    assert _ingest(str(train.folder), "--output-dir", str(out), "--no-finalize").returncode == 0
    shard = out / "train" / "train-shard-000001.tar"
    before = shard.read_bytes()
    (out / ".shardcook" / "progress" / "000001.json").unlink()
    for _ in range(2):  # and again: nothing is left that wedges a later run
        run = _ingest(str(train.folder), "--output-dir", str(out), "--no-finalize")
        assert run.returncode == 0, run.stderr
    assert shard.read_bytes() == before
    assert (out / ".shardcook" / "progress" / "000001.json").is_file()


def test_a_run_makes_one_output_folder(tmp_path, monkeypatch):
    """The job reads an earlier run's inputs and checks its own against the folder through the
    folder the engine hands it: a first run and a resumed one each make one `RunFolder`."""
    from shardcook.config.ingest import IngestConfig, IngestDataset
    from shardcook.jobs.ingest.run import run_ingest
    from shardcook.output.runfolder import RunFolder

    made: list[object] = []
    init = RunFolder.__init__

    def counted(self: RunFolder, *args: object, **kwargs: object) -> None:
        made.append(self)
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(RunFolder, "__init__", counted)
    train = write_arrow_set(tmp_path / "in", 2, 2, timesteps=False)
    cfg = IngestConfig(output_dir=str(tmp_path / "out"),
                       datasets=[IngestDataset(split="train", paths=(train.folder,))])
    for _ in range(2):
        made.clear()
        report = run_ingest(cfg)
        assert len(made) == 1
    assert report["units"]["resumed"] == 2


def test_a_bucket_run_removes_the_downloads_a_killed_one_left_on_this_machine(s3_store, tmp_path):
    """A bucket run downloads into a folder of its own under the scratch folder; one that was
    killed left it (with whatever it had downloaded), and the next run on the same machine
    removes it. A running process's folder, another machine's and one without an owner stay."""
    from shardcook.output.lock import machine_id

    scratch = tmp_path / "scratch"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    owners = {"killed": {"machine": machine_id(), "pid": gone.pid},
              "running": {"machine": machine_id(), "pid": os.getpid()},
              "elsewhere": {"machine": "another-boot:1", "pid": gone.pid}}
    for name, owner in owners.items():
        folder = scratch / f"shardcook-ingest-{name}"
        (folder / "downloads" / "train").mkdir(parents=True)
        (folder / "downloads" / "train" / "part.arrow").write_bytes(b"x" * 1000)
        (folder / "owner.json").write_text(json.dumps(owner))
    (scratch / "shardcook-ingest-unowned").mkdir()
    train = write_arrow_set(tmp_path / "cc12m", 2, 3, timesteps=False)
    run = subprocess.run([sys.executable, "-m", "shardcook", "ingest", str(train.folder),
                          "--output-dir", s3_store.url("mlperf")], check=False,
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, TMPDIR=str(scratch)))
    assert run.returncode == 0, run.stderr
    left = sorted(p.name for p in scratch.iterdir())
    assert left == ["shardcook-ingest-elsewhere", "shardcook-ingest-running",
                    "shardcook-ingest-unowned"], left

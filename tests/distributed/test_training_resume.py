"""Resuming a two-process training run with the save/restore code of Megatron-LM, Primus and
Energon's guide: the resumed run reads on exactly where the stopped one was (no silent restart),
for every layout and a blend, with and without worker processes; and with tensor parallelism the
ranks of one replica read the same batches.

The loops are `tests/helpers/training_loop.py` under torchrun (gloo on 127.0.0.1); one launch saves
every case and a second, new launch restores them all, so the matrix costs two start-ups.
Megatron-LM's pattern runs on every layout; the other patterns differ only in how the state
travels (the state itself has the same structure for every webdataset layout), so they run on the
pre-encoded dataset and the blend of pre-encoded and raw.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from shardcook.energon import write_blend

from tests.helpers.energon import make_bridge_flux_dataset, make_encoded_dataset, make_raw_dataset

REPO = Path(__file__).resolve().parents[2]
PATTERNS = ("megatron", "primus", "energon-rank", "energon-global")
DATASETS = ("encoded", "raw", "bridge-flux", "blend")
CASES = [(d, w, p) for d in DATASETS for w in (0, 2) for p in PATTERNS]

pytest.importorskip("megatron.core", reason="needs megatron-core (pip install --no-deps)")


def _name(dataset: str, workers: int, pattern: str) -> str:
    return f"{dataset}-w{workers}-{pattern}"


def _torchrun(*args: str | Path, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "tests.helpers.training_loop", *map(str, args)]
    r = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise AssertionError(f"{cmd} failed ({r.returncode}):\n{r.stdout[-4000:]}\n"
                             f"{r.stderr[-8000:]}")
    return r


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    paths = {
        "encoded": make_encoded_dataset(root / "encoded", 24, shard_size=6).path,
        "raw": make_raw_dataset(root / "raw", 24, shard_size=6, sizes=[(16, 16)]).path,
        "bridge-flux": make_bridge_flux_dataset(root / "bridge", 24, shard_size=6).path,
    }
    paths["blend"] = write_blend(root / "mix.yaml", [f"{paths['encoded']}=1", f"{paths['raw']}=1"])
    return root, paths


@pytest.fixture(scope="module")
def resumed(datasets):
    """Runs the save launch and the restore launch over every case; returns the output folder
    and what the restore launch printed."""
    root, paths = datasets
    spec = [{"name": _name(d, w, p), "path": str(paths[d]), "workers": w, "pattern": p}
            for d, w, p in CASES]
    (root / "spec.json").write_text(json.dumps(spec))
    out = root / "out"
    _torchrun("save", root / "spec.json", out)
    restored = _torchrun("restore", root / "spec.json", out)
    return out, restored.stdout + restored.stderr


def _drawn(out: Path, name: str, rank: int, phase: str) -> dict:
    return json.loads((out / name / f"rank{rank}.{phase}.json").read_text())


@pytest.mark.parametrize("dataset, workers, pattern", CASES,
                         ids=[_name(*case) for case in CASES])
def test_resumed_run_reads_on_where_the_stopped_one_was(resumed, dataset, workers, pattern):
    out, printed = resumed
    assert "Skipping" not in printed  # Megatron's provider swallowed a refused state
    name = _name(dataset, workers, pattern)
    for rank in (0, 1):
        saved = _drawn(out, name, rank, "save")
        assert _drawn(out, name, rank, "restore")["after"] == saved["after"], f"rank {rank}"
        # Teeth: starting over would have given other batches.
        assert saved["before"][:len(saved["after"])] != saved["after"]
    # The two data-parallel ranks read different samples.
    assert _drawn(out, name, 0, "save")["after"] != _drawn(out, name, 1, "save")["after"]


def test_tensor_parallel_ranks_of_one_replica_read_the_same_batches(datasets):
    """TP=2 x DP=1 with megatron.core.parallel_state initialized and no data_parallel_group=:
    both ranks are data rank 0 of 1, so each gets every batch, identical on both."""
    root, paths = datasets
    spec = [{"name": f"tp-w{w}", "path": str(paths["encoded"]), "workers": w} for w in (0, 2)]
    (root / "tp.json").write_text(json.dumps(spec))
    out = root / "tp"
    _torchrun("tp", root / "tp.json", out)
    for case in spec:
        rank0 = json.loads((out / case["name"] / "rank0.tp.json").read_text())
        rank1 = json.loads((out / case["name"] / "rank1.tp.json").read_text())
        assert rank0 == rank1
        assert len({k for batch in rank0 for k in batch["keys"]}) > 2


def test_a_state_of_another_data_parallel_size_is_refused_on_every_rank(datasets):
    """Saved by one rank, restored by two: every restore path, on both ranks, says both sizes
    (with `src_rank`, the rank without the list is told too, not left waiting)."""
    import torch
    from shardcook.energon import get_diffusion_loader

    root, paths = datasets
    with get_diffusion_loader(paths["encoded"], batch_size=2, num_workers=0, rank=0,
                              world_size=1) as one:
        next(one)
        torch.save(one.save_state_global(0), root / "one_rank.pth")
    spec = [{"name": "resize", "path": str(paths["encoded"]), "workers": 0,
             "pattern": "energon-global", "state": str(root / "one_rank.pth")}]
    (root / "resize.json").write_text(json.dumps(spec))
    _torchrun("resize", root / "resize.json", root / "resize", timeout=300)
    for rank in (0, 1):
        said = json.loads((root / "resize" / "resize" / f"rank{rank}.resize.json").read_text())
        assert len(said) == 6, said
        for path, message in said.items():
            assert message.startswith("This loader state was saved at data-parallel size 1 but "
                                      "the loader reads at data-parallel size 2"), (rank, path)

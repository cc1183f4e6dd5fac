"""A Megatron-style training loop's data side, run by torchrun on two processes (gloo on
127.0.0.1), to test that a resumed run reads on exactly where the stopped one was.

`save` draws K batches per case, saves the loader state the way the case's pattern does, then
draws M more (what an uninterrupted run gives) and exits; `restore`, in new processes, builds the
loaders again, restores them the same way and draws M batches; `tp` draws batches with tensor
parallelism 2 (one data-parallel replica). Every rank writes what it drew (keys and a digest of
the tensors of each batch) to OUT/<case>/rank<r>.<phase>.json. `resize` hands a state saved at
another data-parallel size (the case's `state` file: what `save_state_global` gathered) to every
restore path and writes what each path said to OUT/<case>/rank<r>.resize.json.

Patterns (what the training code around the loader does):

- `megatron`: Megatron-LM. Saving is `maybe_save_dataloader_state` of
  megatron/training/checkpointing.py (NVIDIA/Megatron-LM), re-typed below: the state comes from
  `train_iterator.iterable.save_state()` on a `RerunDataIterator` and is `torch.save`d per
  data-parallel rank; restoring is examples/multimodal/dataloader_provider.py's: `torch.load`
  (default `weights_only`) and `restore_state_rank`, where any exception prints "Skipping" and
  the data starts over.
- `primus`: Primus's wrapper over a plain `get_savable_loader`: `save_state()`/`restore_state()`.
- `energon-rank`: Energon's "Save and Restore" guide, scenario 1, on the Energon loader itself:
  `save_state_rank()` / `torch.load` / `restore_state_rank()`.
- `energon-global`: the guide's scenario 2: `save_state_global(global_dst_rank=0)`, rank 0 saves
  and loads, `restore_state_global(state, src_rank=0)`.

Usage: torchrun --nproc-per-node 2 -m tests.helpers.training_loop PHASE SPEC.json OUT
SPEC is a list of {"name", "path", "workers", "pattern"}.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

K, M, BATCH = 5, 4, 2
TENSORS = ("latents", "prompt_embeds", "pooled_prompt_embeds", "images")


def _field(batch: Any, name: str) -> Any:
    if isinstance(batch, Mapping) and name in batch:
        return batch[name]
    return getattr(batch, name, None)


def fingerprint(batch: Any) -> dict[str, Any]:
    """The keys of a batch and a sha256 of each of its tensors."""
    out: dict[str, Any] = {"keys": list(_field(batch, "__key__") or [])}
    for name in TENSORS:
        value = _field(batch, name)
        if isinstance(value, torch.Tensor):
            out[name] = hashlib.sha256(value.contiguous().view(torch.uint8).numpy()).hexdigest()
    return out


def build(case: dict[str, Any]) -> Any:
    """The training code's data iterator for a case."""
    from shardcook.energon import MegatronDataloaderWrapper, get_diffusion_loader, task_encoder_for

    common = {"batch_size": BATCH, "shuffle_buffer_size": 4, "max_samples_per_sequence": 2}
    if case["pattern"] != "primus":
        return get_diffusion_loader(case["path"], num_workers=case["workers"],
                                    checkpoint_every_min_n_samples=2, **common)
    from megatron.energon import WorkerConfig, get_savable_loader, get_train_dataset

    dataset = get_train_dataset(
        case["path"], split_part="train",
        worker_config=WorkerConfig.default_worker_config(num_workers=case["workers"]),
        task_encoder=task_encoder_for(case["path"], image_format="tensor"), **common)
    return MegatronDataloaderWrapper(get_savable_loader(dataset))


# --- Megatron-LM, re-typed (sources named in the module docstring) ----------------------------


def get_checkpoint_name(checkpoints_path: str, iteration: int, *, basename: str) -> str:
    """megatron/training/checkpointing.py's name without tensor or pipeline parallelism."""
    return os.path.join(checkpoints_path, f"iter_{iteration:07d}", "mp_rank_00", basename)


def maybe_save_dataloader_state(train_iterator: Any, iteration: int,
                                dataloader_save_path: str | None) -> None:
    from megatron.core import parallel_state as mpu

    if train_iterator is None or dataloader_save_path is None or dataloader_save_path == "":
        return
    if not hasattr(train_iterator.iterable, "save_state"):
        raise RuntimeError(
            f"Could not find a save_state for the train_iterator of type {type(train_iterator)}")
    first_rank = (mpu.is_pipeline_first_stage(ignore_virtual=True)
                  and mpu.get_tensor_model_parallel_rank() == 0)
    if not first_rank:
        return
    dp_rank = mpu.get_data_parallel_rank()
    train_dataloader_state_dict = train_iterator.iterable.save_state()
    data_state_save_path = get_checkpoint_name(
        dataloader_save_path, iteration, basename=f"train_dataloader_dprank{dp_rank:03d}.pt")
    torch.distributed.barrier(group=mpu.get_data_parallel_group())
    if mpu.get_data_parallel_rank() == 0:
        os.makedirs(os.path.dirname(data_state_save_path), exist_ok=True)
    torch.distributed.barrier(group=mpu.get_data_parallel_group())
    dataloader_save_dict = {"dataloader_state_dict": train_dataloader_state_dict}
    torch.save(dataloader_save_dict, data_state_save_path)


def megatron_restore(train_dataloader: Any, dataloader_save: str, iteration: int) -> None:
    """The restore in examples/multimodal/dataloader_provider.py."""
    from megatron.core import parallel_state

    dp_rank = parallel_state.get_data_parallel_rank()
    data_save_name = get_checkpoint_name(
        dataloader_save, iteration, basename=f"train_dataloader_dprank{dp_rank:03d}.pt")
    if os.path.exists(data_save_name):
        try:
            dataset_state_dict = torch.load(data_save_name, map_location="cpu")
            train_dataloader.restore_state_rank(dataset_state_dict["dataloader_state_dict"])
            print(f"restored dataset state from {data_save_name}")
        except Exception as e:  # noqa: BLE001 (Megatron's own code: it swallows everything)
            print("loading dataset state failed. Skipping. " + str(e))
    else:
        print(f"dataset state {data_save_name} does not exist")


# --- the patterns -----------------------------------------------------------------------------


def save(case: dict[str, Any], train_iter: Any, folder: Path, rank: int) -> Any:
    """Saves the state after K batches; returns the data iterator the loop goes on with."""
    pattern = case["pattern"]
    if pattern == "megatron":
        from megatron.core.rerun_state_machine import RerunDataIterator

        iterator = RerunDataIterator(train_iter)
        maybe_save_dataloader_state(iterator, K, str(folder))
        return iterator
    if pattern == "primus":
        torch.save(train_iter.save_state(), folder / f"rank{rank}.pt")
    elif pattern == "energon-rank":
        torch.save(train_iter.loader.save_state_rank(), folder / f"dataloader_state_rank{rank}.pth")
    elif pattern == "energon-global":
        state = train_iter.save_state_global(global_dst_rank=0)
        if rank == 0:
            torch.save(state, folder / "dataloader_state.pth")
    return train_iter


def restore(case: dict[str, Any], train_iter: Any, folder: Path, rank: int) -> None:
    pattern = case["pattern"]
    if pattern == "megatron":
        megatron_restore(train_iter, str(folder), K)
    elif pattern == "primus":
        train_iter.restore_state(torch.load(folder / f"rank{rank}.pt"))
    elif pattern == "energon-rank":
        state = torch.load(folder / f"dataloader_state_rank{rank}.pth")
        train_iter.loader.restore_state_rank(state)
    elif pattern == "energon-global":
        state = torch.load(folder / "dataloader_state.pth") if rank == 0 else None
        train_iter.restore_state_global(state, src_rank=0)


def resize(case: dict[str, Any], out: Path, rank: int) -> None:
    """What each restore path says to a state of another data-parallel size (no batch drawn)."""
    from shardcook.energon import LoaderStateError

    states = torch.load(case["state"])
    paths = {
        "wrapper.restore_state": lambda w: w.restore_state(states[0]),
        "loader.restore_state_rank": lambda w: w.loader.restore_state_rank(states[0]),
        "wrapper.restore_state_global": lambda w: w.restore_state_global(states),
        "loader.restore_state_global": lambda w: w.loader.restore_state_global(states),
        "wrapper.restore_state_global(src_rank=0)": lambda w: w.restore_state_global(
            states if rank == 0 else None, src_rank=0),
        "loader.restore_state_global(src_rank=0)": lambda w: w.loader.restore_state_global(
            states if rank == 0 else None, src_rank=0),
    }
    said: dict[str, str] = {}
    folder = out / case["name"]
    folder.mkdir(parents=True, exist_ok=True)
    for name, restore_with in paths.items():
        with build(case) as train_iter:
            try:
                restore_with(train_iter)
                said[name] = "restored"
            except LoaderStateError as e:
                said[name] = str(e)
        (folder / f"rank{rank}.resize.json").write_text(json.dumps(said))


def run_case(phase: str, case: dict[str, Any], out: Path, rank: int) -> None:
    folder = out / case["name"]
    folder.mkdir(parents=True, exist_ok=True)
    dist.barrier()
    drawn: dict[str, list[dict[str, Any]]] = {}
    train_iter = build(case)
    if phase == "save":
        drawn["before"] = [fingerprint(next(train_iter)) for _ in range(K)]
        iterator = save(case, train_iter, folder, rank)
        drawn["after"] = [fingerprint(next(iterator)) for _ in range(M)]
    else:
        restore(case, train_iter, folder, rank)
        drawn["after"] = [fingerprint(next(train_iter)) for _ in range(M)]
    train_iter.close()
    (folder / f"rank{rank}.{phase}.json").write_text(json.dumps(drawn))


def main() -> None:
    phase, spec, out = sys.argv[1], json.loads(Path(sys.argv[2]).read_text()), Path(sys.argv[3])
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    from megatron.core import parallel_state

    parallel_state.initialize_model_parallel(tensor_model_parallel_size=2 if phase == "tp" else 1)
    if phase == "tp":
        from shardcook.energon import get_diffusion_loader

        for case in spec:
            with get_diffusion_loader(case["path"], batch_size=BATCH,
                                      num_workers=case["workers"]) as train_iter:
                batches = [fingerprint(next(train_iter)) for _ in range(K)]
            folder = out / case["name"]
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"rank{rank}.tp.json").write_text(json.dumps(batches))
    elif phase == "resize":
        for case in spec:
            resize(case, out, rank)
    else:
        for case in spec:
            run_case(phase, case, out, rank)
    dist.barrier()
    parallel_state.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

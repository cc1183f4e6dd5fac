"""torchrun integration: rank and world size from the environment, CPU (gloo) barriers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any


@dataclass(frozen=True)
class Dist:
    """This process's place in a (possibly single-process) run."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Waits until every rank gets here (no-op when alone)."""
        if self.world_size > 1:
            import torch.distributed as tdist

            tdist.barrier()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (a picklable object)."""
        if self.world_size == 1:
            return value
        import torch.distributed as tdist

        box = [value]
        tdist.broadcast_object_list(box, src=0)
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every rank's `value`, in rank order, on every rank."""
        if self.world_size == 1:
            return [value]
        import torch.distributed as tdist

        out: list[Any] = [None] * self.world_size
        tdist.all_gather_object(out, value)
        return out

    def close(self) -> None:
        if self.world_size > 1:
            import torch.distributed as tdist

            if tdist.is_initialized():
                tdist.destroy_process_group()


def env_rank_world() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) as torchrun sets them; (0, 1) outside torchrun."""
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def init(backend: str = "gloo", timeout_s: float = 7 * 24 * 3600.0) -> Dist:
    """Joins the torchrun process group when WORLD_SIZE > 1 (gloo for CPU work, nccl for GPU).

    The timeout is long on purpose: the only collectives are at the start and at the end, and a
    rank whose units were all done before a resume waits there for the others' whole run.
    """
    rank, world = env_rank_world()
    if world <= 1:
        return Dist(0, 1)
    import torch.distributed as tdist

    if not tdist.is_initialized():
        tdist.init_process_group(backend=backend, rank=rank, world_size=world,
                                 timeout=timedelta(seconds=timeout_s))
    return Dist(rank, world)

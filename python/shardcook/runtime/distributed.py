"""The process group of a run's workers (torchrun's, or srun's tasks given MASTER_ADDR and
MASTER_PORT): a bounded join, CPU (gloo) collectives, and a teardown that leaves no
process-group thread running at exit. Rank and world size come from `workers.where()`."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from shardcook.errors import ConfigError
from shardcook.runtime.envvars import env_seconds

if TYPE_CHECKING:
    from torch.distributed import Store  # type: ignore[attr-defined]

#: Seconds every rank waits for the others to join (env `SHARDCOOK_JOIN_TIMEOUT` overrides).
DEFAULT_JOIN_TIMEOUT_S = 300.0
JOIN_TIMEOUT_ENV = "SHARDCOOK_JOIN_TIMEOUT"
#: Once all ranks joined, collectives wait this long: a rank whose units were all done before a
#: resume waits at the end for the others' whole run.
COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600.0
_JOINED = "shardcook/joined"


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
        """Destroys the process group; its worker threads are joined here, not left running
        into interpreter shutdown (see `init`)."""
        if self.world_size > 1:
            import torch.distributed as tdist

            if tdist.is_initialized():
                tdist.destroy_process_group()


def env_int(name: str, default: str) -> int:
    text = os.environ.get(name, default)
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"Environment variable {name}={text!r} is not an integer; unset it or let torchrun "
            "set it."
        ) from None


def env_rank_world() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) as torchrun sets them; (0, 1) outside torchrun.

    Raises:
        ConfigError: either is not an integer, WORLD_SIZE < 1, or RANK outside [0, WORLD_SIZE).
    """
    rank, world = env_int("RANK", "0"), env_int("WORLD_SIZE", "1")
    if world < 1:
        raise ConfigError(f"Environment variable WORLD_SIZE={world} must be at least 1.")
    if not 0 <= rank < world:
        raise ConfigError(
            f"Environment variable RANK={rank} must be between 0 and WORLD_SIZE-1={world - 1}."
        )
    return rank, world


def join_timeout_s() -> float:
    """The join timeout in seconds: `SHARDCOOK_JOIN_TIMEOUT`, else `DEFAULT_JOIN_TIMEOUT_S`."""
    return env_seconds(JOIN_TIMEOUT_ENV, DEFAULT_JOIN_TIMEOUT_S)


def _master() -> tuple[str, int]:
    addr = os.environ.get("MASTER_ADDR")
    if not addr:
        raise ConfigError(
            "WORLD_SIZE > 1 needs MASTER_ADDR and MASTER_PORT (rank 0's address); "
            "start the ranks with torchrun, or set both."
        )
    port = env_int("MASTER_PORT", "")
    if not 0 < port < 2**16:
        raise ConfigError(f"Environment variable MASTER_PORT={port} must be between 1 and 65535.")
    try:
        socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise ConfigError(
            f"Environment variable MASTER_ADDR={addr!r} is not a host name or IP address this "
            f"machine can resolve ({reason}); set it to rank 0's address."
        ) from None
    return addr, port


def _reachable(addr: str, port: int, timeout_s: float) -> bool:
    """Whether something accepts connections at addr:port within `timeout_s` (polled here: the
    store client's own retries print a C++ stack trace per failed attempt)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((addr, port), timeout=max(min(1.0, timeout_s), 0.1)):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


def _connect(rank: int, world: int, timeout_s: float) -> Store:
    """A TCP store shared by all ranks: torchrun's agent store, else one hosted by rank 0."""
    from torch.distributed import DistError, TCPStore  # type: ignore[attr-defined]

    addr, port = _master()
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    host = rank == 0 and not agent
    if not host and not _reachable(addr, port, timeout_s):
        raise ConfigError(
            f"Rank {rank} found no rank 0 at MASTER_ADDR:MASTER_PORT={addr}:{port} within "
            f"{timeout_s:g} s; start rank 0, or raise {JOIN_TIMEOUT_ENV}."
        )
    try:
        # rank 0 does not wait for clients here: the join below names who is missing
        return TCPStore(addr, port, world, is_master=host, timeout=timedelta(seconds=timeout_s),
                        wait_for_workers=False, multi_tenant=host)
    except (DistError, RuntimeError) as e:
        if host:
            detail = str(e).splitlines()[0]
            fix = ("choose a free port" if "in use" in detail.lower() else
                   "MASTER_ADDR must be an address of rank 0's own machine")
            raise ConfigError(
                f"Rank 0 cannot listen on MASTER_ADDR:MASTER_PORT={addr}:{port} "
                f"({detail}); {fix}."
            ) from None
        raise ConfigError(
            f"Rank {rank} found no rank 0 at MASTER_ADDR:MASTER_PORT={addr}:{port} within "
            f"{timeout_s:g} s; start rank 0, or raise {JOIN_TIMEOUT_ENV}."
        ) from None


def _join(store: Store, rank: int, world: int, timeout_s: float) -> None:
    """Marks this rank as joined and waits for every rank, naming the missing ones on timeout.

    Polls with `check` (which never blocks) rather than a blocking `wait`, whose timeout c10d
    also logs as a warning of its own.
    """
    prefix = f"{_JOINED}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    store.set(f"{prefix}/{rank}", "1")
    deadline = time.monotonic() + timeout_s
    missing = list(range(world))
    while True:
        missing = [r for r in missing if not store.check([f"{prefix}/{r}"])]
        if not missing:
            return
        if time.monotonic() >= deadline:
            raise ConfigError(
                f"Rank(s) {', '.join(map(str, missing))} of WORLD_SIZE={world} did not join "
                f"within {timeout_s:g} s; start every rank, or raise {JOIN_TIMEOUT_ENV}."
            )
        time.sleep(0.05)


def init(rank: int, world: int, backend: str = "gloo",
         timeout_s: float = COLLECTIVE_TIMEOUT_S) -> Dist:
    """Joins the process group of `world` > 1 ranks as `rank` (gloo for CPU work, nccl for GPU).

    Every rank first waits at most `join_timeout_s()` for all ranks to arrive; once all joined,
    collectives wait up to `timeout_s` (long on purpose: the only collectives are at the start
    and at the end).

    Raises:
        ConfigError: bad MASTER_* variables, or a rank that never joined.
    """
    if world <= 1:
        return Dist(0, 1)
    join_s = join_timeout_s()
    # torch.distributed.nn.functional binds `group=group.WORLD` as default arguments when first
    # imported. Imported after init (Energon's imports do, on rank 0), those defaults keep the
    # process group alive past destroy_process_group, so its gloo threads outlive `close` and one
    # still releasing the last broadcast's tensors at interpreter shutdown aborts the process
    # ("terminate called without an active exception"). Imported first, they bind None.
    import torch.distributed as tdist
    import torch.distributed.nn.functional  # noqa: F401

    if not tdist.is_initialized():
        store = _connect(rank, world, join_s)
        _join(store, rank, world, join_s)
        store.set_timeout(timedelta(seconds=timeout_s))
        tdist.init_process_group(backend=backend, store=store, rank=rank, world_size=world,
                                 timeout=timedelta(seconds=timeout_s))
    return Dist(rank, world)

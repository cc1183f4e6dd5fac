"""How a call to object storage is tried again: a request can fail once and pass the next time
(a dropped connection, a throttled store), so each call is tried `TRIES` times with doubling
waits (tenacity) before its failure is said in one sentence."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, stop_after_attempt, wait_exponential

from shardcook.errors import ShardcookIOError
from shardcook.storage.messages import describe_error

__all__ = ["FIRST_BACKOFF_SECONDS", "TRIES", "retried"]

log = logging.getLogger(__name__)

#: Tries per store call, and the wait before the second (doubled before each later one).
TRIES = 3
FIRST_BACKOFF_SECONDS = 0.5

T = TypeVar("T")


def retried(what: str, call: Callable[[], T],
            failed: Callable[[Exception], str] | None = None) -> T:
    """`call()`, tried `TRIES` times with doubling waits between; `what` names the call and its
    store (`uploading 000003.tar to msc://profile/data`).

    Raises:
        ShardcookIOError: the last try failed, in one sentence: `failed(error)` when given,
            else one saying the run stopped.
    """
    def say(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning("%s failed (%s); trying again in %.1f s", what,
                    describe_error(error) if error else "?", wait)

    try:
        return Retrying(stop=stop_after_attempt(TRIES), reraise=True, before_sleep=say,
                        wait=wait_exponential(multiplier=FIRST_BACKOFF_SECONDS))(call)
    except Exception as e:  # noqa: BLE001 - one sentence, never the client's traceback
        raise ShardcookIOError(failed(e) if failed is not None else (
            f"{what} failed {TRIES} times ({describe_error(e)}); the run stopped, keeping the "
            "units recorded so far: rerun the same command to resume.")
        ) from None

"""Background work repeated every N seconds for as long as a block runs: sweeps, retention,
schedulers. One pattern, so each service states only what it repeats and how often."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import structlog

log = structlog.get_logger(__name__)


async def _repeat(
    work: Callable[[], Awaitable[object]], seconds: float, failed: str, *, first_now: bool
) -> None:
    if not first_now:
        await asyncio.sleep(seconds)
    while True:
        try:
            await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failed round is retried at the next tick
            log.warning(failed, error=repr(exc), exc_info=True)
        await asyncio.sleep(seconds)


@contextlib.asynccontextmanager
async def periodically(
    work: Callable[[], Awaitable[object]],
    seconds: float,
    *,
    name: str,
    failed: str,
    first_now: bool = False,
) -> AsyncIterator[asyncio.Task[None]]:
    """Await ``work()`` every ``seconds`` (the first time at once with ``first_now``, else
    after one interval) until the block exits, which cancels it. A round that raises is
    logged as ``failed`` (an event name) and the next round comes at the next tick: an
    outage of the database or the bus never ends the loop."""
    task = asyncio.create_task(_repeat(work, seconds, failed, first_now=first_now), name=name)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

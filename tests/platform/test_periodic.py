"""Background work every N seconds: the first round's timing, rounds that fail, and the end
of the block stopping it."""

import asyncio

from mldiag_platform.periodic import periodically


async def test_a_failing_round_is_retried_at_the_next_tick() -> None:
    rounds: list[int] = []
    third = asyncio.Event()

    async def work() -> None:
        rounds.append(len(rounds))
        if len(rounds) == 1:
            raise ConnectionError("the database is away")
        if len(rounds) == 3:
            third.set()

    async with periodically(work, 0.01, name="test", failed="test.failed", first_now=True):
        await asyncio.wait_for(third.wait(), 5)
    assert rounds[:3] == [0, 1, 2]


async def test_the_first_round_waits_one_interval_unless_asked_and_the_block_end_stops_it() -> None:
    calls = 0

    async def work() -> None:
        nonlocal calls
        calls += 1

    async with periodically(work, 60, name="test", failed="test.failed") as task:
        await asyncio.sleep(0.05)
        assert calls == 0  # one interval first
    assert task.cancelled()
    async with periodically(work, 60, name="test", failed="test.failed", first_now=True):
        await asyncio.sleep(0.05)
    assert calls == 1

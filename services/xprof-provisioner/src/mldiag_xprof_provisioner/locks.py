"""Locks by name that are dropped once nobody holds or awaits them, so that keys made of
user input (hosts, commands, sessions) never pile up: one capture per target, one run of a
command, one conversion per tool of a session at a time."""

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field


@dataclass
class _Lock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class KeyedLocks:
    """Locks by name, made on first use and dropped when nobody holds or awaits them."""

    def __init__(self) -> None:
        self._locks: dict[str, _Lock] = {}

    @asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        """Hold every lock of ``keys``, taken in one global order so that two holders of
        overlapping sets never wait for each other in a circle."""
        async with AsyncExitStack() as stack:
            for key in sorted(set(keys)):
                await stack.enter_async_context(self._hold_one(key))
            yield

    @asynccontextmanager
    async def _hold_one(self, key: str) -> AsyncIterator[None]:
        entry = self._locks.setdefault(key, _Lock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[key]

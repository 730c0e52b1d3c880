"""Fixtures of the SDK tests."""

from collections.abc import Iterator

import pytest

from sdk.fake_platform import FakePlatform


@pytest.fixture
def platform() -> Iterator[FakePlatform]:
    server = FakePlatform()
    server.start()
    yield server
    server.stop()

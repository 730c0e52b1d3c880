"""A stream's listener keeps the hints it wants, and past its backlog says to resync."""

import pytest

from mldiag_run_registry.live.service import LISTENER_BACKLOG, Listener
from mldiag_schemas.sharing import RunUpdate, RunUpdateKind

pytestmark = pytest.mark.unit


def _hint(run_id: str, kind: RunUpdateKind = RunUpdateKind.METRICS) -> RunUpdate:
    return RunUpdate(run_id=run_id, kind=kind)


def test_a_run_listener_keeps_its_runs_hints_only() -> None:
    listener = Listener("a")
    for hint in (_hint("a"), _hint("b"), _hint("a", RunUpdateKind.RUN)):
        listener.offer(hint)
    assert [listener.queue.get_nowait().kind for _ in range(2)] == ["metrics", "run"]
    assert listener.queue.empty()


def test_a_runs_list_listener_keeps_run_hints_of_every_run() -> None:
    listener = Listener(None)
    for hint in (_hint("a"), _hint("b", RunUpdateKind.RUN), _hint("c", RunUpdateKind.EVENTS)):
        listener.offer(hint)
    assert listener.queue.get_nowait().run_id == "b"
    assert listener.queue.empty()


def test_a_listener_that_fell_behind_is_told_to_resync_once_caught_up() -> None:
    listener = Listener("a")
    for _ in range(LISTENER_BACKLOG + 5):
        listener.offer(_hint("a"))
    assert listener.queue.qsize() == LISTENER_BACKLOG
    assert not listener.caught_up_after_missing()  # hints still waiting
    while not listener.queue.empty():
        listener.queue.get_nowait()
    assert listener.caught_up_after_missing()
    assert not listener.caught_up_after_missing()  # said once

"""The progress line of waits: rewritten in place on a terminal, plain periodic lines
elsewhere, nothing when disabled (machine formats)."""

import io

import pytest

from mldiag.cli.progress import Progress, poll_until


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """A settable monotonic clock (and sleeps that advance it)."""
    now = [100.0]
    monkeypatch.setattr("mldiag.cli.progress.time.monotonic", lambda: now[0])

    def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr("mldiag.cli.progress.time.sleep", sleep)
    return now


def test_a_terminal_line_is_rewritten_in_place(clock: list[float]) -> None:
    stream = Terminal()
    with Progress("capture op-1", enabled=True, stream=stream) as progress:
        assert progress.in_place and progress.due()
        progress.update("ACTIVE; h1 ACTIVE, h2 SUCCEEDED")
        clock[0] += 75
        progress.update("SUCCEEDED")
    text = stream.getvalue()
    assert text.startswith("\rcapture op-1: ACTIVE; h1 ACTIVE, h2 SUCCEEDED (0s)")
    # The second write pads over the longer first one, and the line ends when closed.
    second = "\r" + "capture op-1: SUCCEEDED (1m15s)".ljust(
        len("capture op-1: ACTIVE; h1 ACTIVE, h2 SUCCEEDED (0s)")
    )
    assert text.endswith(second + "\n")


def test_elsewhere_lines_are_plain_and_periodic(clock: list[float]) -> None:
    stream = io.StringIO()
    progress = Progress("job 7", enabled=True, stream=stream)
    progress.update("JOB_STATE_PENDING")
    assert stream.getvalue() == ""  # quiet for a short wait
    assert not progress.due()
    clock[0] += 10
    progress.update("JOB_STATE_PENDING")
    clock[0] += 1
    progress.update("JOB_STATE_PENDING")  # no change, too soon: not repeated
    progress.update("JOB_STATE_RUNNING")  # a change: said at once
    clock[0] += 10
    progress.update("JOB_STATE_RUNNING")  # an interval later: repeated
    progress.close()
    assert stream.getvalue().splitlines() == [
        "job 7: JOB_STATE_PENDING (10s)",
        "job 7: JOB_STATE_RUNNING (11s)",
        "job 7: JOB_STATE_RUNNING (21s)",
    ]


def test_disabled_writes_nothing(clock: list[float]) -> None:
    stream = Terminal()
    with Progress("job 7", enabled=False, stream=stream) as progress:
        assert not progress.due()
        clock[0] += 60
        progress.update("JOB_STATE_RUNNING")
    assert stream.getvalue() == ""


def test_poll_until_reads_until_a_terminal_state(clock: list[float]) -> None:
    states = iter(["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"])
    stream = Terminal()
    with Progress("job 7", enabled=True, stream=stream) as progress:
        ended = poll_until(
            lambda: {"state": next(states)}, frozenset({"JOB_STATE_SUCCEEDED"}), progress
        )
    assert ended == {"state": "JOB_STATE_SUCCEEDED"}
    assert "job 7: JOB_STATE_RUNNING (1s)" in stream.getvalue()
    assert clock[0] == 102.0

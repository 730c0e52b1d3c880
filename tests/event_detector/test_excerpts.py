"""Telling log lines: realistic lines classified into excerpts, and late ones re-announcing
the events they explain."""

from datetime import timedelta

from event_detector.feed import Feed
from mldiag_schemas.events import EventState, EventType, WorkloadEventOpened, WorkloadEventUpdated
from mldiag_schemas.logs import LogLine, LogSeverity, LogStream
from mldiag_schemas.runs import ErrorDetails, Run, RunPhase, RunPhaseChanged, RunState

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 88, in <module>',
    "    main()",
    '  File "/app/train.py", line 71, in main',
    "    state, loss = train_step(state, batch)",
    '  File "/app/train.py", line 40, in train_step',
    '    raise ValueError(f"bad batch shape {batch.shape}")',
    "ValueError: bad batch shape (32, 17)",
]

XLA_OOM = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 71, in main',
    "    state, loss = train_step(state, batch)",
    "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to"
    " allocate 17179869184 bytes.",
    "--------------------",
    "For simplicity, JAX has removed its internal frames from the traceback of the following"
    " exception. Set JAX_TRACEBACK_FILTERING=off to include these.",
]

TPU_OOM = (
    "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out"
    " of memory in memory space hbm. Used 20.51G of 15.48G hbm. Exceeded hbm capacity by 5.03G."
)

DMESG_OOM = [
    "[ 8412.120001] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|"
    "__GFP_COMP), order=0, oom_score_adj=0",
    "[ 8412.123456] Out of memory: Killed process 48213 (python) total-vm:65123456kB,"
    " anon-rss:62345678kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:123456kB"
    " oom_score_adj:0",
]

NCCL_WATCHDOG = (
    "[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation"
    " timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1048576, NumelOut=1048576,"
    " Timeout(ms)=600000) ran for 600023 milliseconds before timing out."
)


def _lines(
    feed: Feed,
    texts: list[str],
    *,
    pid: int = 7,
    host: str = "h0",
    stream: LogStream = LogStream.STDERR,
    severity: LogSeverity = LogSeverity.DEFAULT,
) -> list[LogLine]:
    return [
        LogLine(
            time=feed.now + timedelta(milliseconds=index),
            host=host,
            pid=pid,
            stream=stream,
            severity=severity,
            text=text,
        )
        for index, text in enumerate(texts)
    ]


def _kept(feed: Feed) -> list[tuple[str, list[str]]]:
    return [(excerpt.kind, excerpt.lines) for excerpt in feed.state.excerpts]


def test_a_python_traceback_split_over_batches_is_one_excerpt() -> None:
    feed = Feed()
    chatter = _lines(feed, ["step 1200 loss 2.31", "step 1210 loss 2.30"], pid=8)
    feed.send(feed.logs(*_lines(feed, TRACEBACK[:4]), *chatter))
    assert feed.state.excerpts[0].open
    feed.advance(1)
    feed.send(feed.logs(*_lines(feed, TRACEBACK[4:]), *_lines(feed, ["exiting"])))
    assert _kept(feed) == [("traceback", TRACEBACK)]
    assert not feed.state.excerpts[0].open


def test_a_deep_traceback_keeps_its_head_and_the_frames_nearest_the_exception() -> None:
    feed = Feed()
    frames = [
        line
        for depth in range(100)
        for line in (f'  File "/app/tree.py", line {depth}, in visit', "    return visit(node)")
    ]
    error = "RecursionError: maximum recursion depth exceeded"
    long = "x" * 5000
    feed.send(feed.logs(*_lines(feed, [TRACEBACK[0], *frames, error, long], pid=3)))
    [deep] = feed.state.excerpts  # the long line after it tells nothing: not kept
    assert len(deep.lines) == 40
    assert deep.lines[:20] == [TRACEBACK[0], *frames[:19]]
    assert deep.lines[20:] == [*frames[-19:], error]
    feed.send(feed.logs(*_lines(feed, [f"CUDA out of memory. {long}"], pid=4)))
    assert len(feed.state.excerpts[-1].lines[0]) == 1000


def test_a_chained_exception_stays_one_traceback() -> None:
    feed = Feed()
    chained = [
        *TRACEBACK,
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 90, in <module>',
        "    save_emergency_checkpoint()",
        "OSError: [Errno 28] No space left on device",
    ]
    feed.send(feed.logs(*_lines(feed, chained)))
    [(kind, lines)] = _kept(feed)
    assert kind == "traceback"
    assert lines[0] == TRACEBACK[0]
    assert lines[-1] == "OSError: [Errno 28] No space left on device"


def test_out_of_memory_kills_and_timeouts_are_named() -> None:
    feed = Feed()
    feed.send(feed.logs(*_lines(feed, XLA_OOM)))
    feed.advance(30)
    feed.send(feed.logs(*_lines(feed, [TPU_OOM], pid=9)))
    feed.advance(30)
    feed.send(feed.logs(*_lines(feed, DMESG_OOM, pid=0, stream=LogStream.SYSTEM)))
    feed.advance(30)
    feed.send(feed.logs(*_lines(feed, ["Killed"], pid=1)))
    feed.advance(30)
    feed.send(feed.logs(*_lines(feed, [NCCL_WATCHDOG], pid=11, host="h3")))
    kept = _kept(feed)
    assert [kind for kind, _ in kept] == [
        "accelerator-oom",
        "accelerator-oom",
        "host-oom-kill",
        "host-oom-kill",
        "collective-timeout",
    ]
    assert kept[0][1] == XLA_OOM[:4]  # the traceback through its exception line
    assert kept[2][1] == DMESG_OOM  # one burst, one excerpt
    assert feed.state.excerpts[-1].host == "h3"


def test_error_severity_counts_and_ordinary_stderr_does_not() -> None:
    feed = Feed()
    feed.send(
        feed.logs(
            *_lines(feed, ["W0101 00:00:00 warnings.py:109] UserWarning: deprecated"]),
            *_lines(feed, ["checkpoint upload failed: 503"], severity=LogSeverity.ERROR),
        )
    )
    assert _kept(feed) == [("error", ["checkpoint upload failed: 503"])]


def test_the_newest_excerpts_stay_plain_errors_going_first() -> None:
    feed = Feed()
    feed.send(feed.logs(*_lines(feed, TRACEBACK)))
    for index in range(10):
        feed.advance(10)
        feed.send(feed.logs(*_lines(feed, [f"error {index}"], severity=LogSeverity.CRITICAL)))
    kept = _kept(feed)
    assert len(kept) == 8
    assert kept[0] == ("traceback", TRACEBACK)
    assert [lines for _, lines in kept[1:]] == [[f"error {index}"] for index in range(3, 10)]


def _failed(feed: Feed) -> RunPhaseChanged:
    run = Run(
        name=f"projects/p/locations/l/machineLearningRuns/{feed.run_id}",
        run_id=feed.run_id,
        display_name="r",
        run_set="",
        labels={},
        run_phase=RunPhase.FAILED,
        state=RunState.FAILED,
        create_time=feed.now,
        update_time=feed.now,
        error_details=ErrorDetails(message="exited with status 1"),
    )
    return RunPhaseChanged(run=run, previous_phase=RunPhase.ACTIVE, occurred_at=feed.now)


def test_a_traceback_after_the_run_failed_updates_its_termination_once() -> None:
    feed = Feed()
    for step in range(1, 5):
        feed.advance(1)
        feed.step(step, h0={"step_time": 1.0})
    feed.send(_failed(feed))
    [termination] = feed.opened(EventType.TERMINATION)
    resolved = feed.latest(termination)
    feed.advance(2)
    late = feed.logs(*_lines(feed, ["step 5 loss 2.0", *TRACEBACK]))
    changes = feed.send(late)
    [update] = changes
    assert isinstance(update, WorkloadEventUpdated)
    assert update.event.event_id == termination.event_id
    assert update.event.revision == resolved.revision + 1
    assert update.event.state is EventState.RESOLVED
    assert update.context is not None
    assert [(e.kind, e.lines) for e in update.context.log_excerpts] == [("traceback", TRACEBACK)]
    # Lines that tell nothing re-announce nothing.
    feed.advance(1)
    assert feed.send(feed.logs(*_lines(feed, ["bye"]))) == []


def test_a_traceback_written_before_the_failure_is_in_the_termination_context() -> None:
    feed = Feed()
    feed.step(1, h0={"step_time": 1.0})
    feed.send(feed.logs(*_lines(feed, XLA_OOM)))
    feed.advance(1)
    feed.send(_failed(feed))
    [opened] = [
        change
        for change in feed.changes
        if isinstance(change, WorkloadEventOpened) and change.event.type is EventType.TERMINATION
    ]
    assert opened.context is not None
    assert [e.kind for e in opened.context.log_excerpts] == ["accelerator-oom"]


def test_lines_long_after_an_event_resolved_re_announce_nothing() -> None:
    feed = Feed()
    feed.step(1, h0={"step_time": 1.0})
    feed.send(_failed(feed))
    feed.advance(600)
    assert feed.send(feed.logs(*_lines(feed, TRACEBACK))) == []
    assert len(feed.state.excerpts) == 1

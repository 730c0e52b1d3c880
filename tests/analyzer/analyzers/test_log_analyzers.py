"""Causes read from the run's log excerpts: tracebacks taken apart, OOMs and OOM kills and
collective timeouts found in the lines, each quoted in the evidence."""

from analyzer.analyzer_contexts import (
    NOW,
    RUNBOOKS,
    context,
    degradation,
    detected,
    event,
    excerpt,
    hang,
    report_of,
    run,
    termination,
)
from mldiag_analyzer.analyzers.framework import accelerator_oom, workload_exception
from mldiag_analyzer.analyzers.infrastructure import host_oom_kill
from mldiag_analyzer.analyzers.logs import collective_timeout, read_traceback
from mldiag_analyzer.service import analyze
from mldiag_schemas.events import EventType, Evidence, RunContext

TRACEBACK = [
    "Traceback (most recent call last):",
    '  File "/app/train.py", line 120, in <module>',
    "    main()",
    '  File "/app/train.py", line 96, in main',
    "    state = train_step(state, batch)",
    '  File "/app/model.py", line 41, in train_step',
    "    logits = apply(params, batch['tokens'])",
    "ValueError: operands could not be broadcast together with shapes (32,128) (64,128)",
]
NCCL_TIMEOUT = [
    "[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout:"
    " WorkNCCL(SeqNum=8812, OpType=ALLREDUCE, NumelIn=2048, Timeout(ms)=600000) ran for 600124"
    " milliseconds before timing out.",
    "[rank3]:[E ProcessGroupNCCL.cpp:1664] [PG 0 Rank 3] Timeout at NCCL work: 8812",
]


def _with_logs(ctx: RunContext, *excerpts: object) -> RunContext:
    return ctx.model_copy(update={"log_excerpts": list(excerpts)})


def test_a_traceback_names_the_exception_and_its_last_frames() -> None:
    ended, ctx = termination(exitCode=1)
    ctx = _with_logs(ctx, excerpt("traceback", TRACEBACK))
    report = run(workload_exception, ended, ctx)
    assert detected(report)
    assert report.score == 0.85
    assert report.hosts == ["host-1"]
    assert report.details == (
        "The workload raised ValueError on host-1: operands could not be broadcast together"
        " with shapes (32,128) (64,128) (in model.py:41 in train_step)."
    )
    assert (
        "last frames: train.py:120 in <module> → train.py:96 in main → model.py:41 in train_step"
    ) in report.evidence
    assert report.evidence[-2:] == [
        "log host-1 11:59:40 UTC:     logits = apply(params, batch['tokens'])",
        "log host-1 11:59:40 UTC: ValueError: operands could not be broadcast together with"
        " shapes (32,128) (64,128)",
    ]
    analysis = analyze(ended, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "workload-exception"


def test_a_chained_traceback_reports_the_last_exception() -> None:
    chained = [
        *TRACEBACK,
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "/app/train.py", line 130, in <module>',
        "    save(state)",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: checkpoint write failed",
    ]
    traceback = read_traceback(excerpt("traceback", chained))
    assert traceback is not None
    assert traceback.error_type == "jaxlib.xla_extension.XlaRuntimeError"
    assert traceback.message == "INTERNAL: checkpoint write failed"
    assert traceback.frames[-1] == "train.py:130 in <module>"
    assert read_traceback(excerpt("traceback", ["no exception here", "  just text"])) is None


def test_a_crashed_host_explains_a_hang() -> None:
    stuck, ctx = hang()
    report = run(workload_exception, stuck, _with_logs(ctx, excerpt("traceback", TRACEBACK)))
    assert detected(report)
    assert report.score == 0.7
    assert report.hosts == ["host-0", "host-1", "host-2", "host-3"]


def test_no_traceback_in_the_logs_is_said() -> None:
    ended, ctx = termination(exitCode=1)
    report = run(workload_exception, ended, _with_logs(ctx, excerpt("error", ["WARN: slow"])))
    assert not detected(report)
    assert report.details == (
        "No exception was reported: the process ended without a traceback and the run's logs"
        " hold none."
    )


def test_an_accelerator_oom_in_the_logs_of_a_hang() -> None:
    stuck, ctx = hang()
    lines = [
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying"
        " to allocate 4.00GiB.",
    ]
    ctx = _with_logs(ctx, excerpt("accelerator-oom", lines, host_="host-2"))
    report = run(accelerator_oom, stuck, ctx)
    assert detected(report)
    assert report.score == 0.8
    assert report.evidence[0] == f"log host-2 11:59:40 UTC: {lines[0]}"
    assert "its peers wait for it in the next collective" in report.details
    # the traceback of the same OOM is not a second, independent cause
    ctx = _with_logs(
        ctx, excerpt("accelerator-oom", lines, host_="host-2"), excerpt("traceback", lines)
    )
    analysis = analyze(stuck, ctx, RUNBOOKS, NOW)
    exception = report_of(analysis, "workload-exception")
    assert exception.score < report_of(analysis, "accelerator-oom").score


def test_a_usage_line_mentioning_hbm_is_not_an_oom() -> None:
    stuck, ctx = hang()
    ctx = _with_logs(ctx, excerpt("error", ["HBM usage 61% on device 0"]))
    assert not detected(run(accelerator_oom, stuck, ctx))


def test_the_kernels_oom_kill_in_the_logs() -> None:
    interrupted = event(EventType.ORCHESTRATOR_INTERRUPTION, "restart", ["host-3"])
    lines = [
        "Out of memory: Killed process 4242 (python) total-vm:98765432kB, anon-rss:61234567kB",
    ]
    ctx = _with_logs(context(), excerpt("host-oom-kill", lines, host_="host-3"))
    report = run(host_oom_kill, interrupted, ctx)
    assert detected(report)
    assert report.hosts == ["host-3"]
    assert report.score == 0.85
    assert report.evidence == [f"log host-3 11:59:40 UTC: {lines[0]}"]
    assert report.details == (
        "The process was killed by the host's out-of-memory killer on host-3; the restart"
        " follows the kill."
    )


def test_a_shells_killed_line_needs_exhausted_memory() -> None:
    ended, ctx = termination()
    killed = excerpt("error", ["./run.sh: line 3:  4242 Killed                  python train.py"])
    report = run(host_oom_kill, ended, _with_logs(ctx, killed))
    assert not detected(report)
    assert "no log line of the run tells of an OOM kill" in report.details
    full = ctx.model_copy(
        update={
            "hosts": [h.model_copy(update={"host_memory_utilization": 98.0}) for h in ctx.hosts]
        }
    )
    report = run(host_oom_kill, ended, _with_logs(full, killed))
    assert detected(report)
    assert report.score == 0.75
    assert report.evidence[0].startswith("log host-1 11:59:40 UTC: ./run.sh: line 3:  4242 Killed")


def test_a_collective_timeout_explains_a_hang() -> None:
    stuck, ctx = hang()
    ctx = _with_logs(ctx, excerpt("collective-timeout", NCCL_TIMEOUT, host_="host-3"))
    report = run(collective_timeout, stuck, ctx)
    assert detected(report)
    assert report.score == 0.85
    assert report.hosts == ["host-3"]
    assert report.evidence == [f"log host-3 11:59:40 UTC: {line}"[:325] for line in NCCL_TIMEOUT]
    assert report.details.startswith(
        "A collective timed out or failed on host-3 (first at 11:59:40 UTC)"
    )
    analysis = analyze(stuck, ctx, RUNBOOKS, NOW)
    assert analysis.probable_cause == "collective-timeout"


def test_a_grpc_deadline_in_any_excerpt_is_a_collective_timeout() -> None:
    slowed, ctx = degradation()
    line = "E0105 12:00:01 coordination_service_agent.cc:332 Deadline Exceeded: barrier timed out"
    report = run(collective_timeout, slowed, _with_logs(ctx, excerpt("error", ["ok", line])))
    assert detected(report)
    assert report.score == 0.55
    assert report.evidence == [f"log host-1 11:59:40 UTC: {line}"]


def test_a_stack_that_ends_in_a_bare_exception() -> None:
    lines = ["Traceback (most recent call last):", '  File "/app/train.py", line 7, in <module>']
    traceback = read_traceback(excerpt("traceback", [*lines, "    next(it)", "StopIteration"]))
    assert traceback is not None
    assert (traceback.error_type, traceback.message) == ("StopIteration", "")
    assert traceback.lines == [lines[1], "    next(it)", "StopIteration"]


def test_quiet_logs_rule_the_log_causes_out() -> None:
    stuck, ctx = hang()
    quiet_lines = ["WARNING: dataset shard 3 reopened", "error: resource temporarily unavailable"]
    ctx = _with_logs(ctx, excerpt("error", quiet_lines))
    for check in (collective_timeout, accelerator_oom, host_oom_kill, workload_exception):
        report = run(check, stuck, ctx)
        assert not detected(report), check.name
        assert report.details
    assert run(collective_timeout, stuck, None).details.startswith("No run context")


def test_log_lines_are_cut_and_limited() -> None:
    ended = event(EventType.TERMINATION, "termination", ["host-1"], Evidence())
    lines = [f"NCCL timeout {i} " + "x" * 500 for i in range(10)]
    report = run(collective_timeout, ended, _with_logs(context(), excerpt("error", lines)))
    assert len(report.evidence) == 6
    assert all(len(line) <= len("log host-1 11:59:40 UTC: ") + 300 for line in report.evidence)


def test_an_excerpt_the_detector_kept_as_a_timeout_is_quoted_by_its_last_line() -> None:
    # words no pattern of the analyzer knows: the detector's kind decides, its exception quoted
    last = "torch.distributed.DistStoreError: wait for rank 0 failed after 1800 s"
    lines = ["Traceback (most recent call last):", '  File "/app/train.py", line 9, in <module>']
    ctx = _with_logs(context(), excerpt("collective-timeout", [*lines, "    init()", last]))
    report = run(collective_timeout, event(EventType.TERMINATION, "termination", ["host-1"]), ctx)
    assert detected(report)
    assert report.evidence == [f"log host-1 11:59:40 UTC: {last}"]

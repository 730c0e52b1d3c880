"""Orchestrator analyzers: the scheduler and platform around the workload (preemption,
eviction, restarts, processes stopped from outside)."""

import re
import signal as signals

from mldiag_analyzer.analyzers.common import (
    NO_CONTEXT,
    Finding,
    Inputs,
    analyzer,
    exit_code_fact,
    fact_number,
    fact_text,
    found,
    names,
    not_found,
    on,
)
from mldiag_schemas.analyses import Layer
from mldiag_schemas.events import EventType

_NOTICE = re.compile(
    r"preempt|maintenance|evict|drain|spot|reclaim|node.{0,20}(down|not ?ready|lost)",
    re.IGNORECASE,
)
"""Words of a planned interruption the platform announced."""
_SIGTERM = re.compile(r"sigterm", re.IGNORECASE)
_RESTART = re.compile(r"restart|new process", re.IGNORECASE)


def _interruption_lines(inputs: Inputs) -> tuple[list[str], list[str]]:
    """(notices, SIGTERMs) among the run's recent signals and, for an interruption or a
    termination, the event's own facts (its ``causes``, ``signal``, ``preemption``)."""
    lines = list(inputs.signals)
    if inputs.event.type in (EventType.ORCHESTRATOR_INTERRUPTION, EventType.TERMINATION):
        causes = inputs.facts.get("causes")
        own = [str(c) for c in causes] if isinstance(causes, list) else []
        own += [fact_text(inputs, "signal")]
        if "preemption" in inputs.facts:
            own.append(f"preemption notice {fact_text(inputs, 'preemption')}".strip())
        lines += [
            f"the event: {line}" for line in own if line and f"the event: {line}" not in lines
        ]
    notices = [line for line in lines if _NOTICE.search(line)]
    sigterms = [line for line in lines if _SIGTERM.search(line) and line not in notices]
    return notices, sigterms


_WORD = re.compile(r"[\w.-]*\w")
"""A host name as it appears in a line of words (``on host-1:`` gives ``host-1``)."""


def _hosts_named(inputs: Inputs, lines: list[str]) -> set[str]:
    words = {word for line in lines for word in _WORD.findall(line)}
    return {h.host for h in inputs.hosts if h.host in words}


@analyzer("preemption", Layer.ORCHESTRATOR, "orchestrator-interruption.md")
def preemption(inputs: Inputs) -> Finding:
    """A preemption, maintenance or eviction notice, or a SIGTERM, reached the run."""
    notices, sigterms = _interruption_lines(inputs)
    if not notices and not sigterms:
        checked = f"{len(inputs.signals)} recent lifecycle signal(s)" if inputs.context else ""
        return not_found(
            "No preemption, maintenance or eviction notice and no SIGTERM reached the run"
            + (f" (checked {checked})." if checked else "; no run context came with the event.")
        )
    hosts = _hosts_named(inputs, notices + sigterms)
    if inputs.event.type == EventType.ORCHESTRATOR_INTERRUPTION:
        hosts |= inputs.event_hosts()
    if notices:
        details = (
            "The platform announced the interruption (a preemption, maintenance or eviction"
            " notice): it was planned, not a fault of the workload"
        )
        score = 0.8
    else:
        details = (
            "A process was asked to stop (SIGTERM) — by the scheduler (time limit, preemption,"
            " eviction) or a person — without a notice mldiag saw"
        )
        score = 0.65
    effect = {
        EventType.HANG: "; the hang follows it (a host paused or stopped)",
        EventType.TERMINATION: "; the termination follows it",
        EventType.PERFORMANCE_DEGRADATION: "; hosts may be draining or restarting",
    }.get(inputs.event.type, "")
    if inputs.event.type not in (
        EventType.HANG,
        EventType.TERMINATION,
        EventType.ORCHESTRATOR_INTERRUPTION,
    ):
        score -= 0.25  # an interruption explains these only indirectly
    actions = [
        "Make the job resumable: checkpoint on SIGTERM (or on the JAX preemption notice) and"
        " resume from the latest checkpoint.",
        "Check the scheduler's view (`kubectl describe pod`, `sacct -j <job>`, the node's"
        " events) for the reason and whether more are announced.",
    ]
    evidence = [f"signal: {line}" for line in notices + sigterms]
    return found(details + effect + ".", score, hosts, evidence, actions)


@analyzer("restart", Layer.ORCHESTRATOR, "orchestrator-interruption.md")
def restart(inputs: Inputs) -> Finding:
    """Hosts restarted (a step recorded again by a new process): resumed from a checkpoint."""
    if inputs.context is None:
        return not_found(NO_CONTEXT.format(what="restarts"))
    restarted = {h.host: h.restarts for h in inputs.hosts if h.restarts > 0}
    said = [line for line in inputs.signals if _RESTART.search(line)]
    if not restarted and not said:
        return not_found(f"No host restarted ({len(inputs.hosts)} hosts, no step recorded twice).")
    restarted_hosts = set(restarted) | _hosts_named(inputs, said)
    notices, sigterms = _interruption_lines(inputs)
    evidence = [f"{host}: {count} restart(s)" for host, count in restarted.items()]
    evidence += [f"signal: {line}" for line in said]
    lost = fact_number(inputs, "lostSteps")
    if lost is not None:
        evidence.append(f"{lost:.0f} steps redone since the last checkpoint")
    planned = bool(notices or sigterms)
    details = f"{names(restarted_hosts)} restarted and resumed from a checkpoint"
    details += (
        " after a stop request (planned)"
        if planned
        else " with no notice before it: unplanned (a crash, an OOM kill or a host error)"
    )
    if any(count >= 2 for count in restarted.values()):
        details += "; more than one restart on a host is a crash loop"
    concerned = bool(restarted_hosts & inputs.event_hosts())
    score = {
        EventType.ORCHESTRATOR_INTERRUPTION: 0.5 if planned else 0.65,
        # a restart recompiles every program and re-warms caches: not a storm, not drift
        EventType.RECOMPILATION_STORM: 0.6,
        EventType.PERFORMANCE_DEGRADATION: 0.45,
        EventType.CONFIG_DRIFT: 0.7 if concerned else 0.4,
        EventType.STRAGGLER: 0.55 if concerned else 0.3,
    }.get(inputs.event.type, 0.4)
    effect = {
        EventType.RECOMPILATION_STORM: "; the restarted processes compile their programs again",
        EventType.CONFIG_DRIFT: "; a restarted host can come back on another image or node",
        EventType.PERFORMANCE_DEGRADATION: "; warm-up and compilation slow the first steps",
    }.get(inputs.event.type, "")
    actions = [
        "Read the restarted process's last output and its exit reason before the restart.",
        "Checkpoint more often if the steps redone after each restart cost too much.",
    ]
    return found(details + effect + ".", score, restarted_hosts, evidence, actions)


def _signal_name(number: int) -> str:
    try:
        return signals.Signals(number).name
    except ValueError:
        return f"signal {number}"


@analyzer("killed-by-signal", Layer.ORCHESTRATOR, "termination.md")
def killed_by_signal(inputs: Inputs) -> Finding:
    """The process was stopped from outside by a signal (scheduler, time limit, a person)."""
    classification = fact_text(inputs, "classification")
    signal = fact_text(inputs, "signal")
    exit_code = exit_code_fact(inputs)
    if not signal and exit_code is not None and exit_code > 128:
        signal = _signal_name(exit_code - 128)  # a shell's 128 + n
    explained = {"oom_host", "oom_accelerator", "hardware_error", "user_exception"}
    if classification in explained or (classification != "killed" and not signal):
        return not_found(
            "The process was not stopped by an outside signal: the termination is classified"
            f" '{classification or 'unknown'}'" + (f" (signal {signal})" if signal else "") + "."
        )
    notices, sigterms = _interruption_lines(inputs)
    evidence = [f"signal {signal or 'unknown'}, exit code {exit_code}"]
    evidence += [f"signal: {line}" for line in notices + sigterms]
    hosts = inputs.event_hosts()
    details = f"The process{on(hosts)} was killed by {signal or 'a signal'}"
    if notices:
        details += " after a preemption or maintenance notice: the platform stopped it"
        score = 0.85
    elif signal == "SIGKILL":
        details += (
            ": forcibly, by the scheduler after a grace period, a time or memory limit, or a person"
        )
        score = 0.7
    else:
        details += ": by the scheduler (time limit, preemption, eviction) or a person"
        score = 0.75
    actions = [
        "Check the scheduler's record of the job (`kubectl describe pod`, `sacct -j <job>"
        " --format=State,ExitCode,Reason`) for who stopped it and why.",
        "Raise the time limit or make the job resumable from its checkpoints.",
    ]
    return found(details + ".", score, hosts, evidence, actions)

# The scenario library is imported from tests/ once that folder is on sys.path (below).
# ruff: noqa: E402
"""Event precision: what the platform says about the scenario library, on a quiet host and
on a loaded one, counted per event type.

Run: ``.venv/bin/python benchmarks/event_precision.py [--repeats R] [--scenarios a,b]
[--conditions quiet,loaded] [--seed S]``

Stack: ingestion, run-registry, event-detector and analyzer served in this process as the
scenario tests serve them (``tests/scenarios/harness.py``), against the machine's NATS
(``MLDIAG_BENCH_NATS_URL``, a fresh namespace) and PostgreSQL (``MLDIAG_BENCH_DATABASE_URL``,
a fresh database), with the scenario tests' project rules. Every scenario of
``tests/scenarios/test_scenarios.py`` runs R times (default 3) in each condition:

- quiet: nothing else is started on the host (beyond what the scenario itself starts:
  ``cpu_contention`` brings its own burner per core);
- loaded: background CPU load injected at a random moment of each pass: 1 or 2
  ``burner.py`` processes from a random start, for 10 to 25 s.

A pass starts the scenarios as the tests do (together; those that load the host alone,
afterwards, once the host's CPU has calmed down), waits for them, gives the detector time to
resolve what it opened, and reads each run's events. Workloads sample the host every second
(so that an analysis can see contention), except those that write host metrics themselves.

Printed per condition and event type: expected (scenario runs that must raise it), hits,
hits whose top cause is the scenario's, misses, false events (events no scenario asked for,
duplicates of an expected one included), "also" (events the scenario truly causes besides its
own, ``Scenario.also``: the TERMINATION of an OOM that kills the process), and on a loaded
host the slowdowns that started while injected load ran, with how many were attributed to
``host-cpu-contention`` and named the burner. For scenarios that bring their own load,
whether the top cause named the burner. Then the goal lines and every miss and false event,
as read from the API.

Goals: every injected fault found (no miss); no event on quiet workloads on a quiet host; on
a loaded host the only events besides the expected ones are slowdowns the load caused,
attributed to it.
"""

import argparse
import asyncio
import logging
import os
import platform as host_platform
import random
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog
from _support import create_database, drop_database, emit

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path[:0] = [str(TESTS)]
from mldiag_schemas.monitoring import RULES, SLOWDOWN_RULES
from scenarios.harness import (  # found through the path set above
    BURNER_NAME,
    Burst,
    Launched,
    Load,
    Platform,
    Scenario,
    report_names,
    serve,
    top_cause,
    top_report,
    wait_for_quiet_host,
)
from scenarios.test_scenarios import FAST_RULES, SCENARIOS

NATS = os.environ.get("MLDIAG_BENCH_NATS_URL", "nats://127.0.0.1:4222")
SERVER = os.environ.get(
    "MLDIAG_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)

CONTENTION_CAUSE = "host-cpu-contention"
SLOWDOWNS = frozenset(RULES[rule].event_type for rule in SLOWDOWN_RULES)
"""Event types a CPU-starved workload can legitimately raise."""
UNSAMPLED = frozenset({"host_memory"})
"""Scenarios that write host metrics themselves: the real host's samples would interleave."""
SAMPLED_ENV = {"MLDIAG_SYSTEM_METRICS_INTERVAL": "1"}
SETTLE_SECONDS = 12.0
"""After the workloads end: the slowdown rules' resolve time (10 s) and a little more."""
ANALYSIS_WAIT_SECONDS = 20.0
"""Most time an event's analysis may take to appear after the settle time."""
LOAD_SLACK = timedelta(seconds=20)
"""An event that starts this long after the injected load ended is not the load's doing."""


@dataclass
class Outcome:
    """What one scenario run raised, classified."""

    condition: str
    repeat: int
    scenario: Scenario
    run_id: str
    hit: dict[str, Any] | None = None
    false: list[dict[str, Any]] = field(default_factory=list)
    also: list[dict[str, Any]] = field(default_factory=list)
    """Events the scenario truly causes besides its own (``Scenario.also``)."""
    load_caused: list[dict[str, Any]] = field(default_factory=list)
    load_started: datetime | None = None
    """When the scenario's own load started (scenarios that bring one)."""


@dataclass
class Row:
    """The counts of one event type in one condition."""

    expected: int = 0
    hits: int = 0
    right_cause: int = 0
    with_cause: int = 0
    """Expected events whose scenario names a top cause (the denominator of right_cause)."""
    burner_named: int = 0
    with_own_load: int = 0
    false: int = 0
    also: int = 0
    """Events a scenario truly causes besides its own (an OOM's TERMINATION)."""
    load_caused: int = 0
    attributed: int = 0
    load_named: int = 0


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="passes per condition")
    parser.add_argument(
        "--scenarios",
        default=",".join(s.name for s in SCENARIOS),
        help="comma-separated scenario names (default: all)",
    )
    parser.add_argument("--conditions", default="quiet,loaded", help="quiet, loaded or both")
    parser.add_argument("--seed", type=int, default=None, help="seed of the injected load")
    args = parser.parse_args()
    known = {s.name for s in SCENARIOS}
    unknown = set(args.scenarios.split(",")) - known
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; known: {sorted(known)}")
    conditions = args.conditions.split(",")
    if not conditions or set(conditions) - {"quiet", "loaded"}:
        parser.error("--conditions takes quiet, loaded or quiet,loaded")
    return args


@contextmanager
def fresh_database() -> Iterator[str]:
    """A database of its own on the benchmark server, dropped afterwards."""
    name = f"mldiag_bench_precision_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(SERVER, name))
    try:
        yield url
    finally:
        asyncio.run(drop_database(SERVER, name))


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _during(event: dict[str, Any], bursts: list[Burst]) -> bool:
    """Whether ``event`` started while (or just after) injected load ran."""
    start = _time(event["startTime"])
    return any(
        burst.started is not None
        and burst.started <= start <= (burst.ended or datetime.now(UTC)) + LOAD_SLACK
        for burst in bursts
    )


def _read_events(platform: Platform, run_id: str) -> list[dict[str, Any]]:
    """The run's events once each has its analysis (or the wait is over)."""
    deadline = time.monotonic() + ANALYSIS_WAIT_SECONDS
    while True:
        events = platform.events(run_id)
        if all(event.get("analyzerReports") for event in events) or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def _classify(
    condition: str,
    repeat: int,
    launched: Launched,
    events: list[dict[str, Any]],
    injected: list[Burst],
) -> Outcome:
    scenario = launched.scenario
    outcome = Outcome(condition, repeat, scenario, launched.run_id)
    if launched.bursts:
        outcome.load_started = launched.bursts[0].started
    for event in sorted(events, key=lambda e: str(e["startTime"])):
        if event["type"] == scenario.event and outcome.hit is None:
            outcome.hit = event
        elif event["type"] in SLOWDOWNS and _during(event, injected):
            outcome.load_caused.append(event)
        elif event["type"] in scenario.also:
            outcome.also.append(event)
        else:
            outcome.false.append(event)
    return outcome


def _wait_all(platform: Platform, launched: list[Launched]) -> None:
    """Wait for every workload, starting a second life (``then``) on the same run as soon
    as its first has ended, as a restarted job would."""
    pending = list(launched)
    while pending:
        for one in [one for one in pending if platform.ended(one)]:
            platform.finish(one)
            pending.remove(one)
            if one.scenario.then is not None:
                # The run's expectations stay those of the first life's scenario.
                then = Scenario(one.scenario.then)
                pending.append(platform.launch(then, one.run_id, env=SAMPLED_ENV))
        time.sleep(0.1)


def _launch(platform: Platform, scenario: Scenario) -> Launched:
    env = {} if scenario.name in UNSAMPLED else SAMPLED_ENV
    return platform.launch(scenario, env=env)


def _injected_load(rng: random.Random, span: float) -> Load:
    """A burst at a random moment of the first ``span`` seconds: 10 to 25 s, 1 or 2 burners."""
    return Load(after=rng.uniform(0, span), seconds=rng.uniform(10, 25), burners=rng.choice((1, 2)))


def run_pass(
    platform: Platform, scenarios: list[Scenario], condition: str, repeat: int, rng: random.Random
) -> tuple[list[Outcome], list[Burst]]:
    """Every scenario once: the batch together, then those that load the host one by one."""
    outcomes: list[Outcome] = []
    bursts: list[Burst] = []
    batch = [s for s in scenarios if s.load is None]
    alone = [s for s in scenarios if s.load is not None]
    groups = ([batch] if batch else []) + [[s] for s in alone]
    for group in groups:
        if group is not batch:
            wait_for_quiet_host()  # what is normal before its own load is the quiet host
        injected = [Burst(_injected_load(rng, 15))] if condition == "loaded" else []
        launched = [_launch(platform, scenario) for scenario in group]
        _wait_all(platform, launched)
        time.sleep(SETTLE_SECONDS)
        for burst in injected:
            burst.stop()
        for one in launched:
            events = _read_events(platform, one.run_id)
            outcomes.append(_classify(condition, repeat, one, events, injected))
        bursts += injected + [b for one in launched for b in one.bursts]
    return outcomes, bursts


def _rows(outcomes: list[Outcome]) -> dict[str, Row]:
    rows: dict[str, Row] = {}
    for outcome in outcomes:
        scenario = outcome.scenario
        if scenario.event is not None:
            row = rows.setdefault(scenario.event, Row())
            row.expected += 1
            if outcome.hit is not None:
                row.hits += 1
                if scenario.top_cause is not None:
                    row.with_cause += 1
                    row.right_cause += top_cause(outcome.hit) == scenario.top_cause
                if scenario.load is not None:
                    row.with_own_load += 1
                    row.burner_named += report_names(top_report(outcome.hit), BURNER_NAME)
        for event in outcome.false:
            rows.setdefault(event["type"], Row()).false += 1
        for event in outcome.also:
            rows.setdefault(event["type"], Row()).also += 1
        for event in outcome.load_caused:
            row = rows.setdefault(event["type"], Row())
            row.load_caused += 1
            row.attributed += top_cause(event) == CONTENTION_CAUSE
            row.load_named += report_names(top_report(event), BURNER_NAME)
    return rows


def _fraction(part: int, whole: int) -> str:
    return f"{part}/{whole}" if whole else "-"


def print_header() -> None:
    """The columns of :func:`print_table`."""
    emit(
        f"{'condition':<9} {'event type':<28} {'expected':>8} {'hits':>5} {'cause ok':>8}"
        f" {'burner':>6} {'misses':>6} {'false':>5} {'also':>4} {'load':>5} {'→ cpu':>6}"
        f" {'→ burner':>8}"
    )


def print_table(condition: str, outcomes: list[Outcome]) -> None:
    """One line per event type of ``condition``, and a total."""
    rows = _rows(outcomes)
    total = Row()
    for row in rows.values():
        for name in vars(total):
            setattr(total, name, getattr(total, name) + getattr(row, name))
    for event_type, row in [*sorted(rows.items()), ("total", total)]:
        emit(
            f"{condition:<9} {event_type:<28} {row.expected:>8} {row.hits:>5}"
            f" {_fraction(row.right_cause, row.with_cause):>8}"
            f" {_fraction(row.burner_named, row.with_own_load):>6}"
            f" {row.expected - row.hits:>6} {row.false:>5} {row.also:>4} {row.load_caused:>5}"
            f" {_fraction(row.attributed, row.load_caused):>6}"
            f" {_fraction(row.load_named, row.load_caused):>8}"
        )


def _describe(event: dict[str, Any], *, full: bool = False) -> str:
    report = top_report(event)
    cause = "no cause" if report is None else f"top cause {report['analyzer']}"
    said = "" if report is None else str(report.get("details", ""))
    details = f": {said if full else said[:160]}"
    return (
        f"{event['type']} {event.get('displayName', '')!r} hosts={event.get('hosts')}"
        f" start={event['startTime']} state={event.get('state')}; {cause}{details}"
    )


def print_goals(outcomes: list[Outcome]) -> None:
    """The goal lines, then each miss, false event and unattributed load-caused event."""
    misses = [o for o in outcomes if o.scenario.event is not None and o.hit is None]
    quiet_noise = [
        o
        for o in outcomes
        if o.condition == "quiet" and o.scenario.event is None and (o.false or o.load_caused)
    ]
    loaded = [o for o in outcomes if o.condition == "loaded"]
    loaded_false = sum(len(o.false) for o in loaded)
    load_caused = [e for o in loaded for e in o.load_caused]
    unattributed = [e for e in load_caused if top_cause(e) != CONTENTION_CAUSE]
    unnamed = [e for e in load_caused if not report_names(top_report(e), BURNER_NAME)]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    emit()
    emit(f"goal: every injected fault found — misses {len(misses)}: {verdict(not misses)}")
    emit(
        "goal: no event on quiet workloads on a quiet host — runs with events"
        f" {len(quiet_noise)}: {verdict(not quiet_noise)}"
    )
    if loaded:
        ok = not loaded_false and not unattributed and not unnamed
        emit(
            "goal: on a loaded host only slowdowns the load caused, attributed to it — false"
            f" {loaded_false}, load-caused {len(load_caused)} (to {CONTENTION_CAUSE}:"
            f" {len(load_caused) - len(unattributed)}, naming {BURNER_NAME}:"
            f" {len(load_caused) - len(unnamed)}): {verdict(ok)}"
        )
    emit()
    for outcome in outcomes:
        where = f"{outcome.condition} #{outcome.repeat} {outcome.scenario.name} ({outcome.run_id})"
        if outcome.scenario.event is not None and outcome.hit is None:
            emit(f"miss  {where}: no {outcome.scenario.event}")
        if outcome.hit is not None:
            wrong = outcome.scenario.top_cause not in (None, top_cause(outcome.hit))
            no_burner = outcome.scenario.load is not None and not report_names(
                top_report(outcome.hit), BURNER_NAME
            )
            if wrong or no_burner:
                began = ""
                if outcome.scenario.load is not None:
                    at = outcome.load_started
                    began = f"load began {at:%H:%M:%S}; " if at else "load never began; "
                emit(f"cause {where}: {began}{_describe(outcome.hit, full=True)}")
        for event in outcome.false:
            emit(f"false {where}: {_describe(event)}")
        for event in outcome.load_caused:
            if top_cause(event) != CONTENTION_CAUSE:
                emit(f"load  {where}: not attributed: {_describe(event)}")


def _machine() -> str:
    load = os.getloadavg()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],  # noqa: S607  # the repo's git
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return (
        f"{host_platform.node()}: {os.cpu_count()} CPUs, {host_platform.platform()},"
        f" Python {host_platform.python_version()}, load average {load[0]:.2f} {load[1]:.2f}"
        f" {load[2]:.2f} at start, commit {commit or '?'}"
    )


def main() -> None:
    """Run the passes and print the tables."""
    args = _args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    names = args.scenarios.split(",")
    scenarios = [s for s in SCENARIOS if s.name in names]
    conditions = args.conditions.split(",")
    seed = args.seed if args.seed is not None else random.randrange(2**32)  # noqa: S311  # load timing, not secrets
    rng = random.Random(seed)  # noqa: S311
    emit(f"command: {shlex.join([Path(sys.executable).name, *sys.argv])}  (seed {seed})")
    emit(f"machine: {_machine()}")
    emit(
        f"scenarios: {len(scenarios)} x {args.repeats} repeats x {len(conditions)} conditions;"
        f" started {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
    )
    outcomes: list[Outcome] = []
    with fresh_database() as database_url, serve(NATS, database_url, FAST_RULES) as platform:
        for condition in conditions:
            for repeat in range(1, args.repeats + 1):
                started = time.monotonic()
                done, bursts = run_pass(platform, scenarios, condition, repeat, rng)
                outcomes += done
                ran = [b for b in bursts if b.started is not None]
                shapes = ", ".join(f"{b.load.burners}x{b.load.seconds:.0f}s" for b in ran)
                emit(
                    f"pass {condition} #{repeat}: {len(done)} runs, {len(ran)} bursts of load"
                    f" ({shapes or 'none'}; the scenarios' own included),"
                    f" {time.monotonic() - started:.0f} s, load average"
                    f" {os.getloadavg()[0]:.1f}"
                )
    emit()
    print_header()
    for condition in conditions:
        print_table(condition, [o for o in outcomes if o.condition == condition])
    emit(
        "(cause ok: hits whose top cause is the scenario's; burner: hits of scenarios with"
        f" their own load whose top cause names {BURNER_NAME}; load: slowdowns that started"
        " while injected load ran, → cpu: attributed to host-cpu-contention, → burner:"
        " naming it)"
    )
    print_goals(outcomes)


if __name__ == "__main__":
    main()

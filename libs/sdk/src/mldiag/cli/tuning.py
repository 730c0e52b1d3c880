"""``mldiag hp-tuning-jobs``: hyperparameter tuning jobs from the command line, in the shape
of ``gcloud ai hp-tuning-jobs``.

``create`` sends the ``HyperparameterTuningJob`` of ``--config`` (gcloud's file: at least
``studySpec`` and ``trialJobSpec``, camelCase or snake_case keys), the flags over it;
``list``, ``describe`` (the job and a table of its trials), ``cancel`` and ``delete`` do what
gcloud's do.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import Context, UsageError, resource_argument
from mldiag.cli.jobs import merge_labels
from mldiag.cli.output import cell, flatten, labels_cell, render_fields, render_table, short_time
from mldiag.cli.progress import Progress, poll_until
from mldiag.cli.resources import (
    Verb,
    add_list_flags,
    client_kwargs,
    command_group,
    emit_cancelled,
    emit_deleted,
    emit_list,
    final_status,
    list_flagged,
    mapping,
    number,
    positive,
    read_config,
    resource_id,
)
from mldiag.jobs import TERMINAL_STATES
from mldiag.training_api import TUNING_JOBS, TuningJobsClient

ALGORITHMS: dict[str, str] = {
    "unspecified": "ALGORITHM_UNSPECIFIED",
    "algorithm-unspecified": "ALGORITHM_UNSPECIFIED",
    "grid": "GRID_SEARCH",
    "grid-search": "GRID_SEARCH",
    "random": "RANDOM_SEARCH",
    "random-search": "RANDOM_SEARCH",
}
"""``--algorithm`` values (the short names, and gcloud's) and the StudySpec.Algorithm each
sets."""

_COUNTS = (
    ("max_trial_count", "maxTrialCount", 1),
    ("parallel_trial_count", "parallelTrialCount", 1),
    ("max_failed_trial_count", "maxFailedTrialCount", None),
)
"""(flag's attribute, the job's field, gcloud's default when neither file nor flag sets it)."""


def build_tuning_request(args: argparse.Namespace) -> JsonObject:
    """The HyperparameterTuningJob ``hp-tuning-jobs create`` sends: ``--config`` first, the
    flags over it (gcloud's rule); ``maxTrialCount`` and ``parallelTrialCount`` default to 1
    as gcloud's do."""
    body = read_config(Path(args.config), "a HyperparameterTuningJob")
    where = f"--config {args.config}"
    body["studySpec"] = study = mapping(body, "studySpec", where)
    body["trialJobSpec"] = mapping(body, "trialJobSpec", where)
    if args.display_name:
        body["displayName"] = args.display_name
    if not body.get("displayName"):
        raise UsageError("give --display-name (or displayName in --config)")
    for attribute, field, default in _COUNTS:
        value = getattr(args, attribute)
        if value is not None:
            body[field] = value
        elif field not in body and default is not None:
            body[field] = default
    if args.algorithm:
        study["algorithm"] = ALGORITHMS[args.algorithm]
    merge_labels(body, args.labels)
    return body


# the parser


def add_tuning_commands(commands: Any) -> None:
    """Add ``hp-tuning-jobs`` (create, list, describe, cancel, delete)."""
    verb = command_group(
        commands,
        "hp-tuning-jobs",
        "run hyperparameter tuning jobs (Vertex tuning jobs, gcloud's shape)",
    )
    _add_create(verb)
    listing = verb("list", _list, "list tuning jobs (newest first)")
    add_list_flags(listing, "tuning jobs", "state=JOB_STATE_RUNNING")
    for name, handler, text in (
        ("describe", _describe, "show one tuning job and its trials"),
        ("cancel", _cancel, "cancel a tuning job (its active trials first)"),
        ("delete", _delete, "delete an ended tuning job"),
    ):
        verb(name, handler, text).add_argument(
            "tuning_job",
            metavar="HP_TUNING_JOB",
            type=resource_argument(TUNING_JOBS),
            help="id or full name",
        )


def _add_create(verb: Verb) -> None:
    create = verb(
        "create",
        _create,
        "create a hyperparameter tuning job",
        "Create a tuning job and print its name. --config holds the job in YAML or JSON"
        " (gcloud's format: studySpec and trialJobSpec at least; camelCase or snake_case keys);"
        " flags override the file.",
    )
    create.add_argument("--display-name", help="a name for people [displayName of --config]")
    create.add_argument(
        "--config",
        metavar="FILE",
        required=True,
        help="a HyperparameterTuningJob (studySpec, trialJobSpec, ...) in YAML or JSON",
    )
    create.add_argument(
        "--max-trial-count", type=positive, help="how many trials at most [the file's, else 1]"
    )
    create.add_argument(
        "--parallel-trial-count", type=positive, help="trials at once [the file's, else 1]"
    )
    create.add_argument(
        "--max-failed-trial-count",
        type=_count,
        help="fail the job after this many infeasible trials [0: half of the trials]",
    )
    create.add_argument(
        "--algorithm",
        choices=sorted(ALGORITHMS),
        metavar="{grid,random,unspecified}",
        help="the search (gcloud's grid-search, random-search, algorithm-unspecified too)",
    )
    create.add_argument("--labels", action="append", default=[], metavar="K=V,...")
    create.add_argument(
        "--wait", action="store_true", help="wait for the job to end (exit 1 unless SUCCEEDED)"
    )


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a count (0 or more), got {text!r}")
    return int(text)


# the verbs


def _client(ctx: Context, args: argparse.Namespace) -> TuningJobsClient:
    return TuningJobsClient(**client_kwargs(ctx, args))


def _create(ctx: Context, args: argparse.Namespace) -> int:
    body = build_tuning_request(args)
    with _client(ctx, args) as client:
        job = client.create_tuning_job(body)
        ctx.emit(
            job,
            lambda: (
                f"created hyperparameter tuning job {job.get('name', '')}"
                f" ({job.get('state', '')})\n"
                f"see its trials: mldiag hp-tuning-jobs describe {resource_id(job)}"
            ),
        )
        if not args.wait:
            return 0
        name = str(job.get("name", ""))
        with Progress(f"tuning job {resource_id(job)}", enabled=not ctx.quiet) as progress:
            ended = poll_until(lambda: client.get_tuning_job(name), TERMINAL_STATES, progress)
    return final_status(ended, "tuning job", "JOB_STATE_SUCCEEDED")


TUNING_JOB_COLUMNS = ("ID", "DISPLAY NAME", "STATE", "TRIALS", "CREATED", "LABELS")
"""The columns of ``mldiag hp-tuning-jobs list``."""


def _row(job: JsonObject) -> tuple[str, ...]:
    trials = job.get("trials")
    return (
        resource_id(job),
        cell(job.get("displayName")),
        cell(job.get("state")),
        f"{len(trials)}/{cell(job.get('maxTrialCount'))}" if isinstance(trials, list) else "",
        short_time(job.get("createTime")),
        labels_cell(job.get("labels")),
    )


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        jobs = list_flagged(client.iter_tuning_jobs, args)
    return emit_list(ctx, TUNING_JOBS, jobs, TUNING_JOB_COLUMNS, _row, "no tuning jobs")


TRIAL_COLUMNS = ("TRIAL", "STATE", "PARAMETERS", "FINAL VALUE", "STOPPED EARLY", "CUSTOM JOB")
"""The columns of the trials table of ``mldiag hp-tuning-jobs describe``."""


def parameters_cell(trial: JsonObject) -> str:
    """A trial's parameters as ``id=value,...`` (integral numbers without ``.0``)."""
    return ",".join(
        f"{p.get('parameterId', '')}={number(p.get('value'))}"
        for p in trial.get("parameters") or []
        if isinstance(p, dict)
    )


def final_value_cell(trial: JsonObject) -> str:
    """A trial's final measurement: the value (one metric) or ``metric=value,...``."""
    final = trial.get("finalMeasurement")
    metrics = final.get("metrics") if isinstance(final, dict) else None
    if not isinstance(metrics, list) or not metrics:
        return ""
    if len(metrics) == 1:
        return number(metrics[0].get("value"))
    return ",".join(f"{m.get('metricId', '')}={number(m.get('value'))}" for m in metrics)


def stopped_early(trial: JsonObject) -> bool:
    """Whether median stopping ended the trial (``stoppedEarly``, mldiag's extension of
    Vertex's Trial: the old AI Platform's ``isTrialStoppedEarly``)."""
    return bool(trial.get("stoppedEarly"))


def trial_row(trial: JsonObject) -> tuple[str, ...]:
    """One trial as a row of :data:`TRIAL_COLUMNS`."""
    state = cell(trial.get("state"))
    ended = state in {"SUCCEEDED", "INFEASIBLE"}
    return (
        cell(trial.get("id")),
        state,
        parameters_cell(trial),
        final_value_cell(trial) or cell(trial.get("infeasibleReason")),
        ("yes" if stopped_early(trial) else "no") if ended else "",
        str(trial.get("customJob", "")).rsplit("/", 1)[-1],
    )


PARAMETER_COLUMNS = ("PARAMETER", "TYPE", "DOMAIN", "SCALE")
"""The columns of the search space table of ``mldiag hp-tuning-jobs describe``."""

_DOMAINS = (
    ("doubleValueSpec", "DOUBLE"),
    ("integerValueSpec", "INTEGER"),
    ("categoricalValueSpec", "CATEGORICAL"),
    ("discreteValueSpec", "DISCRETE"),
)
_CONDITIONS = ("parentDiscreteValues", "parentIntValues", "parentCategoricalValues")


def parameter_rows(parameters: list[Any], under: str = "") -> list[tuple[str, ...]]:
    """The search space as rows of :data:`PARAMETER_COLUMNS` (a conditional parameter
    follows its parent, as ``parent=values: child``)."""
    rows: list[tuple[str, ...]] = []
    for spec in parameters:
        if not isinstance(spec, dict):
            continue
        kind, domain = "", ""
        for key, name in _DOMAINS:
            value = spec.get(key)
            if isinstance(value, dict):
                kind = name
                if "values" in value:
                    domain = "{" + ",".join(number(v) for v in value["values"]) + "}"
                else:
                    low, high = value.get("minValue"), value.get("maxValue")
                    domain = f"[{number(low)}, {number(high)}]"
        scale = str(spec.get("scaleType", ""))
        parameter_id = str(spec.get("parameterId", ""))
        rows.append(
            (under + parameter_id, kind, domain, "" if scale == "SCALE_TYPE_UNSPECIFIED" else scale)
        )
        for child in spec.get("conditionalParameterSpecs") or []:
            if not isinstance(child, dict):
                continue
            condition: dict[str, Any] = next(
                (child[key] for key in _CONDITIONS if isinstance(child.get(key), dict)), {}
            )
            values = ",".join(number(v) for v in condition.get("values") or [])
            prefix = f"{under}{parameter_id}={{{values}}}: "
            rows += parameter_rows([child.get("parameterSpec")], prefix)
    return rows


def _describe(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        job = client.get_tuning_job(args.tuning_job)

    def table() -> str:
        fields = {key: value for key, value in job.items() if key != "trials"}
        flat = flatten(fields)
        parameters = flat.pop("studySpec.parameters", None)
        text = render_fields((key, cell(value)) for key, value in flat.items())
        if isinstance(parameters, list) and parameters:
            rows = parameter_rows(parameters)
            text += "\n\n" + render_table(PARAMETER_COLUMNS, rows)
        trials = [t for t in job.get("trials") or [] if isinstance(t, dict)]
        if trials:
            text += "\n\n" + render_table(TRIAL_COLUMNS, map(trial_row, trials))
        else:
            text += "\n\nno trials yet"
        return text

    ctx.emit(job, table)
    return 0


def _cancel(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        answer = client.cancel_tuning_job(args.tuning_job)
    return emit_cancelled(ctx, answer, args.tuning_job, TUNING_JOBS, "tuning job", "hp-tuning-jobs")


def _delete(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        answer = client.delete_tuning_job(args.tuning_job)
    return emit_deleted(ctx, answer, args.tuning_job, TUNING_JOBS, "tuning job")

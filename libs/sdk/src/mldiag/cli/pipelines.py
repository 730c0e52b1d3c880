"""``mldiag training-pipelines``: training pipelines (run a custom job or a tuning job, then
upload the model it wrote) from the command line, in the shape of gcloud's command groups.

``create --config pipeline.yaml`` sends the ``TrainingPipeline`` of the file (camelCase or
snake_case keys). Two shorter forms are accepted too, each turned into the full body:

- ``jobSpec:`` (a ``CustomJobSpec``, as in ``mldiag jobs create --config``) beside
  ``modelToUpload``: a custom task (``trainingTaskDefinition`` the Vertex SDK's
  ``custom_task_1.0.0.yaml``, ``trainingTaskInputs`` the spec);
- ``studySpec:`` and ``trialJobSpec:`` (with ``maxTrialCount``, ``parallelTrialCount``,
  ``maxFailedTrialCount``) beside ``modelToUpload``: a hyperparameter tuning task.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import Context, UsageError, resource_argument
from mldiag.cli.jobs import merge_labels
from mldiag.cli.output import cell, labels_cell, short_time
from mldiag.cli.progress import Progress, poll_until
from mldiag.cli.resources import (
    Verb,
    add_list_flags,
    client_kwargs,
    command_group,
    emit_cancelled,
    emit_deleted,
    emit_fields,
    emit_list,
    final_status,
    list_flagged,
    mapping,
    read_config,
    resource_id,
)
from mldiag.training_api import (
    CUSTOM_TASK,
    PIPELINES,
    TERMINAL_PIPELINE_STATES,
    TUNING_TASK,
    PipelinesClient,
)

TUNING_TASK_KEYS = (
    "studySpec",
    "trialJobSpec",
    "maxTrialCount",
    "parallelTrialCount",
    "maxFailedTrialCount",
)
"""The keys of the short tuning form, moved into ``trainingTaskInputs``."""


def build_pipeline_request(args: argparse.Namespace) -> JsonObject:
    """The TrainingPipeline ``training-pipelines create`` sends: the ``--config`` file (the
    short forms expanded), ``--display-name`` and ``--labels`` over it."""
    where = f"--config {args.config}"
    body = expand_short_form(read_config(Path(args.config), "a TrainingPipeline"), where)
    if args.display_name:
        body["displayName"] = args.display_name
    if not body.get("displayName"):
        raise UsageError("give --display-name (or displayName in --config)")
    if "modelToUpload" in body:
        body["modelToUpload"] = mapping(body, "modelToUpload", where)
    merge_labels(body, args.labels)
    return body


def expand_short_form(body: JsonObject, where: str) -> JsonObject:
    """``body`` with a short form (``jobSpec``, or ``studySpec`` and ``trialJobSpec``) made
    into ``trainingTaskDefinition`` and ``trainingTaskInputs``; a full body unchanged."""
    custom = "jobSpec" in body
    tuning = "studySpec" in body or "trialJobSpec" in body
    given = "trainingTaskInputs" in body
    if custom and tuning:
        raise UsageError(f"{where}: give jobSpec (a custom job) or studySpec and trialJobSpec")
    if (custom or tuning) and given:
        raise UsageError(
            f"{where}: give trainingTaskInputs or the short form"
            f" ({'jobSpec' if custom else 'studySpec and trialJobSpec'}), not both"
        )
    body = dict(body)
    if custom:
        body["trainingTaskInputs"] = mapping(body, "jobSpec", where)
        del body["jobSpec"]
        body.setdefault("trainingTaskDefinition", CUSTOM_TASK)
    elif tuning:
        inputs = {key: body.pop(key) for key in TUNING_TASK_KEYS if key in body}
        for key in ("studySpec", "trialJobSpec"):
            inputs[key] = mapping(inputs, key, where)
        body["trainingTaskInputs"] = inputs
        body.setdefault("trainingTaskDefinition", TUNING_TASK)
    elif "trainingTaskInputs" not in body:
        raise UsageError(
            f"{where}: give trainingTaskInputs (with trainingTaskDefinition), or jobSpec,"
            " or studySpec and trialJobSpec"
        )
    else:
        body["trainingTaskInputs"] = inputs = mapping(body, "trainingTaskInputs", where)
        body.setdefault(
            "trainingTaskDefinition", TUNING_TASK if "studySpec" in inputs else CUSTOM_TASK
        )
    return body


# the parser


def add_pipelines_commands(commands: Any) -> None:
    """Add ``training-pipelines`` (create, list, describe, cancel, delete)."""
    verb = command_group(
        commands,
        "training-pipelines",
        "run training pipelines: a custom or tuning job, then its model uploaded",
    )
    _add_create(verb)
    listing = verb("list", _list, "list training pipelines (newest first)")
    add_list_flags(listing, "pipelines", "state=PIPELINE_STATE_RUNNING")
    for name, handler, text in (
        ("describe", _describe, "show one training pipeline"),
        ("cancel", _cancel, "cancel a training pipeline (and the job it runs)"),
        ("delete", _delete, "delete an ended training pipeline"),
    ):
        verb(name, handler, text).add_argument(
            "pipeline",
            metavar="TRAINING_PIPELINE",
            type=resource_argument(PIPELINES),
            help="id or full name",
        )


def _add_create(verb: Verb) -> None:
    create = verb(
        "create",
        _create,
        "create a training pipeline",
        "Create a training pipeline and print its name. --config holds a TrainingPipeline"
        " in YAML or JSON (camelCase or snake_case keys); or, shorter, jobSpec (a"
        " CustomJobSpec) or studySpec and trialJobSpec (a tuning job), with modelToUpload.",
    )
    create.add_argument(
        "--config", metavar="FILE", required=True, help="a TrainingPipeline in YAML or JSON"
    )
    create.add_argument("--display-name", help="a name for people [displayName of --config]")
    create.add_argument("--labels", action="append", default=[], metavar="K=V,...")
    create.add_argument(
        "--wait",
        action="store_true",
        help="wait for the pipeline to end (exit 1 unless SUCCEEDED)",
    )


# the verbs


def _client(ctx: Context, args: argparse.Namespace) -> PipelinesClient:
    return PipelinesClient(**client_kwargs(ctx, args))


def _create(ctx: Context, args: argparse.Namespace) -> int:
    body = build_pipeline_request(args)
    with _client(ctx, args) as client:
        pipeline = client.create_pipeline(body)
        ctx.emit(
            pipeline,
            lambda: (
                f"created training pipeline {pipeline.get('name', '')}"
                f" ({pipeline.get('state', '')})\n"
                f"see it with: mldiag training-pipelines describe {resource_id(pipeline)}"
            ),
        )
        if not args.wait:
            return 0
        name = str(pipeline.get("name", ""))
        what = f"training pipeline {resource_id(pipeline)}"
        with Progress(what, enabled=not ctx.quiet) as progress:
            ended = poll_until(
                lambda: client.get_pipeline(name), TERMINAL_PIPELINE_STATES, progress
            )
    code = final_status(ended, "training pipeline", "PIPELINE_STATE_SUCCEEDED")
    model = ended.get("modelToUpload")
    if code == 0 and isinstance(model, dict) and model.get("name"):
        print(
            f"uploaded model {model['name']} version {model.get('versionId', '')}", file=sys.stderr
        )
    return code


PIPELINE_COLUMNS = ("ID", "DISPLAY NAME", "STATE", "MODEL", "CREATED", "LABELS")
"""The columns of ``mldiag training-pipelines list``."""


def _model_cell(pipeline: JsonObject) -> str:
    model = pipeline.get("modelToUpload")
    if not isinstance(model, dict) or not model.get("name"):
        return ""
    version = model.get("versionId")
    return resource_id(model) + (f"@{version}" if version else "")


def _row(pipeline: JsonObject) -> tuple[str, ...]:
    return (
        resource_id(pipeline),
        cell(pipeline.get("displayName")),
        cell(pipeline.get("state")),
        _model_cell(pipeline),
        short_time(pipeline.get("createTime")),
        labels_cell(pipeline.get("labels")),
    )


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        pipelines = list_flagged(client.iter_pipelines, args)
    return emit_list(ctx, PIPELINES, pipelines, PIPELINE_COLUMNS, _row, "no training pipelines")


def _describe(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        pipeline = client.get_pipeline(args.pipeline)
    return emit_fields(ctx, pipeline)


def _cancel(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        answer = client.cancel_pipeline(args.pipeline)
    return emit_cancelled(
        ctx, answer, args.pipeline, PIPELINES, "training pipeline", "training-pipelines"
    )


def _delete(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        answer = client.delete_pipeline(args.pipeline)
    return emit_deleted(ctx, answer, args.pipeline, PIPELINES, "training pipeline")

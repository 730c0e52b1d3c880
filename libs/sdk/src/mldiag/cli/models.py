"""``mldiag models``: the model registry from the command line, in the shape of
``gcloud ai models``.

``upload`` registers a model (or, with ``--parent-model``, a new version of one) whose files
are at ``--artifact-uri``; ``list``, ``describe MODEL[@VERSION|@ALIAS]``, ``versions`` (gcloud's
``list-version``), ``delete`` and ``delete-version MODEL@VERSION`` do what gcloud's do.
"""

from __future__ import annotations

import argparse
from typing import Any

from mldiag.api_client import ApiError, JsonObject
from mldiag.cli.common import Context, UsageError, resource_argument
from mldiag.cli.jobs import parse_key_values
from mldiag.cli.output import cell, labels_cell, render_table, short_time
from mldiag.cli.resources import (
    Verb,
    add_list_flags,
    client_kwargs,
    command_group,
    emit_fields,
    emit_list,
    list_all,
    list_flagged,
    order_by,
    resource_id,
)
from mldiag.training_api import MODELS, ModelsClient, parse_resource_name

MODEL = resource_argument(MODELS)
"""An argparse type: a model's id (with ``@VERSION`` or ``@ALIAS`` where one is taken) or
full name."""

RPC_CODES = {
    1: "cancelled",
    3: "invalid_argument",
    4: "deadline_exceeded",
    5: "not_found",
    6: "already_exists",
    7: "permission_denied",
    9: "failed_precondition",
    10: "aborted",
    12: "unimplemented",
    13: "internal",
    14: "unavailable",
}
"""google.rpc codes by number, for a failed operation's ``error``."""


def _split(texts: list[str]) -> list[str]:
    return [item for text in texts for item in text.split(",") if item]


def build_upload_request(args: argparse.Namespace) -> JsonObject:
    """The ``model`` of ``models upload`` (Vertex's UploadModelRequest.model)."""
    container: JsonObject = {"imageUri": args.container_image_uri}
    if args.container_command:
        container["command"] = _split(args.container_command)
    if args.container_args:
        container["args"] = _split(args.container_args)
    env = parse_key_values(args.container_env_vars, "--container-env-vars")
    if env:
        container["env"] = [{"name": name, "value": value} for name, value in env.items()]
    if args.container_ports:
        ports = []
        for port in _split(args.container_ports):
            if not port.isdigit() or not 1 <= int(port) <= 65535:
                raise UsageError(f"--container-ports: {port!r} is not a port (1 to 65535)")
            ports.append({"containerPort": int(port)})
        container["ports"] = ports
    if args.container_predict_route:
        container["predictRoute"] = args.container_predict_route
    if args.container_health_route:
        container["healthRoute"] = args.container_health_route
    model: JsonObject = {
        "displayName": args.display_name,
        "artifactUri": args.artifact_uri,
        "containerSpec": container,
    }
    if args.description:
        model["description"] = args.description
    if args.version_description:
        model["versionDescription"] = args.version_description
    if args.version_aliases:
        model["versionAliases"] = _split(args.version_aliases)
    if args.labels:
        model["labels"] = parse_key_values(args.labels, "--labels")
    return model


def version_reference(reference: str) -> str:
    """``MODEL@VERSION`` (or a full name with one) as it is; a usage error without ``@``."""
    _, _, model_id = parse_resource_name(reference, MODELS)
    name, sep, version = model_id.partition("@")
    if not sep or not name or not version:
        raise UsageError(f"{reference!r}: name a version, MODEL@VERSION (e.g. 123@2)")
    return reference


def operation_result(operation: JsonObject) -> JsonObject:
    """A done operation's ``response``; its ``error`` raised as :class:`ApiError`."""
    error = operation.get("error")
    if isinstance(error, dict) and error:
        code = error.get("code")
        reason = RPC_CODES.get(code, "unknown") if isinstance(code, int) else str(code)
        raise ApiError(200, reason, str(error.get("message", "")), error.get("details"))
    if not operation.get("done"):
        raise ApiError(200, "deadline_exceeded", f"operation {operation.get('name')} not done")
    response = operation.get("response")
    return response if isinstance(response, dict) else {}


# the parser


def add_models_commands(commands: Any) -> None:
    """Add ``models`` (upload, list, describe, versions/list-version, delete,
    delete-version)."""
    verb = command_group(
        commands, "models", "keep trained models and their versions (gcloud ai models' shape)"
    )
    _add_upload(verb)
    listing = verb("list", _list, "list models (each as its default version)")
    add_list_flags(listing, "models", "displayName=resnet")
    describe = verb(
        "describe",
        _describe,
        "show a model's version",
        "Show a model's version: MODEL (its default version), MODEL@VERSION or MODEL@ALIAS.",
    )
    describe.add_argument(
        "model", metavar="MODEL[@VERSION|@ALIAS]", type=MODEL, help="id or full name"
    )
    versions = verb("versions", _versions, "list a model's versions", aliases=("list-version",))
    versions.add_argument("model", metavar="MODEL", type=MODEL, help="id or full name")
    add_list_flags(versions, "versions", "labels.stage=prod")
    verb("delete", _delete, "delete a model and all its versions").add_argument(
        "model", metavar="MODEL", type=MODEL, help="id or full name"
    )
    verb(
        "delete-version",
        _delete_version,
        "delete one version of a model",
        "Delete one version, MODEL@VERSION. The default version cannot be deleted while"
        " other versions remain (move the default alias first).",
    ).add_argument("model", metavar="MODEL@VERSION", type=MODEL, help="e.g. 123@2, or a full name")


def _add_upload(verb: Verb) -> None:
    upload = verb(
        "upload",
        _upload,
        "upload a model (or a new version of one)",
        "Register a model whose files are at --artifact-uri and print its name and version."
        " With --parent-model the upload is the next version of that model.",
    )
    upload.add_argument("--display-name", required=True, help="a name for people")
    upload.add_argument(
        "--artifact-uri", required=True, metavar="URI", help="gs:// or file:// folder of files"
    )
    upload.add_argument(
        "--container-image-uri", required=True, metavar="IMAGE", help="the serving image"
    )
    upload.add_argument(
        "--parent-model", metavar="MODEL", type=MODEL, help="upload a new version of it"
    )
    upload.add_argument(
        "--version-aliases",
        action="append",
        default=[],
        metavar="ALIAS,...",
        help="aliases of the new version (e.g. prod,candidate)",
    )
    upload.add_argument("--model-id", metavar="ID", help="the new model's id [chosen]")
    upload.add_argument("--labels", action="append", default=[], metavar="K=V,...")
    upload.add_argument("--description", help="the model's description")
    upload.add_argument("--version-description", help="this version's description")
    for flag, metavar, text in (
        ("--container-command", "WORD,...", "the serving entrypoint"),
        ("--container-args", "ARG,...", "the serving arguments"),
        ("--container-env-vars", "K=V,...", "the serving environment"),
        ("--container-ports", "PORT,...", "the serving ports"),
    ):
        upload.add_argument(flag, action="append", default=[], metavar=metavar, help=text)
    upload.add_argument("--container-predict-route", metavar="PATH")
    upload.add_argument("--container-health-route", metavar="PATH")


# the verbs


def _client(ctx: Context, args: argparse.Namespace) -> ModelsClient:
    return ModelsClient(**client_kwargs(ctx, args))


def _upload(ctx: Context, args: argparse.Namespace) -> int:
    model = build_upload_request(args)
    with _client(ctx, args) as client:
        operation = client.upload_model(
            model, parent_model=args.parent_model or "", model_id=args.model_id or ""
        )
        result = operation_result(client.wait_operation(operation))
    name, version = result.get("model", ""), result.get("modelVersionId", "")
    ctx.emit(
        result,
        lambda: (
            f"uploaded model {name} version {version}\n"
            f"see it with: mldiag models describe {str(name).rsplit('/', 1)[-1]}@{version}"
        ),
    )
    return 0


MODEL_COLUMNS = ("MODEL ID", "DISPLAY NAME", "DEFAULT VERSION", "ALIASES", "CREATED", "LABELS")
"""The columns of ``mldiag models list``."""

VERSION_COLUMNS = ("VERSION", "ALIASES", "CREATED", "ARTIFACT URI", "PIPELINE", "LABELS")
"""The columns of ``mldiag models versions``."""


def _aliases(model: JsonObject) -> str:
    return ",".join(str(alias) for alias in model.get("versionAliases") or [])


def _model_row(model: JsonObject) -> tuple[str, ...]:
    return (
        resource_id(model),
        cell(model.get("displayName")),
        cell(model.get("versionId")),
        _aliases(model),
        short_time(model.get("createTime")),
        labels_cell(model.get("labels")),
    )


def _version_row(model: JsonObject) -> tuple[str, ...]:
    return (
        cell(model.get("versionId")),
        _aliases(model),
        short_time(model.get("versionCreateTime")),
        cell(model.get("artifactUri")),
        str(model.get("trainingPipeline", "")).rsplit("/", 1)[-1],
        labels_cell(model.get("labels")),
    )


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        models = list_flagged(client.iter_models, args)
    return emit_list(ctx, MODELS, models, MODEL_COLUMNS, _model_row, "no models")


def _describe(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        model = client.get_model(args.model)
    return emit_fields(ctx, model)


def _versions(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        versions = list_all(
            client.iter_versions(
                args.model,
                filter=args.filter,
                order_by=order_by(args.sort_by),
                page_size=args.page_size,
            ),
            args.limit,
        )
    ctx.emit(
        {"models": versions},
        lambda: render_table(VERSION_COLUMNS, map(_version_row, versions)),
    )
    return 0


def _delete(ctx: Context, args: argparse.Namespace) -> int:
    _, _, model_id = parse_resource_name(args.model, MODELS)
    if "@" in model_id:
        raise UsageError(
            f"{args.model!r} names a version: delete it with"
            f" mldiag models delete-version {args.model}"
        )
    with _client(ctx, args) as client:
        operation = client.wait_operation(client.delete_model(args.model))
    operation_result(operation)
    ctx.emit(operation, lambda: f"deleted model {model_id} (every version)")
    return 0


def _delete_version(ctx: Context, args: argparse.Namespace) -> int:
    reference = version_reference(args.model)
    with _client(ctx, args) as client:
        operation = client.wait_operation(client.delete_version(reference))
    operation_result(operation)
    _, _, model_id = parse_resource_name(reference, MODELS)
    name, _, version = model_id.partition("@")
    ctx.emit(operation, lambda: f"deleted version {version} of model {name}")
    return 0

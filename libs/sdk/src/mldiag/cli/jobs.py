"""``mldiag jobs``: custom training jobs from the command line, in the shape of
``gcloud ai custom-jobs``.

``create`` builds a Vertex ``CustomJob`` from ``--worker-pool-spec`` flags (gcloud's keys) and
``--config job.yaml`` (a ``CustomJobSpec``, gcloud's format), packs and uploads a
``local-package-path`` for you, prints the job's name and with ``--wait``/``--follow`` waits
for its end (exit status 0 when it SUCCEEDED, 1 otherwise). ``list``, ``describe``,
``cancel``, ``delete``, ``logs`` and ``stream-logs`` do what gcloud's do.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mldiag.api_client import JsonObject
from mldiag.cli.common import Context, UsageError, add_global_options, resource_argument
from mldiag.cli.output import cell, flatten, labels_cell, render_fields, render_table, short_time
from mldiag.cli.progress import Progress, poll_until
from mldiag.cli.resources import emit_cancelled, emit_deleted, emit_list, list_all, read_mapping
from mldiag.credentials import resolve_token
from mldiag.jobs import CUSTOM_JOBS, TERMINAL_STATES, JobsClient
from mldiag.packaging import PackagingError, build_wheel

JOB = resource_argument(CUSTOM_JOBS)
"""An argparse type: a custom job's id or full name."""

POOL_KEYS: dict[str, str] = {
    "machine-type": "the machine type (machineSpec.machineType), e.g. e2-standard-4",
    "replica-count": "how many replicas [1]",
    "accelerator-type": "e.g. NVIDIA_TESLA_T4 (machineSpec.acceleratorType)",
    "accelerator-count": "accelerators per replica [1 with accelerator-type]",
    "container-image-uri": "run this image's command (containerSpec.imageUri)",
    "executor-image-uri": "run a Python package in this image (pythonPackageSpec)",
    "python-module": "the package's module to run, e.g. trainer.task",
    "local-package-path": "a local directory of Python code, packed and uploaded for you",
    "disk-type": "the boot disk type (diskSpec.bootDiskType), e.g. pd-ssd",
    "disk-size": "the boot disk size in GB (diskSpec.bootDiskSizeGb)",
}
"""The keys of ``--worker-pool-spec`` (gcloud's), with what each sets."""

_TIMEOUT = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class PoolFlag:
    """One ``--worker-pool-spec``: the WorkerPoolSpec JSON it makes, and the local package
    directory to pack (its packageUris are filled once uploaded)."""

    spec: JsonObject
    local_package_path: Path | None = None


@dataclass
class JobRequest:
    """What ``jobs create`` sends, and the local packages still to upload into it."""

    body: JsonObject
    local_packages: list[tuple[int, Path, str]] = field(default_factory=list)
    """(pool position, directory, python module) per pool built from a local package."""


def _int(key: str, value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise UsageError(f"--worker-pool-spec {key}={value}: expected an integer") from None
    if number < minimum:
        raise UsageError(f"--worker-pool-spec {key}={value}: expected at least {minimum}")
    return number


def parse_worker_pool_spec(text: str) -> PoolFlag:
    """One ``--worker-pool-spec`` value (``key=value,...``, gcloud's keys); an empty value is
    an empty pool (``{}``: a skipped position)."""
    if not text.strip():
        return PoolFlag({})
    values: dict[str, str] = {}
    for item in text.split(","):
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise UsageError(f"--worker-pool-spec: expected KEY=VALUE, got {item!r}")
        if key not in POOL_KEYS:
            raise UsageError(
                f"--worker-pool-spec: unknown key {key!r}; the keys are " + ", ".join(POOL_KEYS)
            )
        if key in values:
            raise UsageError(f"--worker-pool-spec: {key} is given twice")
        if not value:
            raise UsageError(f"--worker-pool-spec: {key} has no value")
        values[key] = value
    return _pool_from(values)


def _pool_from(values: dict[str, str]) -> PoolFlag:
    container = values.get("container-image-uri")
    executor = values.get("executor-image-uri")
    module = values.get("python-module")
    local = values.get("local-package-path")
    if bool(container) == bool(executor):
        raise UsageError(
            "--worker-pool-spec: give one of container-image-uri (run a command) and"
            " executor-image-uri with python-module (run a Python package)"
        )
    if container and (module or local):
        raise UsageError(
            "--worker-pool-spec: python-module and local-package-path go with"
            " executor-image-uri, not container-image-uri"
        )
    if executor and not module:
        raise UsageError("--worker-pool-spec: executor-image-uri needs python-module")
    spec = _resources(values)
    if container:
        spec["containerSpec"] = {"imageUri": container}
    else:
        spec["pythonPackageSpec"] = {
            "executorImageUri": executor,
            "pythonModule": module,
            "packageUris": [],
        }
    return PoolFlag(spec, Path(local).expanduser() if local else None)


def _resources(values: dict[str, str]) -> JsonObject:
    """machineSpec, replicaCount and diskSpec of a pool's flag values."""
    spec: JsonObject = {}
    machine: JsonObject = {}
    if "machine-type" in values:
        machine["machineType"] = values["machine-type"]
    if "accelerator-type" in values:
        machine["acceleratorType"] = values["accelerator-type"]
        machine["acceleratorCount"] = _int(
            "accelerator-count", values.get("accelerator-count", "1"), 1
        )
    elif "accelerator-count" in values:
        raise UsageError("--worker-pool-spec: accelerator-count needs accelerator-type")
    if machine:
        spec["machineSpec"] = machine
    spec["replicaCount"] = str(_int("replica-count", values.get("replica-count", "1"), 1))
    disk: JsonObject = {}
    if "disk-type" in values:
        disk["bootDiskType"] = values["disk-type"]
    if "disk-size" in values:
        disk["bootDiskSizeGb"] = _int("disk-size", values["disk-size"], 1)
    if disk:
        spec["diskSpec"] = disk
    return spec


def parse_timeout(text: str) -> str:
    """``3600``, ``3600s``, ``90m``, ``2h`` or ``7d`` as a proto Duration (``"3600s"``)."""
    match = _TIMEOUT.fullmatch(text.strip())
    if match is None:
        raise UsageError(f"--timeout {text!r}: write seconds (3600 or 3600s), or 90m, 2h, 7d")
    seconds = float(match.group(1)) * _SECONDS[match.group(2)]
    if seconds <= 0:
        raise UsageError(f"--timeout {text!r}: must be more than zero")
    return f"{seconds:g}s" if seconds != int(seconds) else f"{int(seconds)}s"


def parse_key_values(texts: Iterable[str], flag: str) -> dict[str, str]:
    """``k=v,k2=v2`` values (the flag may repeat) as a dict."""
    pairs: dict[str, str] = {}
    for text in texts:
        for item in text.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"{flag}: expected KEY=VALUE, got {item!r}")
            pairs[key.strip()] = value
    return pairs


def merge_labels(body: JsonObject, given: list[str]) -> None:
    """Put the ``--labels`` flags (``K=V,...``, repeatable) over ``body``'s ``labels``."""
    if given:
        labels = dict(body.get("labels") or {})
        labels.update(parse_key_values(given, "--labels"))
        body["labels"] = labels


def _split_list(texts: Iterable[str]) -> list[str]:
    return [item for text in texts for item in text.split(",") if item != ""]


def load_config(path: Path) -> JsonObject:
    """A ``--config`` file: a ``CustomJobSpec`` in YAML (gcloud's format) or JSON, or a whole
    ``CustomJob`` (with ``jobSpec``); answered as ``{"jobSpec": ..., ...}``."""
    document = read_mapping(path, "a CustomJobSpec")
    if "jobSpec" in document or "job_spec" in document:
        return dict(document)
    return {"jobSpec": document}


def _task(pool: JsonObject) -> JsonObject | None:
    task = pool.get("containerSpec") or pool.get("pythonPackageSpec")
    return task if isinstance(task, dict) else None


def build_job_request(args: argparse.Namespace) -> JobRequest:
    """The CustomJob ``jobs create`` sends: ``--config`` first, flags over it (gcloud's rule:
    ``--worker-pool-spec`` replaces the file's pools; ``--args``, ``--command``,
    ``--env-vars`` and ``--python-package-uris`` apply to every pool)."""
    body: JsonObject = load_config(Path(args.config)) if args.config else {"jobSpec": {}}
    spec = body.get("jobSpec")
    if not isinstance(spec, dict):
        raise UsageError("--config: jobSpec must be a mapping")
    body["jobSpec"] = spec = dict(spec)
    body["displayName"] = args.display_name
    request = JobRequest(body)
    if args.worker_pool_spec:
        flags = [parse_worker_pool_spec(text) for text in args.worker_pool_spec]
        spec["workerPoolSpecs"] = [flag.spec for flag in flags]
        request.local_packages = [
            (position, flag.local_package_path, flag.spec["pythonPackageSpec"]["pythonModule"])
            for position, flag in enumerate(flags)
            if flag.local_package_path is not None
        ]
    pools = spec.get("workerPoolSpecs") or spec.get("worker_pool_specs")
    if not isinstance(pools, list) or not pools:
        raise UsageError("give at least one --worker-pool-spec (or workerPoolSpecs in --config)")
    _apply_to_pools(args, pools, request)
    merge_labels(body, args.labels)
    if args.timeout:
        scheduling = dict(spec.get("scheduling") or {})
        scheduling["timeout"] = parse_timeout(args.timeout)
        spec["scheduling"] = scheduling
    if args.base_output_dir:
        spec["baseOutputDirectory"] = {"outputUriPrefix": args.base_output_dir}
    return request


def _apply_to_pools(args: argparse.Namespace, pools: list[Any], request: JobRequest) -> None:
    arguments = _split_list(args.args)
    command = _split_list(args.command)
    env = parse_key_values(args.env_vars, "--env-vars")
    package_uris = _split_list(args.python_package_uris)
    local = {position for position, _, _ in request.local_packages}
    containers = 0
    for position, pool in enumerate(pools):
        if not isinstance(pool, dict):
            raise UsageError(f"workerPoolSpecs[{position}] must be a mapping")
        task = _task(pool)
        if task is None:
            continue  # an empty position
        if "containerSpec" in pool:
            containers += 1
            if command:
                task["command"] = command
        elif package_uris:
            task["packageUris"] = [*task.get("packageUris", []), *package_uris]
        elif not task.get("packageUris") and position not in local:
            raise UsageError(
                f"worker pool {position} runs a Python package but none is given: add"
                " local-package-path=DIR to its --worker-pool-spec, or --python-package-uris"
            )
        if arguments:
            task["args"] = arguments
        if env:
            merged = {item["name"]: item.get("value", "") for item in task.get("env", [])}
            merged.update(env)
            task["env"] = [{"name": name, "value": value} for name, value in merged.items()]
    if command and not containers:
        raise UsageError("--command applies to container-image-uri pools; there are none")


def upload_local_packages(client: JobsClient, request: JobRequest) -> list[JsonObject]:
    """Pack each local package directory once, upload it, and put its URI in its pools."""
    uploaded: dict[Path, JsonObject] = {}
    pools = request.body["jobSpec"]["workerPoolSpecs"]
    for position, directory, module in request.local_packages:
        key = directory.resolve()
        try:
            built = build_wheel(key, module)
        except PackagingError as error:
            raise UsageError(str(error)) from None
        if key not in uploaded:
            uploaded[key] = client.upload_package(built.filename, built.data)
        task = pools[position]["pythonPackageSpec"]
        task["packageUris"] = [uploaded[key]["uri"], *task.get("packageUris", [])]
    return list(uploaded.values())


# the parser


def add_jobs_commands(commands: Any) -> None:
    """Add ``jobs`` (create, list, describe, cancel, delete, logs, stream-logs)."""
    options = argparse.ArgumentParser(add_help=False)
    add_global_options(options, suppress=True)
    options.add_argument(
        "--region",
        dest="location",
        default=argparse.SUPPRESS,
        help="the location (gcloud's name for --location), e.g. us-central1",
    )
    help_text = "run custom training jobs (Vertex custom jobs, gcloud's shape)"
    verbs = commands.add_parser(
        "jobs", help=help_text, description=help_text, aliases=["custom-jobs"]
    ).add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(name: str, handler: Any, text: str, description: str = "") -> Any:
        parser = verbs.add_parser(
            name, parents=[options], help=text, description=description or text
        )
        parser.set_defaults(api_handler=handler)
        return parser

    _add_create(verb)
    listing = verb("list", _list, "list jobs (newest first)")
    listing.add_argument("--filter", default="", help="e.g. 'state=JOB_STATE_RUNNING'")
    listing.add_argument("--order-by", default="", help="e.g. 'createTime desc'")
    listing.add_argument("--limit", type=_positive, help="at most this many jobs [all]")
    listing.add_argument("--page-size", type=_positive, help="jobs per request [100]")
    for name, handler, text in (
        ("describe", _describe, "show one job and its replicas"),
        ("cancel", _cancel, "cancel a job (CANCELLING, then CANCELLED)"),
        ("delete", _delete, "delete an ended job"),
    ):
        verb(name, handler, text).add_argument(
            "job", metavar="JOB", type=JOB, help="id or full name"
        )
    logs = verb(
        "logs",
        _logs,
        "print a replica's output",
        "Print a replica's stdout and stderr (stdout first, or interleaved by line while"
        " following). --follow keeps printing as it lands until the job ends.",
    )
    _add_log_flags(logs, follow=True)
    stream = verb("stream-logs", _stream_logs, "follow a replica's output (logs --follow)")
    _add_log_flags(stream, follow=False)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return int(text)


def _add_create(verb: Any) -> None:
    keys = "; ".join(f"{key}: {what}" for key, what in POOL_KEYS.items())
    create = verb(
        "create",
        _create,
        "create a custom job",
        "Create a custom job and print its name. Pools come from --worker-pool-spec (one"
        " per pool, in role order: chief, workers, parameter servers, evaluators; an empty"
        " value skips a position) or from --config; flags override the file.",
    )
    create.add_argument("--display-name", required=True, help="a name for people")
    create.add_argument(
        "--worker-pool-spec",
        action="append",
        default=[],
        metavar="KEY=VALUE,...",
        help=f"one worker pool (repeatable). Keys: {keys}",
    )
    create.add_argument("--config", metavar="FILE", help="a CustomJobSpec in YAML or JSON")
    create.add_argument(
        "--args", action="append", default=[], metavar="ARG,...", help="every pool's args"
    )
    create.add_argument(
        "--command",
        action="append",
        default=[],
        metavar="WORD,...",
        help="the container pools' command (overrides the image's entrypoint)",
    )
    create.add_argument(
        "--env-vars", action="append", default=[], metavar="K=V,...", help="every pool's env"
    )
    create.add_argument(
        "--python-package-uris",
        action="append",
        default=[],
        metavar="URI,...",
        help="packages (gs:// or file://) for the executor-image-uri pools",
    )
    create.add_argument("--labels", action="append", default=[], metavar="K=V,...")
    create.add_argument("--timeout", help="fail the job after this long, e.g. 3600s, 2h")
    create.add_argument("--base-output-dir", metavar="URI", help="AIP_MODEL_DIR etc. go under it")
    create.add_argument("--wait", action="store_true", help="wait for the job to end")
    create.add_argument(
        "--follow", action="store_true", help="print the chief's output until the job ends"
    )


def _add_log_flags(parser: argparse.ArgumentParser, *, follow: bool) -> None:
    parser.add_argument("job", metavar="JOB", type=JOB, help="id or full name")
    parser.add_argument("--replica", default="", help="e.g. workerpool1-0 [workerpool0-0]")
    parser.add_argument("--attempt", type=int, help="the attempt, 0 first [the latest]")
    parser.add_argument(
        "--stream", choices=("both", "stdout", "stderr"), default="both", help="[both]"
    )
    parser.add_argument(
        "--tail", type=_positive, metavar="BYTES", help="only the last BYTES of each stream"
    )
    if follow:
        parser.add_argument(
            "--follow", action="store_true", help="keep printing until the job ends"
        )
    else:
        parser.set_defaults(follow=True)


# the verbs


def _client(ctx: Context, args: argparse.Namespace) -> JobsClient:
    return JobsClient(
        ctx.client.base_url,
        token=resolve_token(args.token, api_url=ctx.client.base_url) or None,
        project=args.project,
        location=args.location,
    )


def _job_id(job: JsonObject) -> str:
    return str(job.get("name", "")).rsplit("/", 1)[-1]


def _create(ctx: Context, args: argparse.Namespace) -> int:
    request = build_job_request(args)
    with _client(ctx, args) as client:
        upload_local_packages(client, request)
        job = client.create_job(request.body)
        name = job.get("name", "")
        ctx.emit(
            job,
            lambda: (
                f"created custom job {name} ({job.get('state', '')})\n"
                f"follow its output: mldiag jobs stream-logs {_job_id(job)}"
            ),
        )
        if not (args.wait or args.follow):
            return 0
        if args.follow:
            _print_stream(client.follow_logs(name))
        with Progress(f"job {_job_id(job)}", enabled=not ctx.quiet) as progress:
            ended = poll_until(lambda: client.get_job(name), TERMINAL_STATES, progress)
        return _final(ended)


def _final(job: JsonObject) -> int:
    state = job.get("state", "")
    if state == "JOB_STATE_SUCCEEDED":
        print(f"job {_job_id(job)} ended: {state}", file=sys.stderr)
        return 0
    message = (job.get("error") or {}).get("message", "")
    print(
        f"job {_job_id(job)} ended: {state}" + (f": {message}" if message else ""), file=sys.stderr
    )
    return 1


JOB_COLUMNS = ("JOB ID", "DISPLAY NAME", "STATE", "CREATED", "LABELS")
"""The columns of ``mldiag jobs list``."""


def _row(job: JsonObject) -> tuple[str, ...]:
    return (
        _job_id(job),
        cell(job.get("displayName")),
        cell(job.get("state")),
        short_time(job.get("createTime")),
        labels_cell(job.get("labels")),
    )


def _list(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        jobs = list_all(
            client.iter_jobs(filter=args.filter, order_by=args.order_by, page_size=args.page_size),
            args.limit,
        )
    return emit_list(ctx, CUSTOM_JOBS, jobs, JOB_COLUMNS, _row, "no jobs")


def _describe(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        job = client.get_job(args.job)
        replicas = (
            client.list_replicas(args.job).get("replicas", [])
            if ctx.output_format == "table"
            else []
        )

    def table() -> str:
        text = render_fields((key, cell(value)) for key, value in flatten(job).items())
        if replicas:
            rows = (
                (
                    cell(r.get("name")),
                    cell(r.get("attempt")),
                    cell(r.get("state")),
                    cell(r.get("executor")),
                    cell(r.get("exitCode")),
                    cell(r.get("message")),
                )
                for r in replicas
            )
            columns = ("REPLICA", "ATTEMPT", "STATE", "EXECUTOR", "EXIT", "MESSAGE")
            text += "\n\n" + render_table(columns, rows)
        return text

    ctx.emit(job, table)
    return 0


def _cancel(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        answer = client.cancel_job(args.job)
    return emit_cancelled(ctx, answer, args.job, CUSTOM_JOBS, "job", "jobs")


def _delete(ctx: Context, args: argparse.Namespace) -> int:
    with _client(ctx, args) as client:
        answer = client.delete_job(args.job)
    return emit_deleted(ctx, answer, args.job, CUSTOM_JOBS, "job")


def _print_stream(chunks: Iterable[bytes]) -> None:
    out = sys.stdout.buffer if hasattr(sys.stdout, "buffer") else None
    for chunk in chunks:
        if out is not None:
            out.write(chunk)
            out.flush()
        else:  # a captured text stream (tests)
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()


def _logs(ctx: Context, args: argparse.Namespace) -> int:
    offset = -args.tail if args.tail else None
    with _client(ctx, args) as client:
        reader: Callable[..., Any] = client.follow_logs if args.follow else client.read_logs
        answer = reader(
            args.job,
            replica=args.replica,
            attempt=args.attempt,
            stream=args.stream,
            offset=offset,
        )
        _print_stream([answer] if isinstance(answer, bytes) else answer)
    return 0


def _stream_logs(ctx: Context, args: argparse.Namespace) -> int:
    return _logs(ctx, args)

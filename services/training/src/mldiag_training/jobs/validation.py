"""Reading a CustomJob body as Vertex does, refusing what mldiag cannot honour by name.

The order matters to what a caller hears first:

1. the body must be a JSON object (the platform's NUL and size checks apply);
2. Vertex fields mldiag knows but does not provide (``jobSpec.network``, ...) are refused
   as UNIMPLEMENTED, found in the raw JSON, before the strict models see them;
3. output-only fields a client sends back (``name``, ``state``, ``createTime``, ...) are
   dropped, as Vertex drops them;
4. the strict models refuse unknown fields and wrong types (INVALID_ARGUMENT);
5. the rules the models cannot say: the chief has one replica, every pool that is not a
   skipped position runs something on a known machine, accelerators come with a count,
   outputs go to ``gs://`` or ``file://``, scheduling asks only for what mldiag provides.

A proto3 field holding its default value (``""``, ``false``, ``0``, ``[]``, ``{}``) is not
set, so an unsupported field sent empty is not refused.
"""

import re
from collections.abc import Iterator
from typing import Any, Protocol

import pydantic_core
from pydantic.alias_generators import to_snake

from mldiag_platform.errors import InvalidArgument
from mldiag_platform.http import parse_body
from mldiag_schemas.jobs import (
    UNSUPPORTED_JOB_FIELDS,
    UNSUPPORTED_JOB_SPEC_FIELDS,
    UNSUPPORTED_MACHINE_FIELDS,
    UNSUPPORTED_POOL_FIELDS,
    AcceleratorType,
    CustomJob,
    CustomJobSpec,
    Strategy,
    WorkerPoolSpec,
)
from mldiag_training.jobs.errors import InvalidCustomJob, UnsupportedField

OUTPUT_ONLY_FIELDS = frozenset(
    {"name", "state", "createTime", "startTime", "endTime", "updateTime", "error", "webAccessUris"}
)
"""CustomJob fields the service sets; a client's values are ignored (camelCase names)."""

OUTPUT_URI_SCHEMES = ("gs://", "file://")
"""Where outputs and packages may live: a bucket, or the platform's file store."""

UNSUPPORTED_STRATEGIES = frozenset({Strategy.FLEX_START, Strategy.ON_DEMAND, Strategy.LOW_COST})
"""Scheduling strategies mldiag does not provide (STANDARD and SPOT run alike)."""


class MachineResolver(Protocol):
    """What validation needs from the scheduler's machine table."""

    def resolve(
        self,
        machine_type: str,
        accelerator_type: AcceleratorType,
        accelerator_count: int,
        field: str = ...,
    ) -> object:
        """The resources of a machine spec; ``InvalidArgument`` naming ``field`` (the
        ``machineType``'s path) for an unknown type."""
        ...


def _invalid(field: str, problem: str) -> InvalidCustomJob:
    return InvalidCustomJob(f"{field}: {problem}", details=[{"field": field, "problem": problem}])


def _unsupported(field: str, what: str) -> UnsupportedField:
    problem = f"is not supported: mldiag does not provide {what}"
    return UnsupportedField(f"{field} {problem}", details=[{"field": field, "problem": problem}])


def _get(document: dict[str, Any], camel: str) -> Any:
    """A field of a raw proto3 JSON object, under its camelCase or snake_case name."""
    if camel in document:
        return document[camel]
    return document.get(to_snake(camel))


def _is_set(value: Any) -> bool:
    return value not in (None, "", False, 0, [], {})


def _unsupported_in(document: Any, table: dict[str, str], where: str) -> Iterator[tuple[str, str]]:
    """The fields of ``table`` set in ``document``; those holding their default are dropped
    from it (proto3: they are not set, and the strict models do not know them)."""
    if not isinstance(document, dict):
        return
    for camel, what in table.items():
        for key in (camel, to_snake(camel)):
            if key in document and not _is_set(document[key]):
                del document[key]
        if _is_set(_get(document, camel)):
            yield (f"{where}.{camel}" if where else camel), what


def refuse_unsupported(document: dict[str, Any]) -> None:
    """Raise UNIMPLEMENTED naming the first Vertex field mldiag does not provide (and drop
    those sent with their default value)."""
    found = list(_unsupported_in(document, UNSUPPORTED_JOB_FIELDS, ""))
    spec = _get(document, "jobSpec")
    found += _unsupported_in(spec, UNSUPPORTED_JOB_SPEC_FIELDS, "jobSpec")
    pools = _get(spec, "workerPoolSpecs") if isinstance(spec, dict) else None
    for index, pool in enumerate(pools if isinstance(pools, list) else []):
        where = f"jobSpec.workerPoolSpecs[{index}]"
        found += _unsupported_in(pool, UNSUPPORTED_POOL_FIELDS, where)
        machine = _get(pool, "machineSpec") if isinstance(pool, dict) else None
        found += _unsupported_in(machine, UNSUPPORTED_MACHINE_FIELDS, f"{where}.machineSpec")
    if found:
        field, what = found[0]
        raise _unsupported(field, what)


_INDEX = re.compile(r"\.(\d+)(?=\.|$)")


def _field_path(dotted: str) -> str:
    """pydantic's ``jobSpec.workerPoolSpecs.1.machineSpec`` as ``…workerPoolSpecs[1]…``."""
    return _INDEX.sub(r"[\1]", dotted)


def _parse(document: dict[str, Any]) -> CustomJob:
    try:
        return parse_body(CustomJob, pydantic_core.to_json(document), error=InvalidCustomJob)
    except InvalidArgument as error:
        details = [
            {**detail, "field": _field_path(str(detail.get("field", "")))}
            for detail in error.details
        ]
        if not details:
            raise
        first = details[0]
        more = f" (and {len(details) - 1} more)" if len(details) > 1 else ""
        message = f"{first['field'] or 'the body'}: {first.get('problem', '')}{more}"
        raise InvalidCustomJob(message, details=details) from None


def parse_custom_job(raw: bytes) -> CustomJob:
    """The CustomJob a create request's body describes (output-only fields dropped), or
    INVALID_ARGUMENT / UNIMPLEMENTED naming the field. Machine types are checked by
    :func:`check_machines`."""
    try:
        # jiter bounds nesting, where json.loads would raise RecursionError on a deep body
        document = pydantic_core.from_json(raw or b"{}")
    except ValueError as error:
        raise _invalid("", f"the body is not JSON ({error})") from None
    if not isinstance(document, dict):
        raise _invalid("", "the body must be a JSON object (a CustomJob)")
    refuse_unsupported(document)
    kept = {
        key: value
        for key, value in document.items()
        if key not in OUTPUT_ONLY_FIELDS and key not in _OUTPUT_ONLY_SNAKE
    }
    job = _parse(kept)
    check_spec(job.job_spec)
    return job


_OUTPUT_ONLY_SNAKE = frozenset(to_snake(name) for name in OUTPUT_ONLY_FIELDS)


def check_spec(spec: CustomJobSpec) -> None:
    """The rules of a job spec its model cannot say (see the module's docstring)."""
    for index, pool in enumerate(spec.worker_pool_specs):
        if not pool.empty:
            _check_pool(index, pool)
    scheduling = spec.scheduling
    if scheduling is not None:
        if scheduling.strategy in UNSUPPORTED_STRATEGIES:
            raise _unsupported(
                "jobSpec.scheduling.strategy",
                f"the {scheduling.strategy.value} strategy (use STANDARD or SPOT)",
            )
        if scheduling.max_wait_duration is not None:
            raise _unsupported(
                "jobSpec.scheduling.maxWaitDuration", "FLEX_START's wait for capacity"
            )
    output = spec.base_output_directory
    if output is not None and not _storage_uri(output.output_uri_prefix):
        raise _invalid(
            "jobSpec.baseOutputDirectory.outputUriPrefix",
            f"{output.output_uri_prefix[:200]!r} is not a gs://BUCKET/PATH or file:///PATH URI",
        )


def _storage_uri(uri: str) -> bool:
    return any(uri.startswith(scheme) and len(uri) > len(scheme) for scheme in OUTPUT_URI_SCHEMES)


def _check_pool(index: int, pool: WorkerPoolSpec) -> None:
    where = f"jobSpec.workerPoolSpecs[{index}]"
    if index == 0 and pool.replica_count != 1:
        raise _invalid(
            f"{where}.replicaCount",
            f"the chief (pool 0) runs exactly one replica, not {pool.replica_count}",
        )
    if pool.replica_count == 0:
        raise _invalid(
            f"{where}.replicaCount",
            "a pool needs at least one replica (send {} to skip a position)",
        )
    if pool.container_spec is None and pool.python_package_spec is None:
        raise _invalid(where, "set containerSpec or pythonPackageSpec: what the pool runs")
    if pool.machine_spec is None:
        raise _invalid(f"{where}.machineSpec", "every pool needs a machineSpec")
    machine = pool.machine_spec
    has_type = machine.accelerator_type is not AcceleratorType.UNSPECIFIED
    if has_type and machine.accelerator_count == 0:
        raise _invalid(
            f"{where}.machineSpec.acceleratorCount",
            f"{machine.accelerator_type.value} needs an acceleratorCount of at least 1",
        )
    if machine.accelerator_count > 0 and not has_type:
        raise _invalid(
            f"{where}.machineSpec.acceleratorType",
            f"acceleratorCount {machine.accelerator_count} needs an acceleratorType",
        )
    package = pool.python_package_spec
    for number, uri in enumerate(package.package_uris if package else []):
        if not _storage_uri(uri):
            raise _invalid(
                f"{where}.pythonPackageSpec.packageUris[{number}]",
                f"{uri[:200]!r} is not a gs:// or file:// URI of a package",
            )


def check_machines(spec: CustomJobSpec, machines: MachineResolver) -> None:
    """Refuse a machine or accelerator type the machine table does not know, naming the
    pool's field (``jobSpec.workerPoolSpecs[1].machineSpec.machineType``)."""
    for index, pool in enumerate(spec.worker_pool_specs):
        machine = pool.machine_spec
        if pool.empty or machine is None:
            continue
        machines.resolve(
            machine.machine_type,
            machine.accelerator_type,
            machine.accelerator_count,
            field=f"jobSpec.workerPoolSpecs[{index}].machineSpec.machineType",
        )

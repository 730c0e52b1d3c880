"""HTTP routes of xprof-provisioner: the only module that knows about HTTP."""

from fastapi import APIRouter, Request, Response
from pydantic import ValidationError

from mldiag_platform.auth import requires
from mldiag_platform.http import ContractResponse
from mldiag_schemas.auth import Permission
from mldiag_schemas.errors import ErrorBody
from mldiag_schemas.profiling import (
    ListXProfInstancesResponse,
    StartXProfRequest,
    XProfInstance,
)
from mldiag_xprof_provisioner.errors import InvalidRunId, InvalidStartRequest
from mldiag_xprof_provisioner.service import XProfProvisioner

router = APIRouter()

INSTANCES_PATH = "/v1/xprofInstances"
INSTANCE_PATH = INSTANCES_PATH + "/{instance_id}"
_MAX_BODY_BYTES = 64 * 1024

# The start body is parsed by hand (for its error codes); this documents it all the same.
_START_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": StartXProfRequest.model_json_schema()}},
    }
}
_ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody} for status in (400, 404, 429, 503)
}


def _service(request: Request) -> XProfProvisioner:
    service: XProfProvisioner = request.app.state.service
    return service


@router.post(
    INSTANCES_PATH,
    status_code=201,
    dependencies=[requires(Permission.XPROF_CREATE)],
    openapi_extra=_START_BODY,
    responses={201: {"model": XProfInstance}, 200: {"model": XProfInstance}, **_ERRORS},
)
async def start_instance(request: Request) -> Response:
    """Serve a run's profiles: 201 with a new RUNNING instance, 200 with the run's existing one."""
    declared = request.headers.get("content-length", "")
    body = b"" if declared.isdigit() and int(declared) > _MAX_BODY_BYTES else await request.body()
    if not body or len(body) > _MAX_BODY_BYTES:
        raise InvalidStartRequest(
            f"a start request is a JSON body of at most {_MAX_BODY_BYTES} bytes"
        )
    try:
        start = StartXProfRequest.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors()
        # The one mistake worth its own code: callers build run ids, and get them wrong.
        bad_run_id = any(
            e["loc"][:1] == ("runId",) and e["type"] == "string_pattern_mismatch" for e in errors
        )
        if bad_run_id:
            raise InvalidRunId(
                "invalid run id: use lower-case letters, digits and '-' (max 63)"
            ) from None
        details = [
            {"field": ".".join(str(part) for part in e["loc"]), "problem": e["msg"]}
            for e in errors[:20]
        ]
        raise InvalidStartRequest("the start request is not valid", details=details) from None
    started = await _service(request).start(start.run_id)
    return ContractResponse(started.instance, status_code=201 if started.created else 200)


@router.get(
    INSTANCES_PATH,
    dependencies=[requires(Permission.XPROF_LIST)],
    responses={200: {"model": ListXProfInstancesResponse}},
)
async def list_instances(request: Request) -> Response:
    """Every instance the provisioner remembers, oldest first."""
    instances = await _service(request).list_instances()
    return ContractResponse(ListXProfInstancesResponse(xprof_instances=instances))


@router.get(
    INSTANCE_PATH,
    dependencies=[requires(Permission.XPROF_GET)],
    responses={200: {"model": XProfInstance}, **_ERRORS},
)
async def get_instance(request: Request, instance_id: str) -> Response:
    """One instance; reading it postpones its idle stop."""
    return ContractResponse(await _service(request).get(instance_id))


@router.delete(
    INSTANCE_PATH,
    dependencies=[requires(Permission.XPROF_DELETE)],
    responses={200: {"model": XProfInstance}, **_ERRORS},
)
async def stop_instance(request: Request, instance_id: str) -> Response:
    """Stop an instance and delete its copy; returns it, STOPPED."""
    return ContractResponse(await _service(request).stop(instance_id))

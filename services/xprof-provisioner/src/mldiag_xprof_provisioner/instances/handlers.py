"""HTTP routes of xprof-provisioner: the only module that knows about HTTP routing.

Besides the instances' API, the service is the only door to XProf:

- ``GET /xprof/open?run=R&session=S[&tool=T][&host=H][&token=...]``, the shareable link:
  it finds or starts an instance serving the run and sends the browser (303) to the session
  in that instance's UI. A ``token`` parameter is checked, set as the ``mldiag_token``
  cookie and left out of the redirect, so a link can be opened in a browser that has no
  header to send;
- ``GET|HEAD /xprof/{instance}/{path}``, the proxy: authenticated (Bearer header or the
  cookie) and allow-listed (see ``proxy.py``), streamed both ways.
"""

from collections.abc import AsyncIterator
from typing import Annotated, NoReturn
from urllib.parse import urlencode

import structlog
from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from pydantic import ValidationError
from starlette.background import BackgroundTask

from mldiag_platform.auth import Authorizer, Principal, requires
from mldiag_platform.errors import PayloadTooLarge
from mldiag_platform.http import ContractResponse, error_response
from mldiag_schemas.auth import Permission
from mldiag_schemas.errors import ErrorBody
from mldiag_schemas.profiling import (
    ListXProfInstancesResponse,
    StartXProfRequest,
    XProfInstance,
)
from mldiag_xprof_provisioner.errors import (
    InvalidParameter,
    InvalidRunId,
    InvalidStartRequest,
    MethodNotAllowed,
    XProfNoData,
)
from mldiag_xprof_provisioner.instances.proxy import (
    Upstream,
    XProfClient,
    check_host,
    check_tool,
    route,
)
from mldiag_xprof_provisioner.instances.service import PROXY_PREFIX, UI_PATH, XProfProvisioner
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings

log = structlog.get_logger(__name__)

router = APIRouter()

INSTANCES_PATH = "/v1/xprofInstances"
INSTANCE_PATH = INSTANCES_PATH + "/{instance_id}"
OPEN_PATH = PROXY_PREFIX + "/open"
PROXY_PATH = PROXY_PREFIX + "/{instance_id}/{path:path}"
TOKEN_COOKIE = "mldiag_token"  # noqa: S105  # the cookie's name, not a secret
"""Carries the API token for the proxied UI, whose requests cannot send a header."""
DEFAULT_TOOL = "trace_viewer@"
ALL_HOSTS = "ALL_HOSTS"
_MAX_BODY_BYTES = 64 * 1024

# The start body is parsed by hand (for its error codes); this documents it all the same.
_START_BODY = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": StartXProfRequest.model_json_schema()}},
    }
}
_ERRORS: dict[int | str, dict[str, object]] = {
    status: {"model": ErrorBody} for status in (400, 401, 403, 404, 429, 503)
}
_START_ERRORS: dict[int | str, dict[str, object]] = {**_ERRORS, 413: {"model": ErrorBody}}
_PROXY_ERRORS: dict[int | str, dict[str, object]] = {
    200: {
        "description": "What XProf answers (its pages, scripts and JSON), passed through.",
        "content": {"*/*": {"schema": {}}},
    },
    **{status: {"model": ErrorBody} for status in (400, 401, 403, 404, 409, 429, 503)},
}


def _service(request: Request) -> XProfProvisioner:
    service: XProfProvisioner = request.app.state.service
    return service


def _client(request: Request) -> XProfClient:
    client: XProfClient = request.app.state.xprof_client
    return client


async def _authorize(request: Request, permission: Permission, token: str = "") -> Principal:
    """The caller by its ``Authorization`` header, else a link's token, else the cookie."""
    directory: Authorizer = request.app.state.tokens
    header = request.headers.get("authorization")
    if header and not token:
        return await directory.authorize(header, permission)
    secret = token or request.cookies.get(TOKEN_COOKIE, "")
    return await directory.authorize(f"Bearer {secret}" if secret else None, permission)


@router.post(
    INSTANCES_PATH,
    status_code=201,
    openapi_extra=_START_BODY,
    responses={201: {"model": XProfInstance}, 200: {"model": XProfInstance}, **_START_ERRORS},
)
async def start_instance(
    request: Request, caller: Annotated[Principal, requires(Permission.XPROF_CREATE)]
) -> Response:
    """Serve runs' sessions: 201 with a new RUNNING instance, 200 with one that serves them."""
    # Serving a run's profiles is reading the run.
    caller.require(Permission.RUNS_GET)
    try:
        body = await _read_body(request, _MAX_BODY_BYTES)
    except PayloadTooLarge as exc:
        # Answered here rather than by the error boundary, to hang up with it: otherwise
        # the server goes on reading (and dropping) the rest of the body after the answer.
        response = error_response(exc.http_status, exc.code, exc.message, exc.details)
        response.headers["connection"] = "close"
        return response
    if not body:
        raise InvalidStartRequest("a start request is a JSON body naming the runs to serve")
    try:
        start = StartXProfRequest.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors()
        # The one mistake worth its own code: callers build run ids, and get them wrong.
        bad_run_id = any(
            e["loc"][:1] == ("runIds",) and e["type"] == "string_pattern_mismatch" for e in errors
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
    started = await _service(request).start(start.run_ids, caller.token_id)
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


@router.get(
    OPEN_PATH,
    status_code=303,
    response_class=RedirectResponse,  # a redirect has no body: none is documented
    responses={303: {"description": "To the UI"}, **_ERRORS},
)
async def open_session(
    request: Request,
    run: Annotated[str, Query(max_length=63, description="The run.")],
    session: Annotated[str, Query(max_length=128, description="The session.")],
    tool: Annotated[str, Query(max_length=64, description="XProf tool.")] = DEFAULT_TOOL,
    host: Annotated[str, Query(max_length=253, description="Default: the first.")] = "",
    token: Annotated[str, Query(max_length=512, description="Becomes the cookie.")] = "",
) -> Response:
    """The shareable link: open a session in XProf, starting an instance if need be."""
    caller = await _authorize(request, Permission.XPROF_CREATE, token)
    caller.require(Permission.RUNS_GET)
    check_tool(tool)
    if host:
        check_host(host)
    opened = await _service(request).open_session(run, session, caller.token_id)
    if host and host not in opened.hosts and host != ALL_HOSTS:
        raise InvalidParameter(
            f"session {session!r} of run {run!r} has no host {host!r}",
            details=[{"hosts": opened.hosts}],
        )
    query = urlencode({"run": f"{run}/{session}", "tool": tool, "host": host or opened.hosts[0]})
    target = f"{PROXY_PREFIX}/{opened.instance.instance_id}/{UI_PATH}?{query}"
    response = RedirectResponse(target, status_code=303)
    if token:
        response.set_cookie(
            TOKEN_COOKIE,
            token,
            httponly=True,
            samesite="lax",
            path=PROXY_PREFIX,
            secure=_served_over_https(request),
        )
    return response


@router.api_route(PROXY_PREFIX + "/{instance_id}", methods=["GET", "HEAD"], include_in_schema=False)
async def instance_root(request: Request, instance_id: str) -> Response:
    """An instance's bare address: to its UI, whose page needs the full path."""
    await _authorize(request, Permission.XPROF_GET)
    return _to_ui(request, instance_id)


@router.get(PROXY_PATH, responses=_PROXY_ERRORS)
@router.head(PROXY_PATH, include_in_schema=False)
async def proxy(request: Request, instance_id: str, path: str) -> Response:
    """An instance's UI and read-only API; reading it postpones its idle stop."""
    await _authorize(request, Permission.XPROF_GET)
    if path == "":
        return _to_ui(request, instance_id)
    lease = await _service(request).acquire(instance_id)
    try:
        target = route(path, request.query_params.multi_items(), lease.run_ids)
        upstream = await _client(request).send(
            request.method,
            lease.instance_id,
            lease.port,
            target,
            request.headers.get("accept", ""),
            secret=lease.secret,
        )
        if upstream.status_code >= 500 and not target.static:
            await _no_data(upstream, target.path)
    except BaseException:
        lease.release()
        raise

    async def finish() -> None:
        await upstream.close()
        lease.release()

    async def body() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.body():
                yield chunk
        finally:
            await finish()

    # The body's finally covers a client that goes away mid-answer; the background task
    # covers an answer whose body is never iterated (HEAD, an error before streaming).
    return StreamingResponse(
        body(),
        status_code=upstream.status_code,
        headers=upstream.headers(target.static),
        background=BackgroundTask(finish),
    )


@router.api_route(
    PROXY_PATH, methods=["POST", "PUT", "PATCH", "DELETE", "OPTIONS"], include_in_schema=False
)
async def proxy_refused(instance_id: str, path: str) -> Response:
    """XProf's UI only reads; its one write (capture) is refused outright."""
    raise MethodNotAllowed(
        f"the XProf proxy answers GET and HEAD only, not on /{path} of {instance_id}"
    )


async def _no_data(upstream: Upstream, path: str) -> NoReturn:
    """XProf answers 500 for a host it does not have, a tool the session cannot feed (no
    HLO for the graph viewer) and the like: the request's doing, not a fault of ours, and
    its words say what was wrong."""
    said = await upstream.error_text()
    log.info("xprof.proxy.no_data", status=upstream.status_code, route=path, said=said[:500])
    raise XProfNoData(
        f"XProf could not produce this: {said[:300] or upstream.status_code}",
        details=[{"xprofStatus": upstream.status_code}],
    )


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it passes ``limit`` bytes: a declared length at
    once, a chunked one while it arrives, so memory never holds more than ``limit``."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            # The rest is never read: the server drops the connection after the answer.
            raise _too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the request body is larger than {limit} bytes", details=[{"limitBytes": limit}]
    )


def _served_over_https(request: Request) -> bool:
    # Behind a TLS-terminating proxy the request itself is plain HTTP: the public URL says.
    settings: XProfProvisionerSettings | None = getattr(request.app.state, "settings", None)
    public = settings is not None and settings.base_url.startswith("https://")
    return public or request.url.scheme == "https"


def _to_ui(request: Request, instance_id: str) -> Response:
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{PROXY_PREFIX}/{instance_id}/{UI_PATH}{query}", status_code=307)

"""The authenticating proxy's policy and its client: which XProf paths and parameters pass,
and forwarding what passes to an instance on loopback.

XProf has no authentication and answers any readable path (``session_path=``, ``run_path=``,
a ``run`` with ``..`` in it), can capture from any reachable profiler (``capture_profile``)
and start background conversions (``generate_cache``). So nothing reaches an instance
except:

- the UI's static files (bundle, styles, fonts, the trace viewer and its wasm), sent
  without their query string, which XProf never reads for them;
- the UI page (``data/plugin/profile/`` and the UI's own routes below it), likewise;
- the read-only API (``runs``, ``run_tools``, ``hosts``, ``data``, ``data_csv``,
  ``module_list``, ``config``, ``version``), each with the parameters the UI sends
  (``bundle.js`` and ``trace_viewer_index.js`` of XProf 2.24.2; the UI copies its page's
  parameters into data requests, hence ``tool`` and friends), and values checked where
  XProf would build a path from them: ``run`` must be ``<a served run>/<session>``, names
  never contain a path.

Everything else is refused: an unknown or path parameter with ``forbidden_parameter`` (400),
an unlisted route with ``forbidden_route`` (403).
"""

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import httpx

from mldiag_schemas.profiling import HOST_PATTERN, SESSION_ID_PATTERN
from mldiag_xprof_provisioner.errors import (
    ForbiddenParameter,
    ForbiddenRoute,
    InvalidParameter,
    XProfUnreachable,
)
from mldiag_xprof_provisioner.instances.child import LOOPBACK, SECRET_HEADER
from mldiag_xprof_provisioner.locks import KeyedLocks

PLUGIN = "data/plugin/profile"
"""XProf's UI and API live below this path."""

STATIC_FILES = frozenset(
    {
        "index.js",
        "index.html",
        "bundle.js",
        "styles.css",
        "materialicons.woff2",
        "material_symbols_outlined.woff2",
        "trace_viewer_index.html",
        "trace_viewer_index.js",
        "trace_viewer_v2.js",
        "trace_viewer_v2.wasm",
        "zone.js",
        "runtime.js",
    }
)
"""``profile_plugin.get_plugin_apps``' static routes."""

ALWAYS_FORBIDDEN_PARAMETERS = frozenset({"session_path", "run_path"})
"""Read any directory XProf can: refused on every route, even where they would be dropped,
because the UI copies its page's parameters into its API calls."""

_DATA_PARAMETERS = frozenset(
    {
        # profile_plugin.data_impl and _get_graph_viewer_options
        "run",
        "tag",
        "host",
        "hosts",
        "module_name",
        "program_id",
        "tqx",
        "perfetto",
        # not use_saved_result: a forced conversion rewrites cache files under their readers
        # (the UI never sends it: bundle.js only deletes it from its page's parameters)
        "full_dma",
        "group_by",
        "refresh_suggestion",
        "view_memory_allocation_timeline",
        "memory_space",
        "resolution",
        "start_time_ms",
        "end_time_ms",
        "event_name",
        "format",
        "duration_ms",
        "unique_id",
        "search_prefix",
        "search_metadata",
        "node_name",
        "graph_width",
        "show_metadata",
        "merge_fusion",
        "type",
        "names_only",
        "device_type",
        # set by the UI (bundle.js, trace_viewer_index.js) or copied from its page URL
        "tool",
        "moduleName",
        "graph_type",
        "replace_model",
        "new_backend",
        "mpmd_pipeline_view",
        "selected_group_ids",
        "use_trace_viewer_v2",
        "op_profile_limit",
        "hlo_module",
        "kernel_name",
        "group_tiny_events",
        "trace_filter_config",
        "apply_time_scale_multiplier",
        "enable_smart_suggestion",
        "roofline_op_name",
        "hlo_op_name",
        "opName",
        "new_nav",
        "use_xplane",
        "offset",
        "use_pb",
        "view_start",
        "view_end",
        "interval_us",
    }
)
API_PARAMETERS: dict[str, frozenset[str]] = {
    "runs": frozenset(),
    "run_tools": frozenset({"run"}),
    "hosts": frozenset({"run", "tag"}),
    "module_list": frozenset({"run", "tag", "graph_type"}),
    "config": frozenset(),
    "version": frozenset(),
    "data": _DATA_PARAMETERS,
    "data_csv": _DATA_PARAMETERS,
}
"""The read-only API routes and the parameters each passes on."""

FORBIDDEN_ROUTES = frozenset({"capture_profile", "generate_cache"})
"""Routes that act rather than read: a capture from any address, a background conversion."""

_NAME_PARAMETERS = frozenset({"host", "module_name", "moduleName", "hlo_module", "node_name"})
"""Parameters XProf may turn into a file name: never a path."""
_SESSION = re.compile(SESSION_ID_PATTERN)
_HOST = re.compile(HOST_PATTERN)
_TOOL = re.compile(r"^[A-Za-z_]+[@^]?$")
_UI_ROUTE_SEGMENT = re.compile(r"^[A-Za-z0-9_@-]+$")
_MAX_VALUE_LENGTH = 4096
_PATH = re.compile(r"(?<![\w.@-])/[^\s'\",:]+")
"""An absolute file path in XProf's words (not the slash of ``<run>/<session>``)."""


@dataclass(frozen=True)
class Route:
    """A request the proxy passes on: XProf's path and the query that goes with it."""

    path: str
    """Below XProf's root, without a leading slash (``data/plugin/profile/data``)."""
    query: tuple[tuple[str, str], ...]
    static: bool
    """A file of the UI (cacheable) rather than an API answer."""
    conversion: tuple[str, ...] | None = None
    """For tool data: what XProf converts and caches for it (session, tool, hosts)."""


def route(path: str, query: Sequence[tuple[str, str]], run_ids: Sequence[str]) -> Route:
    """What to send XProf for ``path`` (below the instance) and ``query``, or raise.

    ``run_ids`` are the runs the instance serves; a ``run`` parameter must name one of
    their sessions.
    """
    names = {name for name, _ in query}
    if forbidden := sorted(names & ALWAYS_FORBIDDEN_PARAMETERS):
        raise ForbiddenParameter(
            f"the parameter {forbidden[0]!r} reads arbitrary paths and is never passed on",
            details=[{"parameter": name} for name in forbidden],
        )
    if not (path == PLUGIN or path.startswith(PLUGIN + "/")):
        raise _forbidden_route(path)
    below = path[len(PLUGIN) :].strip("/")
    if below in FORBIDDEN_ROUTES:
        raise _forbidden_route(path)
    if below in STATIC_FILES:
        return Route(f"{PLUGIN}/{below}", (), static=True)
    if below in API_PARAMETERS:
        allowed = API_PARAMETERS[below]
        if unknown := sorted(names - allowed):
            raise ForbiddenParameter(
                f"the parameter {unknown[0]!r} is not passed on to XProf's {below!r}",
                details=[{"parameter": name, "route": below} for name in unknown],
            )
        if "run" in allowed and "run" not in names:
            # XProf fails on these without one: a 500 for data, a dropped connection else.
            raise InvalidParameter(
                f"XProf's {below!r} needs a 'run' parameter ('<run>/<session>')",
                details=[{"parameter": "run", "route": below}],
            )
        for name, value in query:
            _check_value(name, value, run_ids)
        conversion = None
        values = dict(query)
        if below in ("data", "data_csv") and "run" in values and "tag" in values:
            hosts = values.get("hosts", "")
            conversion = (values["run"], values["tag"], values.get("host", ""), hosts)
        return Route(
            f"{PLUGIN}/{below}",
            tuple(query),
            static=False,
            conversion=conversion,
        )
    if below == "" or _is_ui_route(below):
        # XProf serves its page for these; the page reads its parameters in the browser.
        return Route(f"{PLUGIN}/", (), static=False)
    raise _forbidden_route(path)


def _is_ui_route(below: str) -> bool:
    segments = below.split("/")
    return (
        len(segments) <= 2
        and all(_UI_ROUTE_SEGMENT.fullmatch(segment) for segment in segments)
        and segments[0] not in API_PARAMETERS
        and segments[0] not in FORBIDDEN_ROUTES
        and segments[0] != "local"  # XProf's development mode
    )


def _forbidden_route(path: str) -> ForbiddenRoute:
    return ForbiddenRoute(
        f"/{path} is not a route of XProf's UI or read-only API",
        details=[{"route": f"/{path}"}],
    )


def _check_value(name: str, value: str, run_ids: Sequence[str]) -> None:
    if len(value) > _MAX_VALUE_LENGTH or "\x00" in value:
        raise InvalidParameter(f"the parameter {name!r} is too long or not text")
    if name == "run":
        check_run(value, run_ids)
    elif name == "tag" and not _TOOL.fullmatch(value):
        raise InvalidParameter(f"{value!r} is not an XProf tool name")
    elif name == "hosts":
        for host in value.split(","):
            if host and not _HOST.fullmatch(host):
                raise InvalidParameter(f"{host!r} is not a host name")
    elif name in _NAME_PARAMETERS and ("/" in value or "\\" in value or ".." in value):
        raise InvalidParameter(f"the parameter {name!r} is a name, not a path")


def check_run(value: str, run_ids: Sequence[str]) -> None:
    """``value`` must be XProf's name of a session of a served run, ``<run>/<session>``."""
    run_id, _, session_id = value.partition("/")
    if run_id not in run_ids or not _SESSION.fullmatch(session_id):
        raise InvalidParameter(
            f"run {value!r} is not a session of a run this instance serves"
            f" ({', '.join(run_ids)}); XProf names sessions '<run>/<session>'",
            details=[{"parameter": "run", "value": value[:200]}],
        )


def check_tool(tool: str) -> None:
    """A tool name for a link (``trace_viewer@``, ``overview_page``)."""
    if not _TOOL.fullmatch(tool):
        raise InvalidParameter(f"{tool!r} is not an XProf tool name")


def check_host(host: str) -> None:
    """A host name for a link (a session file's stem)."""
    if not _HOST.fullmatch(host):
        raise InvalidParameter(f"{host!r} is not a host name")


PASSED_RESPONSE_HEADERS = (
    "content-type",
    "content-encoding",
    "content-length",
    "content-disposition",
    "content-security-policy",
    "x-content-type-options",
)
"""What of XProf's answer reaches the browser: the body's description and XProf's CSP,
which keeps its pages from fetching or running anything but this origin's and gstatic's."""


class Upstream:
    """An answer from XProf being streamed; ``close`` is idempotent."""

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self._closed = False

    @property
    def status_code(self) -> int:
        """XProf's status."""
        return self._response.status_code

    def headers(self, static: bool) -> dict[str, str]:
        """The headers to send on, with a cache policy of our own."""
        passed = {
            name: value
            for name in PASSED_RESPONSE_HEADERS
            if (value := self._response.headers.get(name)) is not None
        }
        # Static files only change with XProf's version (and instance ids change anyway);
        # API answers are per user and per moment.
        passed["cache-control"] = "private, max-age=3600" if static else "no-store"
        return passed

    async def error_text(self, limit: int = 4096) -> str:
        """The start of an error answer's body, decoded, with file paths left out (XProf
        names files of the instance's copy); closes the answer."""
        text = ""
        try:
            async for chunk in self._response.aiter_text():
                text += chunk
                if len(text) >= limit:
                    break
        except httpx.HTTPError:
            pass  # what came is all there is
        finally:
            await self.close()
        return _PATH.sub("<path>", text[:limit]).strip()

    async def body(self) -> AsyncIterator[bytes]:
        """The body as XProf encoded it (gzip, mostly): passed through, not re-encoded."""
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        finally:
            await self.close()

    async def close(self) -> None:
        """Let the connection go back to the pool (or be dropped, mid-answer)."""
        if not self._closed:
            self._closed = True
            await self._response.aclose()


class XProfClient:
    """One pooled HTTP client for every instance: many users' requests run at once, except
    the first request for a tool's data of a session, which goes alone.

    XProf converts a tool's data on the first request and writes the result next to the
    xplane. Two first requests at once (two users opening a fresh session, or one browser's
    retries) write the same cache files at once: both get "No Data" (404) and the files they
    leave make every later request fail the same way (seen with XProf 2.24.2). So per
    instance and conversion, requests queue until one has been answered 200; from then on
    XProf reads its cache and they run side by side.
    """

    _MAX_REMEMBERED = 10_000

    def __init__(self, timeout_seconds: float, max_connections: int) -> None:
        # Locks are dropped once nobody holds or awaits them: keys carry what users send.
        self._converting = KeyedLocks()
        self._converted: dict[str, set[tuple[str, ...]]] = {}
        self._remembered = 0
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_seconds, connect=5.0),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            follow_redirects=False,
            trust_env=False,  # a proxy from the environment must never see these requests
        )

    async def send(
        self, method: str, instance_id: str, port: int, route: Route, accept: str, *, secret: str
    ) -> Upstream:
        """Send ``route`` to the instance on ``port`` with its ``secret``; the answer streams.

        Returns once XProf has sent its headers, which it does only after converting.
        """
        conversion = route.conversion
        if conversion is None or conversion in self._converted.get(instance_id, ()):
            return await self._send(method, port, route, accept, secret)
        # NUL never occurs in a passed value (see _check_value): the key is unambiguous.
        async with self._converting.hold(["\0".join((instance_id, *conversion))]):
            upstream = await self._send(method, port, route, accept, secret)
            if upstream.status_code == 200:
                self._remember(instance_id, conversion)
            return upstream

    def forget(self, instance_id: str) -> None:
        """Drop what is known of a stopped instance's conversions."""
        self._remembered -= len(self._converted.pop(instance_id, ()))

    def _remember(self, instance_id: str, conversion: tuple[str, ...]) -> None:
        if self._remembered >= self._MAX_REMEMBERED:
            self._converted.clear()  # forgetting only costs a queue for a moment
            self._remembered = 0
        known = self._converted.setdefault(instance_id, set())
        if conversion not in known:
            known.add(conversion)
            self._remembered += 1

    async def _send(
        self, method: str, port: int, route: Route, accept: str, secret: str
    ) -> Upstream:
        request = self._client.build_request(
            method,
            f"http://{LOOPBACK}:{port}/{route.path}",
            params=list(route.query),
            # Nothing of the caller's goes on, credentials least of all; the instance's
            # secret is ours, and no answer header carries it back (PASSED_RESPONSE_HEADERS).
            headers={
                "accept": accept or "*/*",
                "accept-encoding": "gzip",
                SECRET_HEADER: secret,
            },
        )
        try:
            response = await self._client.send(request, stream=True)
        except httpx.TransportError as exc:
            raise XProfUnreachable(
                f"XProf on port {port} did not answer: {type(exc).__name__}"
            ) from None
        return Upstream(response)

    async def aclose(self) -> None:
        """Close every pooled connection."""
        await self._client.aclose()

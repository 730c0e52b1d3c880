"""schemathesis over the provisioner's whole OpenAPI document: no generated request, valid or
not, gets a 5xx.

The assembled app is served on a port with real NATS (tokens) and a file:// store holding one
run with a session, so starts, links and the proxy reach the service and a real XProf
instead of stopping at a 404. Every operation gets positive and negative cases, some aimed at
that run and at the instance serving it. Calls carry an admin token. Failures are collected
across operations, so one run names every 5xx at once. The proxy's other methods and an
instance's bare address are not in the document (they only refuse or redirect) and the
document is all that is fuzzed.
"""

import random
from functools import partial
from pathlib import Path

import pytest
import requests
import schemathesis
from hypothesis import given
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode

from conftest import ApiTokens
from fuzzing import Fuzzer, fuzz_settings
from mldiag_platform.settings import NatsSettings, StorageSettings
from mldiag_schemas.auth import Role
from mldiag_xprof_provisioner.app import create_app
from mldiag_xprof_provisioner.instances.proxy import API_PARAMETERS
from mldiag_xprof_provisioner.settings import XProfProvisionerSettings
from support import served_in_thread

pytestmark = pytest.mark.connected

EXAMPLES = 100
"""Cases per operation: 7 (6 and the proxy's query) x 100 stay well under a minute on 2 CPUs."""
RUN_ID = "fuzz-run"
SESSION_ID = "s1"


def _strategy(operation: schemathesis.APIOperation, instance_id: str) -> st.SearchStrategy[Case]:
    """Positive and negative cases, anywhere and on the run and instance that exist."""
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    names = {parameter.name for parameter in operation.path_parameters}
    # Not for DELETE: stopping the one instance would make every later case start XProf anew.
    if "instance_id" in names and operation.method.upper() == "GET":
        fixed = {"instance_id": instance_id}
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed))
        if names - fixed.keys():
            strategies.append(operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=fixed))
    if operation.path.endswith("/open"):
        known = {"run": RUN_ID, "session": SESSION_ID}
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, query=known))
    if operation.body:
        body = {"runIds": [RUN_ID]}
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, body=body))
    return st.one_of(strategies)


_TOOLS = (
    "trace_viewer@",
    "overview_page",
    "graph_viewer",
    "memory_viewer",
    "memory_profile",
    "op_profile",
    "hlo_stats",
    "roofline_model",
    "framework_op_stats",
    "input_pipeline_analyzer",
    "kernel_stats",
    "pod_viewer",
)
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@st.composite
def _proxied(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    """A read-only API route and parameters it passes on, often about the served session."""
    path = draw(st.sampled_from(sorted(API_PARAMETERS)))
    allowed = sorted(API_PARAMETERS[path])
    names = draw(st.lists(st.sampled_from(allowed), max_size=5, unique=True)) if allowed else []
    query = {name: draw(_TEXT) for name in names}
    if "run" in allowed and draw(st.booleans()):
        query["run"] = f"{RUN_ID}/{SESSION_ID}"
    if "tag" in allowed and draw(st.booleans()):
        query["tag"] = draw(st.sampled_from(_TOOLS))
    if "host" in allowed and draw(st.booleans()):
        query["host"] = draw(st.sampled_from(["host-a", "ALL_HOSTS", "other"]))
    return path, query


def test_no_operation_answers_a_server_error(
    tmp_path: Path, nats_settings: NatsSettings, api_tokens: ApiTokens
) -> None:
    storage = tmp_path / "storage"
    session = storage / RUN_ID / "plugins" / "profile" / SESSION_ID
    session.mkdir(parents=True)
    (session / "host-a.xplane.pb").write_bytes(b"\x00 not much of an xplane")
    app_settings = XProfProvisionerSettings(
        work_dir=tmp_path / "work",
        # A random range: other suites on this machine may run XProfs on the default one.
        first_instance_port=random.randrange(20_000, 32_000, 20),
        instance_port_count=20,
        storage=StorageSettings(url=f"file://{storage}"),
        nats=nats_settings,
    )
    app = create_app(app_settings)
    schema = schemathesis.openapi.from_dict(app.openapi())
    headers = api_tokens.headers(Role.ADMIN)
    with served_in_thread(app) as base_url, requests.Session() as session_:
        started = session_.post(
            f"{base_url}/v1/xprofInstances", json={"runIds": [RUN_ID]}, headers=headers
        )
        assert started.status_code == 201, started.text
        instance_id = started.json()["instanceId"]

        fuzzer = Fuzzer(session_, base_url, headers)
        for result in schema.get_all_operations():
            fuzzer.fuzz(result.ok(), partial(_strategy, instance_id=instance_id), EXAMPLES)

        # The proxy's query is passed through, so the document has none to fuzz: drive the
        # read-only API's parameters through the proxy to the real XProf here.
        proxy = f"{base_url}/xprof/{instance_id}/data/plugin/profile/"

        @fuzz_settings(EXAMPLES)
        @given(request=_proxied())
        def fuzz_proxy(request: tuple[str, dict[str, str]]) -> None:
            path, query = request
            response = session_.get(proxy + path, params=query, headers=headers, timeout=60)
            fuzzer.record(response, f"GET {path} query={query!r}")

        fuzz_proxy()
        fuzzer.operations.append("GET /xprof/{instance_id}/data/plugin/profile/{api} ?query")
    print(f"\n{fuzzer.summary()}")  # noqa: T201
    assert sorted(fuzzer.operations) == [
        "DELETE /v1/xprofInstances/{instance_id}",
        "GET /v1/xprofInstances",
        "GET /v1/xprofInstances/{instance_id}",
        "GET /xprof/open",
        "GET /xprof/{instance_id}/data/plugin/profile/{api} ?query",
        "GET /xprof/{instance_id}/{path}",
        "POST /v1/xprofInstances",
    ]
    assert fuzzer.statuses[200] > 0  # some cases went through to the service (and to XProf)
    assert fuzzer.failures == []

"""Streamed GETs of the SDK's clients (a metric's export, a replica's followed logs): the body
comes as the server sends it, an error answer raises the API's error before the first byte,
and a transport failure raises ``ApiUnreachable`` naming the URL and the API. Against
httpx's mock transport (the edge of the clients)."""

import httpx
import pytest

from mldiag.api_client import ApiError, ApiUnreachable, RegistryClient
from mldiag.jobs import JobsClient

URL = "http://mldiag.test:8080"
JOB = "projects/acme/locations/us-central1/customJobs/42"


def _registry(handler: httpx.MockTransport) -> RegistryClient:
    return RegistryClient(URL, token="t", project="acme", location="us-central1", transport=handler)


def _jobs(handler: httpx.MockTransport) -> JobsClient:
    return JobsClient(URL, token="t", transport=handler)


def test_an_export_streams_the_body_with_its_query() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, stream=httpx.ByteStream(b"step,value\n1,0.5\n"))

    with _registry(httpx.MockTransport(answer)) as client:
        body = b"".join(client.export_metric("r1", "loss", "csv", start_step=1))
    assert body == b"step,value\n1,0.5\n"
    assert seen[0].url.path.endswith("/machineLearningRuns/r1/metrics:export")
    # empty parameters are left out
    assert dict(seen[0].url.params) == {"metric": "loss", "format": "csv", "startStep": "1"}


def test_an_error_answer_raises_the_apis_error_before_any_byte() -> None:
    body = {"error": {"code": "invalid_export_format", "message": "format is csv or jsonl"}}
    handler = httpx.MockTransport(lambda _: httpx.Response(400, json=body))
    with _registry(handler) as client, pytest.raises(ApiError) as raised:
        next(client.export_metric("r1", "loss", "xml"))
    assert (raised.value.status, raised.value.code) == (400, "invalid_export_format")


def test_followed_logs_raise_the_vertex_dialects_error() -> None:
    body = {"error": {"code": 404, "status": "NOT_FOUND", "message": "no job 42"}}
    handler = httpx.MockTransport(lambda _: httpx.Response(404, json=body))
    with _jobs(handler) as client, pytest.raises(ApiError) as raised:
        next(client.follow_logs(JOB, replica="workerpool0-0"))
    assert (raised.value.status, raised.value.code) == (404, "not_found")


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.mark.parametrize(
    ("open_stream", "service"),
    [
        (
            lambda: _registry(httpx.MockTransport(_refused)).export_metric("r1", "loss"),
            "run-registry",
        ),
        (lambda: _jobs(httpx.MockTransport(_refused)).follow_logs(JOB), "training"),
    ],
    ids=["export", "followed logs"],
)
def test_nothing_answering_is_unreachable_naming_the_url_and_the_api(
    open_stream: object, service: str
) -> None:
    with pytest.raises(ApiUnreachable) as raised:
        next(open_stream())  # type: ignore[operator]
    assert raised.value.url == URL
    assert raised.value.service == service
    assert "connection refused" in str(raised.value)

"""Usage errors (exit 2) found before any request, and the API client's request shape."""

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from mldiag.api_client import ApiError, ApiUnreachable, RegistryClient
from mldiag.cli import build_parser
from support import free_port


@pytest.mark.parametrize(
    "argv",
    [
        ["runs"],
        ["runs", "frobnicate"],
        ["runs", "describe"],
        ["runs", "create"],  # --display-name is required
        ["runs", "create", "--display-name", "x", "--label", "novalue"],
        ["runs", "update", "r", "--phase", "DONE"],
        ["runs", "list", "--page-size", "0"],
        ["metrics", "get", "r", "m", "--buckets", "many"],
        ["metrics", "get", "r", "m", "--buckets", "4", "--group-by", "device"],
        ["configs", "diff", "only-one"],
        ["runs", "list", "--format", "xml"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str], mldiag: Callable[..., Any]) -> None:
    result = mldiag(*argv)
    assert result.code == 2
    assert "error:" in result.err
    assert result.out == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "update", "r"], "nothing to update"),
        (["metrics", "get", "r", "m", "--group-by", "host"], "--group-by needs --buckets"),
        (["metrics", "get", "r", "m", "--latest", "--buckets", "3"], "--latest does not go"),
    ],
)
def test_contradictory_arguments_exit_2_before_any_request(
    argv: list[str], message: str, mldiag: Callable[..., Any]
) -> None:
    # Nothing listens on this port: a request would be exit status 3.
    result = mldiag(*argv, "--api-url", f"http://127.0.0.1:{free_port()}")
    assert result.code == 2
    assert message in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_global_options_work_before_and_after_the_command() -> None:
    before = build_parser().parse_args(["--format", "json", "runs", "list"])
    after = build_parser().parse_args(["runs", "list", "--format", "yaml", "--token", "t"])
    assert (before.output_format, after.output_format, after.token) == ("json", "yaml", "t")
    plain = build_parser().parse_args(["runs", "list"])
    assert (plain.output_format, plain.api_url, plain.project) == ("table", None, None)


def test_stack_commands_are_unchanged() -> None:
    args = build_parser().parse_args(["status", "--home", "/tmp/x"])
    assert (args.command, args.home) == ("status", "/tmp/x")
    assert not hasattr(args, "api_handler")


def _recording_client(
    seen: list[httpx.Request], answer: httpx.Response, **options: Any
) -> RegistryClient:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    return RegistryClient("http://api.test/", transport=httpx.MockTransport(handle), **options)


def test_client_sends_the_token_and_the_long_form_when_asked() -> None:
    seen: list[httpx.Request] = []
    answer = httpx.Response(200, json={"machineLearningRuns": [], "nextPageToken": ""})
    with _recording_client(seen, answer, token="s3cret", project="p") as client:
        client.list_runs(filter='runSet = "a"', page_size=5)
    request = seen[0]
    assert request.headers["Authorization"] == "Bearer s3cret"
    assert request.url.path == "/v1/projects/p/locations/local/machineLearningRuns"
    assert dict(request.url.params) == {"filter": 'runSet = "a"', "pageSize": "5"}
    with _recording_client(seen, answer) as client:
        client.list_runs()
    assert "Authorization" not in seen[1].headers
    assert seen[1].url.path == "/v1/machineLearningRuns"


def test_client_reads_error_bodies_and_non_json_failures() -> None:
    api_error = httpx.Response(
        404, json={"error": {"code": "run_not_found", "message": "no run x"}}
    )
    with _recording_client([], api_error) as client, pytest.raises(ApiError) as caught:
        client.get_run("x")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        404,
        "run_not_found",
        "no run x",
    )
    proxy = httpx.Response(502, text="<html>Bad Gateway</html>")
    with _recording_client([], proxy) as client, pytest.raises(ApiError) as caught:
        client.get_run("x")
    assert caught.value.code == "http_502"
    assert "Bad Gateway" in caught.value.message


def test_client_names_the_url_when_nothing_answers() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with RegistryClient(url) as client, pytest.raises(ApiUnreachable) as caught:
        client.list_operations()
    assert caught.value.url == url

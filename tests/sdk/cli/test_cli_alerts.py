"""``mldiag alerts`` against a real notifier (real NATS and PostgreSQL) and real webhook
receivers, invoked in-process as a person or a script would."""

import base64
import io
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from conftest import ApiTokens
from e2e.webhook import webhook_receiver
from mldiag_platform.settings import DatabaseSettings, NatsSettings
from sdk.cli.conftest import Result
from support import served_in_thread

pytestmark = pytest.mark.connected


@pytest.fixture
def notifier(
    nats_settings: NatsSettings,
    database_settings: DatabaseSettings,
    db_schema: str,
    api_tokens: ApiTokens,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[str]:
    """The notifier, served; the CLI's token (``MLDIAG_TOKEN``) is an admin's."""
    app = pytest.importorskip("mldiag_notifier.app")
    from mldiag_notifier.settings import NotifierSettings  # noqa: PLC0415  # once it exists

    monkeypatch.setenv("MLDIAG_TOKEN", api_tokens.admin)
    settings = NotifierSettings(
        nats=nats_settings,
        database=database_settings,
        db_schema=db_schema,
        secret_key=base64.urlsafe_b64encode(os.urandom(32)).decode(),
    )
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    try:
        with served_in_thread(app.create_app(settings)) as url:
            yield url
    finally:
        structlog.configure(**saved)


def _json(result: Result) -> Any:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_channels_from_create_to_delete(
    notifier: str,
    mldiag: Callable[..., Result],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ("--api-url", notifier)
    with webhook_receiver("s3cret-from-stdin") as receiver:
        # The secret from standard input: it never appears in the command line.
        monkeypatch.setattr("sys.stdin", io.StringIO("s3cret-from-stdin\n"))
        created = mldiag(
            "alerts",
            "channels",
            "create",
            *api,
            "--kind=WEBHOOK",
            "--display-name=Team hook",
            f"--config=url={receiver.url}",
            "--secret-stdin=signingSecret",
        )
        assert created.code == 0, created.err
        assert created.out == "created webhook channel team-hook; secrets kept: signingSecret\n"

        tested = mldiag("alerts", "channels", "test", *api, "team-hook")
        assert tested.code == 0, tested.err
        assert tested.out == "delivered a TEST notification through team-hook\n"
        [test] = receiver.received
        assert test.signed and test.body["kind"] == "TEST"

    # From a file, flags over it; a second secret read from a file of its own.
    (tmp_path / "channel.yaml").write_text(
        "display_name: From a file\nkind: alertmanager\nconfig: {url: 'http://127.0.0.1:9'}\n"
    )
    (tmp_path / "token").write_text("bearer-value\n")
    from_file = mldiag(
        "alerts",
        "channels",
        "create",
        *api,
        "--from-file",
        str(tmp_path / "channel.yaml"),
        "--id=am",
        f"--secret-file=bearerToken={tmp_path / 'token'}",
        "--format=json",
    )
    channel = _json(from_file)
    assert (channel["kind"], channel["displayName"]) == ("ALERTMANAGER", "From a file")
    assert channel["secretKeys"] == ["bearerToken"]
    assert "bearer-value" not in from_file.out

    # Nothing listens on port 9: the test fails, clearly, with exit 1.
    failed = mldiag("alerts", "channels", "test", *api, "am")
    assert failed.code == 1
    assert failed.err.startswith("error: not delivered through am: ")

    table = mldiag("alerts", "channels", "list", *api)
    assert table.code == 0, table.err
    lines = table.out.splitlines()
    assert lines[0].split() == ["ID", "KIND", "DISPLAY", "NAME", "ENABLED", "TARGET", "SECRETS"]
    assert any(line.split()[:2] == ["am", "ALERTMANAGER"] for line in lines[1:])
    assert any("team-hook" in line and "signingSecret" in line for line in lines[1:])
    described = mldiag("alerts", "channels", "describe", *api, "team-hook")
    assert "secretKeys" in described.out and "s3cret-from-stdin" not in described.out

    # A full name works wherever an id does.
    full = "projects/default/locations/local/notificationChannels/am"
    assert _json(mldiag("alerts", "channels", "describe", *api, full, "--format=json"))["name"] == (
        full
    )
    assert mldiag("alerts", "channels", "delete", *api, full).out == "deleted channel am\n"
    missing = mldiag("alerts", "channels", "describe", *api, "am")
    assert missing.code == 1
    assert missing.err.startswith("error: channel_not_found: ")


def test_bad_channels_are_refused_with_the_api_s_message(
    notifier: str, mldiag: Callable[..., Result], tmp_path: Path
) -> None:
    api = ("--api-url", notifier)
    no_url = mldiag("alerts", "channels", "create", *api, "--kind=webhook", "--display-name=x")
    assert no_url.code == 1
    assert "config.url" in no_url.err
    secret_in_config = mldiag(
        "alerts",
        "channels",
        "create",
        *api,
        "--kind=slack",
        "--display-name=x",
        "--config=webhookUrl=https://hooks.slack.com/x",
    )
    assert secret_in_config.code == 1
    assert "belongs in secrets" in secret_in_config.err
    # Usage errors never reach the API: exit 2.
    assert mldiag("alerts", "channels", "create", *api, "--display-name=x").code == 2
    unreadable = mldiag(
        "alerts",
        "channels",
        "create",
        *api,
        "--kind=slack",
        "--display-name=x",
        f"--secret-file=webhookUrl={tmp_path / 'absent'}",
    )
    assert unreadable.code == 2
    assert "--secret-file webhookUrl" in unreadable.err
    assert (
        mldiag("alerts", "channels", "create", *api, "--kind=pager", "--display-name=x").code == 2
    )


def test_rules_route_to_channels_and_keep_them(
    notifier: str, mldiag: Callable[..., Result]
) -> None:
    api = ("--api-url", notifier)
    assert (
        mldiag(
            "alerts",
            "channels",
            "create",
            *api,
            "--kind=webhook",
            "--display-name=Hook",
            "--config=url=http://127.0.0.1:9/hook",
        ).code
        == 0
    )
    unknown = mldiag("alerts", "rules", "create", *api, "--display-name=r", "--channel=nowhere")
    assert unknown.code == 1
    assert "nowhere" in unknown.err

    created = mldiag(
        "alerts",
        "rules",
        "create",
        *api,
        "--display-name=Hangs in prod",
        "--channel=hook",
        "--event-type=hang,straggler",
        "--min-severity=critical",
        "--run-set=nightly",
        "--label=env=prod",
        "--no-resolve",
        "--group-window=30",
        "--max-per-hour=5",
        "--format=json",
    )
    rule = _json(created)
    assert rule["eventTypes"] == ["HANG", "STRAGGLER"]
    assert (rule["minSeverity"], rule["runSets"], rule["labels"]) == (
        "CRITICAL",
        ["nightly"],
        {"env": "prod"},
    )
    assert (rule["notifyOnResolve"], rule["groupWindowSeconds"], rule["maxPerHour"]) == (
        False,
        30,
        5,
    )
    table = mldiag("alerts", "rules", "list", *api)
    row = next(line for line in table.out.splitlines() if line.startswith("hangs-in-prod"))
    assert "HANG,STRAGGLER" in row and "set=nightly,env=prod" in row
    described = _json(mldiag("alerts", "rules", "describe", *api, "hangs-in-prod", "--format=json"))
    assert described["channels"] == ["hook"]

    in_use = mldiag("alerts", "channels", "delete", *api, "hook")
    assert in_use.code == 1
    assert in_use.err.startswith("error: channel_in_use: ") and "hangs-in-prod" in in_use.err
    assert mldiag("alerts", "rules", "delete", *api, "hangs-in-prod").code == 0
    assert mldiag("alerts", "channels", "delete", *api, "hook").code == 0


def test_deliveries_are_listed_by_channel_and_state(
    notifier: str, mldiag: Callable[..., Result]
) -> None:
    api = ("--api-url", notifier)
    with webhook_receiver("k") as receiver:
        for name, url in (("up", receiver.url), ("down", "http://127.0.0.1:9/hook")):
            made = mldiag(
                "alerts",
                "channels",
                "create",
                *api,
                "--kind=webhook",
                f"--display-name={name}",
                f"--config=url={url}",
                "--secret=signingSecret=k",
            )
            assert made.code == 0, made.err
            mldiag("alerts", "channels", "test", *api, name)
    assert mldiag("alerts", "deliveries", "list", *api, "--state=pending").out == "no deliveries\n"
    delivered = _json(
        mldiag("alerts", "deliveries", "list", *api, "--state=delivered", "--format=json")
    )
    assert [d["channel"] for d in delivered["notificationDeliveries"]] == ["up"]
    table = mldiag("alerts", "deliveries", "list", *api, "--channel=down")
    [header, row] = table.out.splitlines()
    assert header.split()[:4] == ["CREATED", "KIND", "STATE", "ATTEMPTS"]
    assert " TEST " in row and "down" in row and "DELIVERED" not in row
    newest = _json(mldiag("alerts", "deliveries", "list", *api, "--limit=1", "--format=json"))
    assert len(newest["notificationDeliveries"]) == 1

"""``mldiag login``, ``logout`` and ``config`` against a real run-registry: a login is checked
before it is kept, the CLI then finds the platform by it alone, and no token is ever printed."""

import io
import json
import os
import pty
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from mldiag.login import LOGIN_FILE
from sdk.cli.conftest import Platform, Result

pytestmark = pytest.mark.connected

Mldiag = Callable[..., Result]


@pytest.fixture(autouse=True)
def config_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The test's own config directory: never the user's."""
    path = tmp_path / "config"
    monkeypatch.setenv("MLDIAG_CONFIG_DIR", str(path))
    return path


@pytest.fixture
def platform(platform_apps: Platform, monkeypatch: pytest.MonkeyPatch) -> Platform:
    """The served platform, with no token in the environment: only a login can give one."""
    monkeypatch.delenv("MLDIAG_TOKEN")
    return platform_apps


def _stored(config_dir: Path) -> dict[str, str]:
    body: dict[str, str] = json.loads((config_dir / LOGIN_FILE).read_text())
    return body


def test_a_checked_login_is_kept_and_used_by_every_command(
    mldiag: Mldiag, platform: Platform, config_dir: Path
) -> None:
    assert mldiag("runs", "list").code != 0  # the default URL, and no token

    done = mldiag("login", platform.api_url, "--token", platform.tokens.viewer)
    assert done.code == 0, done.err
    assert f"logged in to {platform.api_url}" in done.out
    assert _stored(config_dir) == {"api_url": platform.api_url, "token": platform.tokens.viewer}
    assert stat.S_IMODE((config_dir / LOGIN_FILE).stat().st_mode) == 0o600

    listed = mldiag("runs", "list")  # the API answers 401 to a request without the token
    assert listed.code == 0, listed.err

    shown = mldiag("config")
    assert shown.code == 0
    assert f"{platform.api_url} from the stored login" in shown.out
    assert platform.tokens.viewer not in shown.out + shown.err
    assert mldiag("login", "--show").out == shown.out
    assert mldiag("config", "--get", "api-url").out.strip() == platform.api_url
    assert mldiag("config", "--get", "login-file").out.strip() == str(config_dir / LOGIN_FILE)


def test_a_refused_token_is_not_kept(mldiag: Mldiag, platform: Platform, config_dir: Path) -> None:
    assert mldiag("login", platform.api_url, "--token", platform.tokens.admin).code == 0
    refused = mldiag("login", platform.api_url, "--token", "mldiag_not-a-token")
    assert refused.code == 1
    assert "refused the token (unauthenticated" in refused.err
    assert "nothing was saved" in refused.err
    assert _stored(config_dir)["token"] == platform.tokens.admin  # the earlier login stays


def test_an_unreachable_platform_is_not_kept(mldiag: Mldiag, config_dir: Path) -> None:
    unreachable = mldiag("login", "http://127.0.0.1:9", "--token", "mldiag_x")
    assert unreachable.code == 3
    assert "cannot reach the mldiag API at http://127.0.0.1:9" in unreachable.err
    assert not (config_dir / LOGIN_FILE).exists()


def test_the_token_comes_from_stdin_and_never_from_a_missing_terminal(
    mldiag: Mldiag, platform: Platform, config_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(platform.tokens.editor + "\n"))
    assert mldiag("login", platform.api_url + "/", "--token-stdin").code == 0
    assert _stored(config_dir) == {"api_url": platform.api_url, "token": platform.tokens.editor}

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # not a terminal: nothing to ask on
    asked = mldiag("login", platform.api_url)
    assert (asked.code, asked.err.strip()) == (
        2,
        "mldiag login: error: no terminal to ask the token on: give --token or --token-stdin",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give the platform's URL (or --local for this machine's stack)"),
        (("ftp://x", "--token", "t"), "'ftp://x' is not an http:// or https:// URL"),
        (("http://x", "--token", " "), "the token is empty"),
    ],
)
def test_usage_errors_exit_2(mldiag: Mldiag, args: tuple[str, ...], message: str) -> None:
    result = mldiag("login", *args)
    assert (result.code, result.err.strip()) == (2, f"mldiag login: error: {message}")


def test_logout_forgets_the_login(mldiag: Mldiag, platform: Platform, config_dir: Path) -> None:
    assert mldiag("login", platform.api_url, "--token", platform.tokens.viewer).code == 0
    out = mldiag("logout")
    assert (out.code, out.out.strip()) == (0, f"logged out: removed {config_dir / LOGIN_FILE}")
    assert mldiag("logout").out.strip() == f"not logged in (no {config_dir / LOGIN_FILE})"
    assert mldiag("config", "--get", "api-url").out.strip() == "http://127.0.0.1:8080"


def test_the_environment_still_beats_the_login(
    mldiag: Mldiag, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert mldiag("login", platform.api_url, "--token", platform.tokens.viewer).code == 0
    monkeypatch.setenv("MLDIAG_API_URL", "http://127.0.0.1:9")
    assert mldiag("runs", "list").code == 3
    shown = mldiag("config").out
    assert "http://127.0.0.1:9 from MLDIAG_API_URL" in shown
    assert "token       none" in shown  # the login's token is not for that URL


def test_a_broken_login_file_is_a_clear_error(mldiag: Mldiag, config_dir: Path) -> None:
    config_dir.mkdir()
    (config_dir / LOGIN_FILE).write_text("{")
    listed = mldiag("runs", "list")
    assert listed.code == 1
    assert "is not a stored login" in listed.err
    assert "Traceback" not in listed.err


def test_local_login_needs_a_running_stack(mldiag: Mldiag, tmp_path: Path) -> None:
    result = mldiag("login", "--local")
    assert result.code == 1
    assert f"no stack is running in {tmp_path / 'mldiag-home'}" in result.err


def test_the_token_is_asked_for_on_a_terminal_without_echo(
    platform: Platform, config_dir: Path
) -> None:
    main, child = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "mldiag.cli", "login", platform.api_url],
        stdin=child,
        stdout=child,
        stderr=child,
        env={**os.environ, "MLDIAG_CONFIG_DIR": str(config_dir)},
        # No controlling terminal: getpass then asks on stdin (this pseudo-terminal), never
        # on the terminal pytest may have been started from.
        start_new_session=True,
    )
    os.close(child)
    seen = b""
    while b"API token for" not in seen:
        seen += os.read(main, 1024)
    os.write(main, platform.tokens.viewer.encode() + b"\n")
    assert process.wait(timeout=30) == 0
    try:
        while chunk := os.read(main, 1024):
            seen += chunk
    except OSError:  # EIO: the child side is closed
        pass
    os.close(main)
    assert f"API token for {platform.api_url}: ".encode() in seen
    assert platform.tokens.viewer.encode() not in seen  # getpass does not echo it
    assert _stored(config_dir) == {"api_url": platform.api_url, "token": platform.tokens.viewer}

"""The stored login (mldiag.login) and the one resolution order of URL and token
(mldiag.credentials) that the CLI and ``mldiag.init`` share."""

import json
import stat
from pathlib import Path

import platformdirs
import pytest

from mldiag.config import DEFAULT_API_URL, Settings
from mldiag.credentials import (
    LOCAL_TOKEN_FILE,
    default_home,
    resolve_api_url,
    resolve_connection,
    resolve_token,
)
from mldiag.login import (
    LoginFileError,
    StoredLogin,
    config_dir,
    login_path,
    read_login,
    remove_login,
    save_login,
)

REMOTE = "https://mldiag.example.com"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A config directory and a stack home of the test's own, nothing else."""
    return {"MLDIAG_CONFIG_DIR": str(tmp_path / "config"), "MLDIAG_HOME": str(tmp_path / "home")}


def _local_token(env: dict[str, str]) -> None:
    """The admin token ``mldiag up`` would have written: ``mldiag_local``."""
    home = Path(env["MLDIAG_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / LOCAL_TOKEN_FILE).write_text("mldiag_local\n")


def test_a_saved_login_reads_back_owner_only(env: dict[str, str]) -> None:
    path = save_login(StoredLogin(api_url=REMOTE + "/", token="mldiag_remote"), env)
    assert path == Path(env["MLDIAG_CONFIG_DIR"]) / "credentials.json"
    assert read_login(env) == StoredLogin(api_url=REMOTE, token="mldiag_remote")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert json.loads(path.read_text()) == {"api_url": REMOTE, "token": "mldiag_remote"}
    # replaced whole, and no temporary file is left beside it
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_second"), env)
    assert read_login(env) == StoredLogin(api_url=REMOTE, token="mldiag_second")
    assert [p.name for p in path.parent.iterdir()] == ["credentials.json"]


def test_logout_removes_the_login_once(env: dict[str, str]) -> None:
    assert read_login(env) is None
    assert remove_login(env) is False
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_remote"), env)
    assert remove_login(env) is True
    assert not login_path(env).exists()


@pytest.mark.parametrize(
    "text", ["not json", "[]", '{"api_url": "x"}', '{"api_url": "", "token": "t"}']
)
def test_a_broken_login_is_an_error_not_another_identity(env: dict[str, str], text: str) -> None:
    login_path(env).parent.mkdir(parents=True)
    login_path(env).write_text(text)
    with pytest.raises(LoginFileError, match="is not a stored login"):
        read_login(env)
    with pytest.raises(LoginFileError):
        resolve_connection(env=env)


def test_the_directories_default_to_the_users_own() -> None:
    assert config_dir({}) == Path(platformdirs.user_config_dir("mldiag"))
    assert default_home({}) == Path(platformdirs.user_data_dir("mldiag"))
    assert default_home({"MLDIAG_HOME": "/srv/stack"}) == Path("/srv/stack")


def test_nothing_stored_means_the_local_stack_and_its_admin_token(env: dict[str, str]) -> None:
    connection = resolve_connection(env=env)
    assert (connection.api_url, connection.api_url_source) == (DEFAULT_API_URL, "default")
    assert (connection.token, connection.token_source) == ("", "none")
    _local_token(env)
    connection = resolve_connection(env=env)
    assert connection.token == "mldiag_local"
    assert connection.token_source == str(Path(env["MLDIAG_HOME"]) / LOCAL_TOKEN_FILE)


def test_the_login_beats_the_local_stack(env: dict[str, str]) -> None:
    _local_token(env)
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_remote"), env)
    connection = resolve_connection(env=env)
    assert (connection.api_url, connection.api_url_source) == (REMOTE, "login")
    assert (connection.token, connection.token_source) == ("mldiag_remote", "login")


def test_the_environment_beats_the_login(env: dict[str, str]) -> None:
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_remote"), env)
    both = {**env, "MLDIAG_API_URL": "http://other:8080/", "MLDIAG_TOKEN": "mldiag_env"}
    connection = resolve_connection(env=both)
    assert (connection.api_url, connection.token) == ("http://other:8080", "mldiag_env")
    assert (connection.api_url_source, connection.token_source) == (
        "MLDIAG_API_URL",
        "MLDIAG_TOKEN",
    )
    # the same URL as the login's: its token still goes along
    same = {**env, "MLDIAG_API_URL": REMOTE}
    assert resolve_token(env=same) == "mldiag_remote"


def test_arguments_beat_everything(env: dict[str, str]) -> None:
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_remote"), env)
    both = {**env, "MLDIAG_API_URL": "http://other:8080", "MLDIAG_TOKEN": "mldiag_env"}
    connection = resolve_connection("http://arg:1/", "mldiag_arg", both)
    assert (connection.api_url, connection.token) == ("http://arg:1", "mldiag_arg")
    assert resolve_api_url("http://arg:1", both) == "http://arg:1"


def test_the_logins_token_never_goes_to_another_url(env: dict[str, str]) -> None:
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_remote"), env)
    assert resolve_token(env={**env, "MLDIAG_API_URL": "http://127.0.0.1:8080"}) == ""
    assert resolve_token(env=env, api_url="http://elsewhere:8080") == ""
    _local_token(env)  # another URL falls through to the local stack's token
    assert resolve_token(env=env, api_url="http://127.0.0.1:8080") == "mldiag_local"


def test_sdk_settings_follow_the_login(env: dict[str, str]) -> None:
    """What ``mldiag.init`` resolves: the login's URL for the API and for writes."""
    save_login(StoredLogin(api_url=REMOTE, token="mldiag_remote"), env)
    settings = Settings.resolve(env=env)
    assert (settings.api_url, settings.ingestion_url, settings.token) == (
        REMOTE,
        REMOTE,
        "mldiag_remote",
    )
    explicit = Settings.resolve(api_url="http://mine:9", token="mldiag_mine", env=env)
    assert (explicit.api_url, explicit.token) == ("http://mine:9", "mldiag_mine")

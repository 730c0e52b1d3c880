"""Which platform the CLI and the SDK talk to, and with which token.

Both are resolved the same way everywhere, first match wins:

1. an argument (``--api-url``/``--token``, ``mldiag.init(api_url=..., token=...)``);
2. the environment (``MLDIAG_API_URL``, ``MLDIAG_TOKEN``);
3. the stored login of ``mldiag login`` (:mod:`mldiag.login`); its token only goes to its
   own URL, so pointing ``MLDIAG_API_URL`` elsewhere never sends it to another server;
4. the admin token ``mldiag up`` keeps in its home directory (``$MLDIAG_HOME``, default a
   per-user data directory), file mode 0600;
5. the defaults: the local stack's URL, and no token (the API will answer 401).
"""

import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from mldiag.login import StoredLogin, normalize_url, read_login

DEFAULT_API_URL = "http://127.0.0.1:8080"
"""The local stack's API (``mldiag up``'s edge) when nothing names another."""
HOME_ENV = "MLDIAG_HOME"
"""Where ``mldiag up`` keeps the embedded stack's data, logs, state and admin token."""
LOCAL_TOKEN_FILE = "admin-token"  # noqa: S105  # a file name
"""Name of the admin token's file in the stack's home directory."""


def default_home(env: Mapping[str, str] | None = None) -> Path:
    """The embedded stack's home: ``$MLDIAG_HOME``, else the user's data directory
    (``platformdirs.user_data_dir("mldiag")``, ``~/.local/share/mldiag`` on Linux), so
    ``mldiag status`` finds the stack from any folder.
    """
    env = os.environ if env is None else env
    return Path(env.get(HOME_ENV) or platformdirs.user_data_dir("mldiag"))


def local_token_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the local stack's admin token lives."""
    return default_home(env) / LOCAL_TOKEN_FILE


@dataclass(frozen=True, slots=True)
class Connection:
    """The resolved platform: its URL and token, and where each came from (for
    ``mldiag config``, which shows the sources and never the token).
    """

    api_url: str
    api_url_source: str
    token: str
    token_source: str


def resolve_connection(
    api_url: str | None = None, token: str | None = None, env: Mapping[str, str] | None = None
) -> Connection:
    """The platform's URL and the token to send it, in the order of the module's docstring.

    Raises :class:`mldiag.login.LoginFileError` when a stored login is there but broken
    and would have been consulted.
    """
    env = os.environ if env is None else env
    url, url_source, stored = _resolve_url(api_url, env)
    if token:
        return Connection(url, url_source, token, "argument")
    if from_env := env.get("MLDIAG_TOKEN"):
        return Connection(url, url_source, from_env, "MLDIAG_TOKEN")
    if stored is None:
        stored = read_login(env)
    if stored is not None and stored.api_url == url:
        return Connection(url, url_source, stored.token, "login")
    path = local_token_path(env)
    try:
        local = path.read_text().strip()
    except OSError:
        local = ""
    if local:
        return Connection(url, url_source, local, str(path))
    return Connection(url, url_source, "", "none")


def _resolve_url(
    explicit: str | None, env: Mapping[str, str]
) -> tuple[str, str, StoredLogin | None]:
    """The URL, its source, and the stored login when it had to be read to decide."""
    if explicit:
        return normalize_url(explicit), "argument", None
    if from_env := env.get("MLDIAG_API_URL"):
        return normalize_url(from_env), "MLDIAG_API_URL", None
    if (stored := read_login(env)) is not None:
        return stored.api_url, "login", stored
    return DEFAULT_API_URL, "default", None


def resolve_api_url(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The platform's base URL: an argument, else ``$MLDIAG_API_URL``, else the stored
    login's, else :data:`DEFAULT_API_URL` (no trailing slash)."""
    return _resolve_url(explicit, os.environ if env is None else env)[0]


def resolve_token(
    explicit: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    api_url: str | None = None,
) -> str:
    """The token to send to ``api_url`` (default: the URL :func:`resolve_api_url` gives):
    an explicit one, else ``$MLDIAG_TOKEN``, else the stored login's when it is for that
    URL, else the local stack's admin token if there is one, else empty.
    """
    return resolve_connection(api_url, explicit, env).token


def ensure_local_token(home: Path) -> str:
    """The stack's admin token, created (0600) on first use and kept across restarts."""
    path = home / LOCAL_TOKEN_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    home.mkdir(parents=True, exist_ok=True)
    # mldiag_platform.auth.new_secret's format; the SDK does not depend on the platform.
    secret = "mldiag_" + secrets.token_urlsafe(32)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(secret + "\n")
    return secret

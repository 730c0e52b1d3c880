"""The API token a local user has without asking: the admin token ``mldiag up`` keeps in
its home directory (``$MLDIAG_HOME``, default ``./.mldiag``), file mode 0600.
"""

import os
import secrets
from collections.abc import Mapping
from pathlib import Path

LOCAL_TOKEN_FILE = "admin-token"  # noqa: S105  # a file name
"""Name of the admin token's file in the stack's home directory."""

_DEFAULT_HOME = ".mldiag"  # mldiag.local.config.DEFAULT_HOME; not imported to stay light


def local_token_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the local stack's admin token lives."""
    env = os.environ if env is None else env
    return Path(env.get("MLDIAG_HOME") or _DEFAULT_HOME) / LOCAL_TOKEN_FILE


def resolve_token(explicit: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """The token to send: an explicit one, else ``$MLDIAG_TOKEN``, else the local stack's
    admin token if there is one, else empty (the API will answer 401).
    """
    env = os.environ if env is None else env
    if explicit:
        return explicit
    if from_env := env.get("MLDIAG_TOKEN"):
        return from_env
    try:
        return local_token_path(env).read_text().strip()
    except OSError:
        return ""


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

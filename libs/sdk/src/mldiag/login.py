"""The stored login of ``mldiag login``: the platform's URL and a token, in one owner-only
JSON file of the user's config directory, so the CLI and the SDK reach that platform from
any folder without ``MLDIAG_API_URL``/``MLDIAG_TOKEN``.

The directory is ``$MLDIAG_CONFIG_DIR``, else ``platformdirs.user_config_dir("mldiag")``
(``~/.config/mldiag`` on Linux). The file is replaced atomically, so a reader sees the old
login or the new one, never half of one.
"""

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import platformdirs

CONFIG_DIR_ENV = "MLDIAG_CONFIG_DIR"
"""Overrides the config directory (tests, or several identities on one account)."""
LOGIN_FILE = "credentials.json"
"""Name of the stored login's file in the config directory."""


class LoginFileError(Exception):
    """The stored login's file exists but cannot be read as one (the message says why)."""


@dataclass(frozen=True, slots=True)
class StoredLogin:
    """What ``mldiag login`` keeps: the platform's base URL and the token it accepted."""

    api_url: str
    token: str


def config_dir(env: Mapping[str, str] | None = None) -> Path:
    """The user's mldiag config directory (``$MLDIAG_CONFIG_DIR`` first)."""
    env = os.environ if env is None else env
    return Path(env.get(CONFIG_DIR_ENV) or platformdirs.user_config_dir("mldiag"))


def login_path(env: Mapping[str, str] | None = None) -> Path:
    """Where the stored login lives, whether or not it exists."""
    return config_dir(env) / LOGIN_FILE


def read_login(env: Mapping[str, str] | None = None) -> StoredLogin | None:
    """The stored login, or None when there is none.

    Raises :class:`LoginFileError` when the file is there but unreadable or not a login:
    silently falling back to another identity would be worse than saying so.
    """
    path = login_path(env)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise LoginFileError(f"cannot read the stored login {path}: {error.strerror}") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or not all(
        isinstance(body.get(key), str) and body[key] for key in ("api_url", "token")
    ):
        raise LoginFileError(
            f"{path} is not a stored login (a JSON object with api_url and token); "
            "`mldiag logout` removes it, `mldiag login` writes a new one"
        )
    return StoredLogin(api_url=normalize_url(body["api_url"]), token=body["token"])


def save_login(login: StoredLogin, env: Mapping[str, str] | None = None) -> Path:
    """Write ``login`` (file mode 0600, directory 0700) in place of any earlier one; return
    its path. The token never exists on disk with wider permissions, not even briefly.
    """
    path = login_path(env)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    body = json.dumps({"api_url": normalize_url(login.api_url), "token": login.token}, indent=2)
    # mkstemp creates the file 0600; the rename is atomic within the directory.
    descriptor, temporary = tempfile.mkstemp(prefix=".credentials-", dir=path.parent)
    try:
        with os.fdopen(descriptor, "w") as file:
            file.write(body + "\n")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def remove_login(env: Mapping[str, str] | None = None) -> bool:
    """Forget the stored login; True when there was one."""
    try:
        login_path(env).unlink()
    except FileNotFoundError:
        return False
    return True


def normalize_url(url: str) -> str:
    """``url`` as it is compared and stored: no surrounding space, no trailing slash."""
    return url.strip().rstrip("/")

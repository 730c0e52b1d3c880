"""Secrets made once and kept: the passwords of the substrate's users, in a file only its
owner can read (directory 0700, file 0600), reused by every later start.
"""

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path

from mldiag.local.errors import LocalStackError

SECRETS_FILE = "substrate.json"
"""Name of the file, in the secrets directory, that holds every secret by name."""


def new_password() -> str:
    """A random password (192 bits) of URL-safe characters: it needs no quoting in a DSN,
    an env file, SQL or the NATS configuration."""
    return secrets.token_urlsafe(24)


def kept_secrets(directory: Path, names: Iterable[str]) -> dict[str, str]:
    """The secrets called ``names`` from ``directory``, the missing ones made and kept.

    Permissions are put back to owner-only on every call, so a directory an older version
    made, or someone loosened, is tightened again.
    """
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    path = directory / SECRETS_FILE
    kept = _read(path)
    missing = [name for name in names if name not in kept]
    if missing:
        kept.update({name: new_password() for name in missing})
        _write(path, kept)
    path.chmod(0o600)
    return {name: kept[name] for name in names}


def _read(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise LocalStackError(
            f"cannot read the secrets in {path} ({error}); restore it from a backup, or "
            "delete it to make new ones (the servers' data then need their passwords reset, "
            "which `mldiag up` does for the embedded stack)"
        ) from None
    if not isinstance(loaded, dict) or not all(isinstance(value, str) for value in loaded.values()):
        raise LocalStackError(f"{path} is not a JSON object of strings")
    return loaded


def _write(path: Path, values: dict[str, str]) -> None:
    # A new file, made owner-only before anything is written, then renamed over the old one:
    # the secrets are never readable by others, nor half written.
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        json.dump(values, out, indent=2, sort_keys=True)
        out.write("\n")
    os.replace(partial, path)

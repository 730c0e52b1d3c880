"""Channel secrets at rest: a Fernet key from the settings or from a key file made once."""

import json
import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken


class SecretBox:
    """Seals a channel's secrets (a JSON object) into a Fernet token, and opens it."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(key)

    def seal(self, secrets: dict[str, str]) -> bytes:
        """The encrypted, authenticated token of ``secrets``."""
        return self._fernet.encrypt(json.dumps(secrets, sort_keys=True).encode())

    def open(self, token: bytes) -> dict[str, str]:
        """The secrets sealed in ``token``; ``ValueError`` when another key sealed it."""
        try:
            opened = json.loads(self._fernet.decrypt(token))
        except InvalidToken:
            raise ValueError("the channel's secrets were sealed with another key") from None
        return {str(key): str(value) for key, value in opened.items()}


def load_key(secret_key: str, key_file: Path) -> bytes:
    """``secret_key`` when set, else the key in ``key_file`` (made 0600 on first use; two
    replicas starting at once read the one that won)."""
    if secret_key:
        key = secret_key.encode()
        try:
            Fernet(key)
        except ValueError:
            raise ValueError(
                "MLDIAG_NOTIFIER_SECRET_KEY is not a Fernet key (url-safe base64 of 32 bytes)"
            ) from None
        return key
    if not key_file.exists():
        key_file.parent.mkdir(parents=True, exist_ok=True)
        try:
            descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another replica made it a moment ago
        else:
            with os.fdopen(descriptor, "wb") as file:
                file.write(Fernet.generate_key())
    key = key_file.read_bytes().strip()
    Fernet(key)  # a corrupt file stops the service at start, not at the first delivery
    return key

"""Channel secrets at rest: sealed with a Fernet key from the settings or a key file."""

import stat
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from mldiag_notifier.crypto import SecretBox, load_key


def test_a_key_file_is_made_once_with_mode_0600(tmp_path: Path) -> None:
    key_file = tmp_path / "home" / "notifier.key"
    key = load_key("", key_file)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert load_key("", key_file) == key


def test_the_settings_key_wins_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    given = Fernet.generate_key().decode()
    assert load_key(given, tmp_path / "unused.key") == given.encode()
    assert not (tmp_path / "unused.key").exists()
    with pytest.raises(ValueError, match="not a Fernet key"):
        load_key("too-short", tmp_path / "unused.key")


def test_sealed_secrets_open_only_with_their_key() -> None:
    box = SecretBox(Fernet.generate_key())
    sealed = box.seal({"password": "hunter2"})
    assert b"hunter2" not in sealed
    assert box.open(sealed) == {"password": "hunter2"}
    with pytest.raises(ValueError, match="another key"):
        SecretBox(Fernet.generate_key()).open(sealed)

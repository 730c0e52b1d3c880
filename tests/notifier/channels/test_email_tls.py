"""The email channel over TLS, against a real SMTP server (aiosmtpd) with a certificate made
by the test: STARTTLS, implicit TLS (SMTPS), a login only ever sent encrypted, and a
certificate nobody vouches for refused.

The certificate is trusted the way an operator trusts a private CA: ``SSL_CERT_FILE``, which
the channel's default SSL context reads when it is created.
"""

import datetime
import ipaddress
import ssl
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from mldiag_notifier.channels.common import DeliveryFailed, Outgoing
from mldiag_notifier.channels.email import send_email
from mldiag_schemas.alerts import Notification, NotificationKind
from support import free_port

PASSWORD = "s3cret-app-password"  # the test server's, made up


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mldiag test SMTP")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "smtp.pem", directory / "smtp.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class _Mailbox:
    def __init__(self, *, implicit: bool) -> None:
        self.implicit = implicit
        """SMTPS: the whole session is TLS (aiosmtpd marks only STARTTLS sessions)."""
        self.messages: list[bytes] = []
        self.logins: list[tuple[str, bool]] = []
        """(user, whether the session was encrypted when it logged in)."""

    async def handle_DATA(self, _server: Any, _session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append(envelope.content)
        return "250 OK"

    def authenticate(
        self, _server: Any, session: Any, _envelope: Any, _mechanism: str, data: Any
    ) -> AuthResult:
        if not isinstance(data, LoginPassword):
            return AuthResult(success=False, handled=False)
        self.logins.append((data.login.decode(), session.ssl is not None or self.implicit))
        # handled=False: the server answers 535 itself (its default, True, answers nothing).
        return AuthResult(success=data.password.decode() == PASSWORD, handled=False)


@dataclass(frozen=True)
class TlsServer:
    port: int
    mailbox: _Mailbox
    cert_file: Path


def _serve(tmp_path: Path, *, implicit: bool) -> Iterator[TlsServer]:
    cert_file, key_file = _certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    mailbox = _Mailbox(implicit=implicit)
    port = free_port()
    tls: dict[str, Any] = (
        {"ssl_context": context, "auth_require_tls": False}  # TLS from the first byte
        if implicit
        else {"tls_context": context, "require_starttls": True, "auth_require_tls": True}
    )
    controller = Controller(
        mailbox,
        hostname="127.0.0.1",
        port=port,
        authenticator=mailbox.authenticate,
        **tls,
    )
    controller.start()
    yield TlsServer(port, mailbox, cert_file)
    controller.stop()


@pytest.fixture
def starttls_server(tmp_path: Path) -> Iterator[TlsServer]:
    """A server that requires STARTTLS before anything else, and TLS before a login."""
    yield from _serve(tmp_path, implicit=False)


@pytest.fixture
def smtps_server(tmp_path: Path) -> Iterator[TlsServer]:
    """A server that speaks TLS from the first byte (SMTPS)."""
    yield from _serve(tmp_path, implicit=True)


def _outgoing() -> Outgoing:
    notification = Notification(
        notification_id=uuid.uuid4(),
        kind=NotificationKind.TEST,
        summary="TEST · mldiag channel check",
        sent_time=datetime.datetime.now(datetime.UTC),
    )
    return Outgoing(str(uuid.uuid4()), notification, b"{}", timeout=5.0)


def _config(port: int, tls: str) -> dict[str, str]:
    return {
        "smtpHost": "127.0.0.1",
        "smtpPort": str(port),
        "tls": tls,
        "to": "oncall@example.com",
        "from": "mldiag@example.com",
        "username": "mldiag",
    }


async def test_starttls_upgrades_before_the_login_and_the_mail(
    starttls_server: TlsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(starttls_server.cert_file))
    await send_email(_config(starttls_server.port, "starttls"), {"password": PASSWORD}, _outgoing())
    assert starttls_server.mailbox.logins == [("mldiag", True)]  # sent encrypted
    [message] = starttls_server.mailbox.messages
    assert b"mldiag channel check" in message


async def test_auto_uses_starttls_when_the_server_offers_it(
    starttls_server: TlsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(starttls_server.cert_file))
    config = _config(starttls_server.port, "")  # unset: auto
    await send_email(config, {"password": PASSWORD}, _outgoing())
    assert starttls_server.mailbox.logins == [("mldiag", True)]
    assert len(starttls_server.mailbox.messages) == 1


async def test_implicit_tls_speaks_tls_from_the_first_byte(
    smtps_server: TlsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(smtps_server.cert_file))
    await send_email(_config(smtps_server.port, "implicit"), {"password": PASSWORD}, _outgoing())
    assert smtps_server.mailbox.logins == [("mldiag", True)]
    assert len(smtps_server.mailbox.messages) == 1


async def test_a_certificate_nobody_vouches_for_is_refused_and_nothing_is_sent(
    starttls_server: TlsServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "other").mkdir()
    other, _ = _certificate(tmp_path / "other")
    monkeypatch.setenv("SSL_CERT_FILE", str(other))  # trusts another certificate only
    with pytest.raises(DeliveryFailed, match=r"CERTIFICATE_VERIFY_FAILED"):
        await send_email(
            _config(starttls_server.port, "starttls"), {"password": PASSWORD}, _outgoing()
        )
    assert starttls_server.mailbox.logins == []  # the password never left
    assert starttls_server.mailbox.messages == []


async def test_a_wrong_password_is_a_permanent_failure(
    starttls_server: TlsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(starttls_server.cert_file))
    with pytest.raises(DeliveryFailed) as failed:
        await send_email(
            _config(starttls_server.port, "starttls"), {"password": "wrong"}, _outgoing()
        )
    assert failed.value.permanent
    assert starttls_server.mailbox.messages == []

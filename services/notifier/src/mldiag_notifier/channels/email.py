"""EMAIL: one mail through an SMTP server (stdlib smtplib, in a thread)."""

import asyncio
import smtplib
import socket
import ssl
from email.message import EmailMessage

from mldiag_notifier.channels.common import DeliveryFailed, Outgoing
from mldiag_notifier.channels.text import plain_text

TLS_MODES = ("none", "starttls", "implicit")


def _message(config: dict[str, str], outgoing: Outgoing) -> EmailMessage:
    message = EmailMessage()
    message["Subject"] = outgoing.notification.summary[:200]
    message["From"] = config.get("from") or f"mldiag@{socket.gethostname()}"
    message["To"] = ", ".join(to.strip() for to in config["to"].split(",") if to.strip())
    message["X-Mldiag-Delivery"] = outgoing.delivery_id
    message.set_content(plain_text(outgoing.notification))
    return message


def _send(config: dict[str, str], secrets: dict[str, str], outgoing: Outgoing) -> None:
    tls = config.get("tls", "").lower() or "auto"
    if tls not in (*TLS_MODES, "auto"):
        raise DeliveryFailed(f"tls {tls!r}: use none, starttls or implicit", permanent=True)
    port = int(config.get("smtpPort") or (465 if tls == "implicit" else 25))
    host, timeout = config["smtpHost"], outgoing.timeout
    context = ssl.create_default_context()
    smtp: smtplib.SMTP = (
        smtplib.SMTP_SSL(host, port, timeout=timeout, context=context)
        if tls == "implicit"
        else smtplib.SMTP(host, port, timeout=timeout)
    )
    with smtp:
        smtp.ehlo()
        if tls == "starttls" or (tls == "auto" and smtp.has_extn("starttls")):
            smtp.starttls(context=context)
            smtp.ehlo()
        if config.get("username"):
            smtp.login(config["username"], secrets.get("password", ""))
        smtp.send_message(_message(config, outgoing))


async def send_email(config: dict[str, str], secrets: dict[str, str], outgoing: Outgoing) -> None:
    """Send the mail; an SMTP 5xx (refused recipient, bad login) is permanent."""
    try:
        await asyncio.to_thread(_send, config, secrets, outgoing)
    except smtplib.SMTPResponseException as exc:
        text = exc.smtp_error.decode(errors="replace") if isinstance(exc.smtp_error, bytes) else ""
        permanent = exc.smtp_code >= 500
        raise DeliveryFailed(f"SMTP {exc.smtp_code}: {text}", permanent=permanent) from None
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryFailed(
            f"recipients refused: {list(exc.recipients)}", permanent=True
        ) from None
    except ValueError as exc:  # a non-numeric port
        raise DeliveryFailed(str(exc), permanent=True) from None
    except (OSError, smtplib.SMTPException) as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None

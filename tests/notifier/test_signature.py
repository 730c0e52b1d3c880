"""The webhook signature, as a receiver checks it."""

import hashlib
import hmac

from mldiag_notifier.signature import sign, verify

BODY = b'{"kind":"OPENED"}'


def test_the_signature_is_an_hmac_of_the_timestamp_and_body() -> None:
    header = sign("s3cret", BODY, 1_700_000_000)
    expected = hmac.new(b"s3cret", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"


def test_a_receiver_accepts_it_with_the_secret_within_five_minutes() -> None:
    header = sign("s3cret", BODY, 1_700_000_000)
    assert verify("s3cret", header, BODY, now=1_700_000_100)
    assert not verify("other", header, BODY, now=1_700_000_100)
    assert not verify("s3cret", header, BODY + b" ", now=1_700_000_100)
    assert not verify("s3cret", header, BODY, now=1_700_000_301)


def test_a_malformed_header_is_refused() -> None:
    for header in ("", "v1=abc", "t=x,v1=abc", "t=1700000000"):
        assert not verify("s3cret", header, BODY, now=1_700_000_000)

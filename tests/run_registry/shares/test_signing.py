"""Share tokens: a token the key signed reads back; any change to it, or another key, is
refused as ``share_link_invalid``."""

from datetime import UTC, datetime

import pytest

from mldiag_run_registry.shares.errors import ShareLinkInvalid
from mldiag_run_registry.shares.signing import SignedClaims, is_share_token, sign, verify

pytestmark = pytest.mark.unit

KEY = b"k" * 32
CLAIMS = SignedClaims(
    link_id="share-0123456789ab",
    resource="projects/default/locations/local/machineLearningRuns/r1",
    expire_time=datetime(2027, 1, 1, tzinfo=UTC),
)


def test_a_signed_token_reads_back_its_claims() -> None:
    token = sign(KEY, CLAIMS)
    assert is_share_token(token)
    assert verify(KEY, token) == CLAIMS


def test_an_api_token_is_not_a_share_token() -> None:
    assert not is_share_token("mldiag_abc")


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # signature changed
        lambda t: t.replace(".", "x.", 1),  # payload changed
        lambda t: t.split(".")[0],  # signature dropped
        lambda t: t[: len(t) // 2],  # truncated
    ],
)
def test_a_changed_token_is_refused(tamper: object) -> None:
    token = sign(KEY, CLAIMS)
    with pytest.raises(ShareLinkInvalid):
        verify(KEY, tamper(token))  # type: ignore[operator]


def test_another_keys_token_is_refused() -> None:
    with pytest.raises(ShareLinkInvalid):
        verify(b"x" * 32, sign(KEY, CLAIMS))


def test_a_payload_swapped_under_a_real_signature_is_refused() -> None:
    token = sign(KEY, CLAIMS)
    elsewhere = SignedClaims(CLAIMS.link_id, CLAIMS.resource + "x", CLAIMS.expire_time)
    forged = sign(b"x" * 32, elsewhere).split(".")[0] + "." + token.split(".")[1]
    with pytest.raises(ShareLinkInvalid):
        verify(KEY, forged)

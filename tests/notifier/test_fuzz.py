"""schemathesis over the notifier's whole OpenAPI document: no generated request, valid or
not, gets a server error.

The service is served on a port (real NATS and PostgreSQL from the fixtures, its send loop
running). A channel and a rule exist, so half the cases reach them instead of stopping at a
404; calls carry an admin token, so writes go through.
"""

from functools import partial

import pytest
import requests
import schemathesis

from conftest import ApiTokens
from fuzzing import Fuzzer, aimed
from mldiag_notifier.app import create_app
from mldiag_notifier.settings import NotifierSettings
from mldiag_schemas.auth import Role
from support import served_in_thread

pytestmark = pytest.mark.connected


def test_no_operation_answers_a_server_error(
    notifier_settings: NotifierSettings, api_tokens: ApiTokens
) -> None:
    app = create_app(notifier_settings)
    schema = schemathesis.openapi.from_dict(app.openapi())
    headers = api_tokens.headers(Role.ADMIN)
    with served_in_thread(app) as base_url, requests.Session() as session:
        # Nothing listens on port 9: a test send fails fast, as an answer.
        channel = {
            "displayName": "Hook",
            "kind": "WEBHOOK",
            "config": {"url": "http://127.0.0.1:9/"},
        }
        created = session.post(f"{base_url}/v1/notificationChannels", json=channel, headers=headers)
        assert created.status_code == 200, created.text
        rule = {"displayName": "Rule", "channels": ["hook"]}
        created = session.post(f"{base_url}/v1/alertRules", json=rule, headers=headers)
        assert created.status_code == 200, created.text
        known = {"project": "default", "location": "local", "channel_id": "hook", "rule_id": "rule"}
        fuzzer = Fuzzer(session, base_url, headers)
        fuzzer.fuzz_all(schema, partial(aimed, known=known))
    print(fuzzer.summary())  # noqa: T201  # the figures (seen with -s)
    assert fuzzer.failures == []

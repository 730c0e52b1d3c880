"""The harness every service's schemathesis test shares: one settings profile, cases aimed
at resources that exist, and a caller that counts statuses and collects every 5xx.

Each service's ``test_fuzz.py`` seeds what its cases should reach, then runs
:meth:`Fuzzer.fuzz` over its OpenAPI document's operations and asserts
``fuzzer.failures == []``: one run names every server error at once.
"""

import os
from collections import Counter
from collections.abc import Callable, Mapping

import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import Case, GenerationMode
from schemathesis.checks import response_schema_conformance
from schemathesis.core.failures import FailureGroup

EXAMPLES = int(os.environ.get("MLDIAG_FUZZ_EXAMPLES", "50"))
"""Cases per operation; set ``MLDIAG_FUZZ_EXAMPLES`` higher for a longer hunt."""


def fuzz_settings(examples: int = EXAMPLES) -> settings:
    """Fresh, unshrunk runs: a failure is logged whole, nothing replays from a local cache."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )


def aimed(
    operation: schemathesis.APIOperation, known: Mapping[str, str]
) -> st.SearchStrategy[Case]:
    """Positive and negative cases, anywhere and with the path parameters in ``known`` set to
    resources that exist, so bodies and queries get past the lookup to the service."""
    names = {parameter.name for parameter in operation.path_parameters}
    fixed = {name: value for name, value in known.items() if name in names}
    strategies = [
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    ]
    if fixed:
        strategies.append(operation.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed))
        if names - fixed.keys() or operation.body or operation.query:
            negative = operation.as_strategy(GenerationMode.NEGATIVE, path_parameters=fixed)
            strategies.append(negative)
    return st.one_of(strategies)


def _streamed(response: requests.Response) -> bool:
    """An event stream or a plain-text log: read whole, it would never end (or says nothing
    a schema can check)."""
    kind = response.headers.get("content-type", "")
    return kind.startswith(("text/event-stream", "text/plain"))


class Fuzzer:
    """Sends cases to a served app as one caller, counting statuses and keeping every 5xx."""

    def __init__(
        self, session: requests.Session, base_url: str, headers: Mapping[str, str]
    ) -> None:
        self.session = session
        self.base_url = base_url
        self.headers = dict(headers)
        self.conformance = True
        """Check each answer's body against the document (off where a service's answers
        are another program's, such as XProf's passthrough)."""
        self.statuses: Counter[int] = Counter()
        self.failures: list[str] = []
        self.operations: list[str] = []

    def call(self, case: Case) -> None:
        """Send ``case``; a 5xx is recorded with what provoked it, and so is an answer whose
        body is not what the operation's document says it is (its status's schema)."""
        kwargs = case.as_transport_kwargs(base_url=self.base_url, headers=self.headers)
        what = f"{case.method} {case.formatted_path} query={case.query!r} body={case.body!r:.300}"
        # stream: a `:watch` route answers an endless event stream; the status is all we read
        with self.session.request(
            **kwargs, stream=True, timeout=60, allow_redirects=False
        ) as response:
            self.record(response, what)
            if self.conformance and not _streamed(response):
                try:
                    case.validate_response(response, checks=[response_schema_conformance])
                except (AssertionError, FailureGroup) as failure:
                    self.failures.append(
                        f"{what} -> {response.status_code} not as documented: {failure!s:.400}"
                    )

    def record(self, response: requests.Response, what: str) -> None:
        """Count ``response``; keep it as a failure when it is a server error."""
        self.statuses[response.status_code] += 1
        if response.status_code >= 500:
            self.failures.append(f"{what} -> {response.status_code} {response.text:.300}")

    def fuzz(
        self,
        operation: schemathesis.APIOperation,
        strategy: Callable[[schemathesis.APIOperation], st.SearchStrategy[Case]],
        examples: int = EXAMPLES,
    ) -> None:
        """Run ``examples`` cases of ``strategy(operation)``."""
        self.operations.append(f"{operation.method.upper()} {operation.path}")

        @fuzz_settings(examples)
        @given(case=strategy(operation))
        def fuzz(case: Case) -> None:
            self.call(case)

        fuzz()

    def fuzz_all(
        self,
        schema: schemathesis.BaseSchema,
        strategy: Callable[[schemathesis.APIOperation], st.SearchStrategy[Case]],
        examples: int = EXAMPLES,
    ) -> None:
        """Run ``examples`` cases of ``strategy`` over every operation of ``schema``, deletes
        last, so the resources a test seeded live through every other operation."""
        every = [result.ok() for result in schema.get_all_operations()]
        for operation in sorted(every, key=lambda op: (op.method.upper() == "DELETE", op.path)):
            self.fuzz(operation, strategy, examples)

    def summary(self) -> str:
        """The figures a closing note quotes (seen with ``-s``)."""
        return (
            f"fuzz.done operations={len(self.operations)}"
            f" statuses={dict(sorted(self.statuses.items()))}"
        )

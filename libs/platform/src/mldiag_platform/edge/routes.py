"""Which service serves which path: the one route table behind the one base URL.

Users, the SDKs and the CLI know one address. Behind it, a request goes to the service
that serves its path. The same table drives the embedded edge (``mldiag up``, compose),
is what the Kubernetes Ingress (``infra/k8s/base/ingress.yaml``) must say, and is printed
in ``docs/deployment.md``; tests compare all three with it and route every path of every
service's OpenAPI document through it, so they cannot drift apart.

The rules follow ingress-nginx with ``use-regex``: each pattern is a regular expression
matched case-insensitively from the start of the path (``location ~* "^pattern"``), the
longest pattern is tried first, and ``/`` (everything else: the registry's API and the
console) comes last. Writing the edge with nginx's semantics keeps one meaning for both.
"""

import re
from dataclasses import dataclass
from functools import cached_property

RUN_REGISTRY = "run-registry"
INGESTION = "ingestion"
TRAINING = "training"
XPROF_PROVISIONER = "xprof-provisioner"
NOTIFIER = "notifier"

_SCOPE = r"(projects/[^/]+/locations/[^/]+/)?"
"""The optional ``projects/{p}/locations/{l}/`` of a resource path (short and long forms)."""


@dataclass(frozen=True)
class Route:
    """One rule: requests whose path matches ``pattern`` go to ``service``."""

    pattern: str
    """A regular expression, anchored at the start of the path, matched ignoring case."""
    service: str
    """The service (its name in the stack, compose and Kubernetes) that serves the path."""
    what: str
    """What travels this way, for people reading the table."""


ROUTES: tuple[Route, ...] = (
    Route(
        rf"/v1/{_SCOPE}machineLearningRuns/[^/]+"
        r"(/metrics:write|/logs:write|:heartbeat|:reportSignal)$",
        INGESTION,
        "telemetry writes: metric points, log lines, heartbeats, lifecycle signals",
    ),
    Route(r"/v1/(metrics|logs)$", INGESTION, "OTLP/HTTP exporters (gRPC has a port of its own)"),
    Route(r"/v1/xprofInstances(/|$)", XPROF_PROVISIONER, "XProf instances"),
    Route(r"/xprof/", XPROF_PROVISIONER, "XProf, through the provisioner's authenticating proxy"),
    Route(
        rf"/v1/{_SCOPE}(customJobs|hyperparameterTuningJobs|trainingPipelines|models)(/|:|$)",
        TRAINING,
        "training: custom jobs (their replicas and logs), tuning jobs, pipelines, models",
    ),
    Route(r"/upload/v1/", TRAINING, "training: package uploads"),
    Route(
        rf"/v1/{_SCOPE}(notificationChannels|alertRules|notificationDeliveries)(/|:|$)",
        NOTIFIER,
        "alerts: notification channels, alert rules, the delivery history",
    ),
    Route("/", RUN_REGISTRY, "everything else: runs, metrics reads, events, tokens, console"),
)
"""Every rule of the one base URL; order does not matter (longest pattern first applies)."""

SERVICES: tuple[str, ...] = tuple(dict.fromkeys(route.service for route in ROUTES))
"""The services reachable through the base URL."""


@dataclass(frozen=True)
class RouteTable:
    """The rules in the order ingress-nginx tries them, compiled once."""

    routes: tuple[Route, ...] = ROUTES

    @cached_property
    def ordered(self) -> tuple[tuple[re.Pattern[str], Route], ...]:
        """Longest pattern first; equal lengths in reverse lexical order, as nginx sorts."""
        ordered = sorted(self.routes, key=lambda route: route.pattern, reverse=True)
        ordered.sort(key=lambda route: len(route.pattern), reverse=True)
        return tuple((re.compile(route.pattern, re.IGNORECASE), route) for route in ordered)

    def route(self, path: str) -> Route:
        """The rule a request for ``path`` (no query string) follows."""
        for pattern, route in self.ordered:
            if pattern.match(path):
                return route
        raise LookupError(f"no route matches {path!r}")

    def service_for(self, path: str) -> str:
        """The service a request for ``path`` goes to."""
        return self.route(path).service


def routes_markdown(routes: tuple[Route, ...] = ROUTES) -> str:
    """The table as Markdown rows (``docs/deployment.md`` carries exactly this)."""
    lines = ["| path (regular expression, from the start) | service | what |", "|---|---|---|"]
    for route in RouteTable(routes).ordered:
        pattern = route[1].pattern.replace("|", "\\|")
        lines.append(f"| `{pattern}` | {route[1].service} | {route[1].what} |")
    return "\n".join(lines) + "\n"

"""infra/grafana and infra/prometheus against what the services really export.

The exported metrics are collected for real: each service's app is built with its
``create_app`` in a process of its own (prometheus_client's default registry is one per
process, so a metric can be pinned to the service that exports it), and the edge's read from
its own registry. Every PromQL expression of every dashboard (panels and variables) is then
parsed by a small tokenizer into the metric names and labels it selects, and each must be
something a scraped service exports, with the labels it has. The scrape configuration is
checked against docker-compose.yml, and the Kubernetes scrape annotations against the
rendered overlays. No Prometheus or Grafana runs here: docs/observability.md says what that
leaves untested.
"""

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.test_compose import COMPOSE_FILE, EDGE, PLATFORM, Platform
from infra.test_k8s_manifests import K8S, OVERLAYS, Rendered, render
from mldiag_platform.edge.app import METRICS_PATH as EDGE_METRICS_PATH

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = ROOT / "infra" / "grafana" / "dashboards"
PROVISIONING = ROOT / "infra" / "grafana" / "provisioning"
PROMETHEUS = ROOT / "infra" / "prometheus" / "prometheus.yml"
OBSERVABILITY = K8S / "observability"
DATASOURCE_UID = "${DS_PROMETHEUS}"

TARGET_LABELS = frozenset({"job", "instance", "pod"})
"""Labels Prometheus adds to every scraped series (``pod``: the Kubernetes scrape job)."""
SYNTHETIC = {"up": frozenset[str]()}
"""Series Prometheus makes for every target itself, with their own labels."""

# What a family of each type is exposed as (prometheus_client 0.x text format).
_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("", "_count", "_sum", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "unknown": ("",),
}
_EXTRA_LABELS = {"_bucket": frozenset({"le"}), "": frozenset({"quantile"})}

# One interpreter imports what every service shares, then forks a child per service that
# builds that service's app and reports what its registry holds: each child's default
# registry is its own service's, at a fraction of the cost of an interpreter per service.
_COLLECT = """
import importlib, json, os, sys
import fastapi, prometheus_client, pydantic, structlog  # what every service imports anyway
from prometheus_client import REGISTRY


def families(registry):
    found = {}
    # A labelled metric without children yet has no samples, so its label names come from
    # the collector itself (prometheus_client has no public accessor for them).
    for collector in list(registry._collector_to_names):
        describe = getattr(collector, "describe", None)
        for family in (describe() if describe else None) or collector.collect():
            labels = getattr(collector, "_labelnames", ())
            entry = found.setdefault(family.name, {"type": family.type, "labels": []})
            entry["labels"] = sorted(set(entry["labels"]) | set(labels))
    return found


report = {}
for argument in sys.argv[1:]:
    service, module, kind = argument.split("=")
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        try:
            app = importlib.import_module(module).create_app()
            found = families(app.registry if kind == "edge" else REGISTRY)
            os.write(write, json.dumps(found).encode())
            os._exit(0)
        except BaseException as exc:
            os.write(write, json.dumps({"error": repr(exc)}).encode())
            os._exit(1)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        report[service] = json.loads(pipe.read())
    os.waitpid(child, 0)
print(json.dumps(report))
"""


@dataclass(frozen=True)
class Exported:
    """A series name one service exposes on /metrics and the labels it carries."""

    job: str
    labels: frozenset[str]


@pytest.fixture(scope="module")
def exported() -> dict[str, list[Exported]]:
    """Every exposed series name, with the services (scrape jobs) exporting it."""
    arguments = [f"{p.service}={p.module}.app=service" for p in PLATFORM]
    arguments.append(f"{EDGE.service}={EDGE.module}.app=edge")
    collected = subprocess.run(  # fixed argument list
        [sys.executable, "-c", _COLLECT, *arguments],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert collected.returncode == 0, collected.stderr
    series: dict[str, list[Exported]] = {}
    for service, families in json.loads(collected.stdout).items():
        assert "error" not in families, f"{service}: create_app failed: {families['error']}"
        for family, spec in families.items():
            for suffix in _SUFFIXES[spec["type"]]:
                labels = frozenset(spec["labels"]) | _EXTRA_LABELS.get(suffix, frozenset())
                if spec["type"] == "gauge":
                    labels -= {"quantile"}
                series.setdefault(family + suffix, []).append(Exported(service, labels))
    return series


# --- a small PromQL reader ------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<range>\[[^\]]*\])
    | (?P<variable>\$\{?\w+\}?)
    | (?P<duration>(?:\d+(?:ms|[smhdwy]))+\b)
    | (?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)
    | (?P<ident>[A-Za-z_:][A-Za-z0-9_:]*)
    | (?P<matcher>=~|!~|!=|==|=)
    | (?P<punct>[(){},])
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE,
)
GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
KEYWORDS = GROUPING | {"bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}
AGGREGATIONS = frozenset(
    {"sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile"}
    | {"count_values", "group", "limitk", "limit_ratio"}
)


@dataclass
class Selector:
    """One vector selector: a metric name and the labels its matchers name."""

    metric: str
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Query:
    """What one expression selects and the labels it groups by."""

    selectors: list[Selector] = field(default_factory=list)
    grouping: set[str] = field(default_factory=set)


def _tokens(expr: str) -> list[tuple[str, str]]:
    return [
        (match.lastgroup or "", match.group())
        for match in _TOKEN.finditer(expr)
        if match.lastgroup != "space"
    ]


def parse_promql(expr: str) -> Query:
    """The metric names an expression selects (identifiers that are not functions,
    aggregations, keywords or label names) with their matchers' labels, and the labels of
    its ``by``/``without``/``on``/``ignoring`` clauses."""
    tokens = _tokens(expr)
    query = Query()
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ("", "")
        if kind == "ident" and text in GROUPING and following[1] == "(":
            index += 2
            while tokens[index][1] != ")":
                if tokens[index][0] == "ident":
                    query.grouping.add(tokens[index][1])
                index += 1
        elif kind == "ident" and following[1] == "(":
            pass  # a function call
        elif kind == "ident" and (text in KEYWORDS or text in AGGREGATIONS):
            pass
        elif kind == "ident" or (kind == "punct" and text == "{"):
            selector = Selector(text if kind == "ident" else "")
            if kind == "ident" and following[1] == "{":
                index += 1
            if tokens[index][1] == "{":
                index = _matchers(tokens, index + 1, selector)
            if selector.metric == "":
                selector.metric = selector.labels.pop("__name__", "")
            query.selectors.append(selector)
        index += 1
    return query


def _matchers(tokens: list[tuple[str, str]], index: int, selector: Selector) -> int:
    """Read ``label op "value", ...`` up to the closing brace; return its index."""
    while tokens[index][1] != "}":
        if tokens[index][0] == "ident" and tokens[index + 1][0] == "matcher":
            selector.labels[tokens[index][1]] = tokens[index + 2][1].strip("\"'")
            index += 3
        else:
            index += 1
    return index


_LABEL_VALUES = re.compile(r"^label_values\((?P<expr>.*),\s*(?P<label>\w+)\)$")


@dataclass(frozen=True)
class Panel:
    """One expression of a dashboard, named as a reader finds it."""

    where: str
    expr: str
    label: str | None = None
    """The label a ``label_values`` variable reads, if that is what this is."""


def _dashboards() -> list[Path]:
    return sorted(DASHBOARDS.glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # inside collapsed rows


def _expressions(path: Path) -> list[Panel]:
    dashboard = _load(path)
    found = [
        Panel(f"{path.name}: panel {panel['title']!r} ({target['refId']})", target["expr"])
        for panel in _panels(dashboard)
        for target in panel.get("targets", [])
    ]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else query
        values = _LABEL_VALUES.match(text)
        assert values, f"{path.name}: variable {variable['name']} is not label_values(...)"
        where = f"{path.name}: variable {variable['name']!r}"
        found.append(Panel(where, values["expr"], values["label"]))
    return found


def _every_expression() -> list[Panel]:
    return [panel for path in _dashboards() for panel in _expressions(path)]


def _jobs_selected(selector: Selector) -> set[str] | None:
    """The scrape jobs a ``job`` matcher names, or None when any may (or a variable picks)."""
    job = selector.labels.get("job")
    if job is None or "$" in job:
        return None
    return set(job.split("|"))


def _problems(panel: Panel, exported: dict[str, list[Exported]]) -> list[str]:
    query = parse_promql(panel.expr)
    problems: list[str] = []
    if not query.selectors:
        problems.append("selects no metric")
    known_labels: set[str] = set(TARGET_LABELS)
    for selector in query.selectors:
        if selector.metric in SYNTHETIC:
            known_labels |= SYNTHETIC[selector.metric]
            continue
        exporters = exported.get(selector.metric)
        if not exporters:
            problems.append(f"names {selector.metric!r}, which no service exports")
            continue
        jobs = _jobs_selected(selector)
        if jobs is not None:
            exporters = [e for e in exporters if e.job in jobs]
            if not exporters:
                problems.append(f"selects {selector.metric!r} from {sorted(jobs)}: not theirs")
                continue
        labels = set(TARGET_LABELS).union(*(e.labels for e in exporters))
        known_labels |= labels
        unknown = set(selector.labels) - labels
        if unknown:
            problems.append(f"matches {sorted(unknown)} on {selector.metric!r}: no such label")
    unknown_grouping = query.grouping - known_labels
    if unknown_grouping:
        problems.append(f"groups by {sorted(unknown_grouping)}: no selected metric has them")
    if panel.label is not None and panel.label not in known_labels:
        problems.append(f"reads label {panel.label!r}, which its metric does not have")
    return [f"{panel.where} {problem}: {panel.expr}" for problem in problems]


# --- the tokenizer itself -------------------------------------------------------------------


def test_the_reader_finds_metrics_and_skips_functions_keywords_labels_and_variables() -> None:
    query = parse_promql(
        'histogram_quantile(0.95, sum by (job, le) (rate(a_seconds_bucket{job=~"$service",'
        ' route!~"/healthz|by"}[$__rate_interval]))) / on (job) group_left'
        ' max without (instance) (b_total offset 5m) > bool 2 and {__name__="c"}'
    )
    assert [(s.metric, s.labels) for s in query.selectors] == [
        ("a_seconds_bucket", {"job": "$service", "route": "/healthz|by"}),
        ("b_total", {}),
        ("c", {}),
    ]
    assert query.grouping == {"job", "le", "instance"}


def test_an_unknown_metric_label_or_job_is_reported_with_its_panel() -> None:
    exported = {"known_total": [Exported("ingestion", frozenset({"route"}))]}
    assert _problems(Panel("x.json: panel 'P' (A)", "rate(known_total[5m])"), exported) == []
    [missing] = _problems(Panel("x.json: panel 'P' (A)", "rate(unknown_total[5m])"), exported)
    assert missing.startswith("x.json: panel 'P' (A) names 'unknown_total', which no service")
    [label] = _problems(Panel("p", 'sum by (route) (known_total{durable="d"})'), exported)
    assert "matches ['durable']" in label
    [job] = _problems(Panel("p", 'known_total{job="notifier"}'), exported)
    assert "from ['notifier']: not theirs" in job
    [grouping] = _problems(Panel("p", "sum by (kind) (known_total)"), exported)
    assert "groups by ['kind']" in grouping


# --- the dashboards -------------------------------------------------------------------------


def test_there_is_a_dashboard_for_each_area() -> None:
    titles = {_load(path)["title"] for path in _dashboards()}
    assert titles == {
        "mldiag / Ingest",
        "mldiag / Bus",
        "mldiag / HTTP",
        "mldiag / Training and XProf",
        "mldiag / Notifier",
    }


def test_every_expression_names_only_what_the_services_export(
    exported: dict[str, list[Exported]],
) -> None:
    expressions = _every_expression()
    assert len(expressions) > 40
    problems = [problem for panel in expressions for problem in _problems(panel, exported)]
    assert problems == [], "\n".join(problems)


def test_the_metrics_the_issue_asks_for_are_on_a_dashboard() -> None:
    used = {
        selector.metric
        for panel in _every_expression()
        for selector in parse_promql(panel.expr).selectors
    }
    asked = {
        "mldiag_ingest_points_total",  # ingest rate
        "mldiag_http_request_bytes_total",
        "mldiag_bus_consumer_pending_messages",  # consumer lag per durable
        "mldiag_bus_messages_retried_total",
        "mldiag_bus_messages_dead_lettered_total",
        "mldiag_http_request_seconds_bucket",  # latency per route
        "mldiag_http_requests_total",
        "mldiag_xprof_instances_active",
        "mldiag_training_jobs",  # jobs by state
        "mldiag_training_replicas",
        "mldiag_training_executors_live",
        "mldiag_notifier_attempts_total",
    }
    assert asked <= used


@pytest.mark.parametrize("path", _dashboards(), ids=lambda path: path.name)
def test_dashboards_are_provisioning_ready(path: Path) -> None:
    dashboard = _load(path)
    assert re.fullmatch(r"mldiag-[a-z-]+", dashboard["uid"])
    assert "id" not in dashboard, "provisioned dashboards get their id from Grafana"
    [datasource] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert (datasource["name"], datasource["query"]) == ("DS_PROMETHEUS", "prometheus")
    panels = list(_panels(dashboard))
    assert len({panel["id"] for panel in panels}) == len(panels)
    for panel in panels:
        where = f"{path.name}: {panel['title']!r}"
        assert panel["datasource"] == {"type": "prometheus", "uid": DATASOURCE_UID}, where
        assert panel["description"] is not None, where
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, where
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DATASOURCE_UID, where
            assert target["expr"].count("(") == target["expr"].count(")"), where


def test_grafana_provisioning_loads_these_dashboards_from_prometheus() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())
    grafana = compose["services"]["grafana"]
    mounts = {
        volume.split(":")[1]: volume.split(":")[0] for volume in grafana["volumes"] if ":" in volume
    }
    assert mounts["/etc/grafana/provisioning"] == "./infra/grafana/provisioning"
    [provider] = yaml.safe_load((PROVISIONING / "dashboards" / "mldiag.yaml").read_text())[
        "providers"
    ]
    assert mounts[provider["options"]["path"]] == "./infra/grafana/dashboards"
    [source] = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "prometheus" in grafana["depends_on"]


# --- the scrape configurations --------------------------------------------------------------


def _compose_port(service: dict[str, Any], platform: Platform) -> int:
    return int(service["environment"][f"{platform.env_prefix}PORT"])


def test_every_scrape_target_is_a_compose_service_on_its_port() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    jobs = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"]
    by_name = {platform.service: platform for platform in (*PLATFORM, EDGE)}
    scraped: set[str] = set()
    for job in jobs:
        [config] = job["static_configs"]
        for target in config["targets"]:
            host, _, port = target.partition(":")
            assert host in compose, f"{job['job_name']}: {host} is no compose service"
            assert host == job["job_name"], "the dashboards read the service from `job`"
            assert int(port) == _compose_port(compose[host], by_name[host]), target
            scraped.add(host)
        expected_path = EDGE_METRICS_PATH if job["job_name"] == EDGE.service else "/metrics"
        assert job.get("metrics_path", "/metrics") == expected_path, job["job_name"]
    assert scraped == set(by_name), "every service's /metrics is scraped"


def test_prometheus_and_grafana_start_only_with_the_observability_profile() -> None:
    compose = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    for name in ("prometheus", "grafana"):
        assert compose[name]["profiles"] == ["observability"], name
        for volume in compose[name]["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which is missing"
    prometheus_config = compose["prometheus"]["volumes"][0].split(":")
    assert prometheus_config[:2] == [
        "./infra/prometheus/prometheus.yml",
        "/etc/prometheus/prometheus.yml",
    ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_pod_carries_scrape_annotations_for_its_http_port(overlay: str) -> None:
    rendered = Rendered(overlay, render(K8S / "overlays" / overlay))
    for platform in PLATFORM:
        template = rendered.get("Deployment", platform.service)["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        [http] = [p for p in rendered.service_container(platform)["ports"] if p["name"] == "http"]
        assert annotations["prometheus.io/scrape"] == "true", platform.service
        assert annotations["prometheus.io/port"] == str(http["containerPort"]), platform.service
        assert annotations["prometheus.io/path"] == "/metrics", platform.service


def test_the_pod_monitor_selects_every_service_by_its_http_port() -> None:
    kustomization = yaml.safe_load((OBSERVABILITY / "kustomization.yaml").read_text())
    [monitor] = [
        yaml.safe_load((OBSERVABILITY / resource).read_text())
        for resource in kustomization["resources"]
    ]
    assert monitor["kind"] == "PodMonitor"
    assert monitor["spec"]["jobLabel"] == "app.kubernetes.io/name"
    [expression] = monitor["spec"]["selector"]["matchExpressions"]
    assert set(expression["values"]) == {platform.service for platform in PLATFORM}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("http", "/metrics")
    scrape = yaml.safe_load((OBSERVABILITY / "prometheus-scrape.yml").read_text())
    [job] = scrape["scrape_configs"]
    relabelled = {rule.get("target_label") for rule in job["relabel_configs"]}
    assert {"__metrics_path__", "__address__", "job"} <= relabelled

"""infra/k8s against Kubernetes' schemas and against the code it runs, without a cluster.

The overlays are rendered by a small kustomize written here (resources, namespace, images,
replicas, strategic-merge and JSON patches: what the files use), compared with `kubectl
kustomize` when a kubectl is on PATH. Every object is validated with kubernetes-validate;
the CloudNativePG Cluster, a custom resource it has no schema for, is checked by hand. Then
the cross-references an operator would trip over: every service has a Deployment and a
Service, every MLDIAG_* variable is a settings field and the settings parse, probes hit
ports the containers expose, every ConfigMap and Secret key referenced exists (dev) or is
documented (production), the Ingress routes every path of every service's app to that
service, the NetworkPolicies keep NATS, PostgreSQL and XProf to who needs them, and the
NATS server accepts its rendered configuration.
"""

import asyncio
import copy
import importlib
import importlib.util
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import kubernetes_validate
import pytest
import yaml
from fastapi import FastAPI
from starlette.routing import Match

from infra.test_compose import (
    PLATFORM,
    Platform,
    settings_class_of,
    settings_env_names,
    settings_from,
)
from mldiag_platform import substrate
from mldiag_platform.bus import connect_bus
from mldiag_platform.edge.routes import ROUTES, RouteTable
from mldiag_platform.settings import NatsSettings
from mldiag_schemas.bus import ALL_STREAMS
from support import free_port

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "infra" / "k8s"
OVERLAYS = ("dev", "production")
DOCS = ROOT / "docs" / "kubernetes.md"
DEV_SECRETS_SCRIPT = K8S / "overlays" / "dev" / "make_secrets.py"

# The oldest Kubernetes the manifests are meant for, and the newest kubernetes-validate knows.
KUBERNETES_VERSIONS = ("1.33.0", kubernetes_validate.utils.latest_version())
CNPG_API = "postgresql.cnpg.io/v1"
CLUSTER_SCOPED = {"Namespace"}
POD_OWNERS = {"Deployment", "StatefulSet", "Job"}
# Variables a container may set that are not mldiag settings, each for a reason.
NON_SETTINGS_ENV = {
    "STORAGE_EMULATOR_HOST",  # google-cloud-storage's, for the dev overlay's emulator
    "HOME",  # XProf's caches, off the read-only root filesystem
}
# Services that keep more than one replica in production; the provisioner's XProf instances
# live in its pod, so it runs one.
SCALED_OUT = {"run-registry", "ingestion", "event-detector", "analyzer", "notifier"}

Object = dict[str, Any]


# --- a kustomize for these files ------------------------------------------------------------


def render(directory: Path) -> list[Object]:
    """What `kubectl kustomize directory` prints, for the features these files use."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    understood = {"apiVersion", "kind", "namespace", "resources", "images", "replicas", "patches"}
    assert set(kustomization) <= understood, (
        f"{directory}: this renderer does not know {set(kustomization) - understood}"
    )
    objects: list[Object] = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            objects += render(path)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for patch in kustomization.get("patches", []):
        _patch(objects, directory, patch)
    _transform(objects, kustomization)
    return objects


def _patch(objects: list[Object], directory: Path, patch: dict[str, Any]) -> None:
    if "path" in patch:
        for doc in yaml.safe_load_all((directory / patch["path"]).read_text()):
            target = _one(objects, doc["kind"], doc["metadata"]["name"])
            target.update(_merge(target, doc))
    else:
        target = _one(objects, patch["target"]["kind"], patch["target"]["name"])
        for operation in yaml.safe_load(patch["patch"]):
            _json_patch(target, operation)


def _transform(objects: list[Object], kustomization: dict[str, Any]) -> None:
    """The kustomization's images, replicas and namespace, after the patches."""
    for image in kustomization.get("images", []):
        for obj in objects:
            for container in _containers(obj):
                if container["image"].split(":")[0].split("@")[0] == image["name"]:
                    container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    for replicas in kustomization.get("replicas", []):
        _one(objects, None, replicas["name"])["spec"]["replicas"] = replicas["count"]
    if namespace := kustomization.get("namespace"):
        for obj in objects:
            if obj["kind"] not in CLUSTER_SCOPED:
                obj["metadata"]["namespace"] = namespace


def _one(objects: list[Object], kind: str | None, name: str) -> Object:
    found = [
        obj
        for obj in objects
        if obj["metadata"]["name"] == name
        and (obj["kind"] == kind if kind else obj["kind"] in POD_OWNERS)
    ]
    assert len(found) == 1, f"{kind} {name}: {len(found)} objects match"
    return found[0]


def _merge(base: Any, patch: Any) -> Any:
    """A strategic merge: maps merge; lists of named items merge by name; the rest replaces."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    if (
        isinstance(base, list)
        and isinstance(patch, list)
        and all(isinstance(item, dict) and "name" in item for item in [*base, *patch])
    ):
        # As kustomize orders them: items new to the list first, then the merged old ones.
        by_name = {item["name"]: item for item in patch}
        old_names = {item["name"] for item in base}
        return [copy.deepcopy(item) for item in patch if item["name"] not in old_names] + [
            _merge(item, by_name[item["name"]]) if item["name"] in by_name else item
            for item in base
        ]
    return copy.deepcopy(patch)


def _json_patch(target: Object, operation: dict[str, Any]) -> None:
    *parents, last = [
        part.replace("~1", "/").replace("~0", "~") for part in operation["path"].split("/")[1:]
    ]
    node: Any = target
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert operation["op"] in ("add", "replace"), operation
    if operation["op"] == "replace":
        assert (int(last) < len(node)) if isinstance(node, list) else last in node, operation
    if isinstance(node, list):
        node.insert(len(node) if last == "-" else int(last), operation["value"])
        if operation["op"] == "replace":
            del node[int(last) + 1]
    else:
        node[last] = operation["value"]


# --- reading the rendered objects -----------------------------------------------------------


def _pod_spec(obj: Object) -> Object | None:
    if obj["kind"] in POD_OWNERS:
        spec: Object = obj["spec"]["template"]["spec"]
        return spec
    return None


def _containers(obj: Object) -> list[Object]:
    spec = _pod_spec(obj)
    if spec is None:
        return []
    return [*spec.get("initContainers", []), *spec["containers"]]


def _by_kind(objects: list[Object], kind: str) -> dict[str, Object]:
    return {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == kind}


def _env_values(container: Object, objects: list[Object]) -> dict[str, str | None]:
    """The container's environment; None where a value comes from something not rendered."""
    config_maps = _by_kind(objects, "ConfigMap")
    secrets = _by_kind(objects, "Secret")
    env: dict[str, str | None] = {}
    for source in container.get("envFrom", []):
        env.update(config_maps[source["configMapRef"]["name"]]["data"])
    for variable in container.get("env", []):
        value_from = variable.get("valueFrom", {})
        if "value" in variable:
            env[variable["name"]] = variable["value"]
        elif ref := value_from.get("configMapKeyRef"):
            env[variable["name"]] = config_maps[ref["name"]]["data"][ref["key"]]
        elif (ref := value_from.get("secretKeyRef")) and ref["name"] in secrets:
            env[variable["name"]] = secrets[ref["name"]].get("stringData", {}).get(ref["key"])
        else:
            env[variable["name"]] = None
    return env


def _secret_references(objects: list[Object]) -> set[tuple[str, str | None, bool]]:
    """(Secret, key or None for the whole Secret, optional) for every reference made."""
    references: set[tuple[str, str | None, bool]] = set()
    for obj in objects:
        for container in _containers(obj):
            for variable in container.get("env", []):
                if ref := variable.get("valueFrom", {}).get("secretKeyRef"):
                    references.add((ref["name"], ref["key"], bool(ref.get("optional"))))
        for volume in (_pod_spec(obj) or {}).get("volumes", []):
            if secret := volume.get("secret"):
                for item in secret.get("items", [{"key": None}]):
                    references.add((secret["secretName"], item["key"], False))
    return references


@dataclass(frozen=True)
class Rendered:
    overlay: str
    objects: list[Object]

    def get(self, kind: str, name: str) -> Object:
        return _one(self.objects, kind, name)

    def service_container(self, platform: Platform) -> Object:
        containers = self.get("Deployment", platform.service)["spec"]["template"]["spec"][
            "containers"
        ]
        assert len(containers) == 1
        container: Object = containers[0]
        return container


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> Rendered:
    return Rendered(request.param, render(K8S / "overlays" / request.param))


@pytest.fixture(scope="module")
def dev() -> Rendered:
    return Rendered("dev", render(K8S / "overlays" / "dev"))


@pytest.fixture(scope="module")
def production() -> Rendered:
    return Rendered("production", render(K8S / "overlays" / "production"))


by_service = pytest.mark.parametrize("platform", PLATFORM, ids=lambda p: p.service)


# --- the renderer and the schemas -----------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_renderer_agrees_with_kubectl_kustomize(overlay: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl on PATH: the overlays are checked with this file's renderer only")
    printed = subprocess.run(
        [kubectl, "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout

    def keyed(objects: list[Object]) -> dict[tuple[str, str, str], Object]:
        return {
            (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]): obj
            for obj in objects
        }

    theirs = keyed([doc for doc in yaml.safe_load_all(printed) if doc])
    ours = keyed(render(K8S / "overlays" / overlay))
    assert sorted(ours) == sorted(theirs)
    for key, obj in ours.items():
        assert obj == theirs[key], f"{key} renders differently from kubectl kustomize"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_is_valid_kubernetes(rendered: Rendered, version: str) -> None:
    checked = 0
    for obj in rendered.objects:
        if obj["apiVersion"] == CNPG_API:
            continue  # a custom resource: test_postgres_cluster checks it
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{obj['kind']} {obj['metadata']['name']}: {error.message}")
        checked += 1
    assert checked > 30


def test_every_object_is_in_the_namespace_and_labelled(rendered: Rendered) -> None:
    for obj in rendered.objects:
        name = f"{obj['kind']} {obj['metadata']['name']}"
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") == "mldiag", name
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "mldiag", name


# --- the services ---------------------------------------------------------------------------


def test_every_service_in_the_repository_is_deployed(rendered: Rendered) -> None:
    in_repository = {path.name for path in (ROOT / "services").iterdir() if path.is_dir()}
    assert in_repository == {platform.service for platform in PLATFORM}
    deployments = _by_kind(rendered.objects, "Deployment")
    services = _by_kind(rendered.objects, "Service")
    for name in in_repository:
        assert name in deployments, f"{name} has no Deployment"
        assert name in services, f"{name} has no Service"


@by_service
def test_deployment_runs_the_service_module(rendered: Rendered, platform: Platform) -> None:
    container = rendered.service_container(platform)
    assert container["command"] == ["python", "-m", platform.module]
    assert importlib.util.find_spec(f"{platform.module}.__main__") is not None
    # One image for every service, as in docker-compose.yml.
    assert container["image"] == rendered.service_container(PLATFORM[0])["image"]


@by_service
def test_every_mldiag_variable_is_a_settings_field(rendered: Rendered, platform: Platform) -> None:
    valid = settings_env_names(settings_class_of(platform))
    env = _env_values(rendered.service_container(platform), rendered.objects)
    unknown = sorted(
        name
        for name in env
        if (name.startswith("MLDIAG_") and name not in valid)
        or (not name.startswith("MLDIAG_") and name not in NON_SETTINGS_ENV)
    )
    assert not unknown, f"{platform.service} sets variables nothing reads: {unknown}"


@by_service
def test_settings_parse_and_listen_where_probed_and_served(
    dev: Rendered, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The dev overlay carries example Secrets, so every value is known there.
    container = dev.service_container(platform)
    env = _env_values(container, dev.objects)
    missing = sorted(name for name, value in env.items() if value is None)
    assert not missing, f"{platform.service}: no value for {missing}"
    settings: Any = settings_from(
        platform, {name: str(value) for name, value in env.items()}, monkeypatch
    )
    assert settings.host == "0.0.0.0"
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports["http"] == settings.port == platform.port
    assert settings.log.format == "json"
    assert settings.nats.stream_replicas == dev.get("StatefulSet", "nats")["spec"]["replicas"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe
    service = dev.get("Service", platform.service)
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= set(ports)


def test_ingestion_serves_otlp_on_the_ports_its_services_name(
    dev: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = next(p for p in PLATFORM if p.service == "ingestion")
    container = dev.service_container(platform)
    env = {name: str(value) for name, value in _env_values(container, dev.objects).items()}
    settings: Any = settings_from(platform, env, monkeypatch)
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert settings.otlp_enabled
    assert ports["otlp-grpc"] == settings.otlp_grpc_port
    assert ports["otlp-http"] == settings.otlp_http_port
    otlp = dev.get("Service", "ingestion-otlp")
    assert otlp["spec"]["selector"] == dev.get("Service", "ingestion")["spec"]["selector"]
    assert {p["targetPort"] for p in otlp["spec"]["ports"]} == {"otlp-grpc", "otlp-http"}


def test_every_probe_names_a_port_its_container_exposes(rendered: Rendered) -> None:
    probes = 0
    for obj in rendered.objects:
        for container in _containers(obj):
            exposed = {p.get("name") for p in container.get("ports", [])} | {
                p["containerPort"] for p in container.get("ports", [])
            }
            for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe := container.get(kind):
                    probes += 1
                    assert probe["httpGet"]["port"] in exposed, (
                        f"{obj['metadata']['name']}: {kind} probes a port it does not expose"
                    )
    assert probes >= 3 * (len(PLATFORM) + 1)


def test_every_pod_is_locked_down_and_sized(rendered: Rendered) -> None:
    # What the namespace's "restricted" Pod Security Standard enforces, plus our own rules:
    # a read-only root filesystem and requests and limits on every container.
    for obj in rendered.objects:
        spec = _pod_spec(obj)
        if spec is None:
            continue
        name = obj["metadata"]["name"]
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec.get("automountServiceAccountToken") is False, name
        for container in _containers(obj):
            security = container["securityContext"]
            assert security["allowPrivilegeEscalation"] is False, name
            assert security["readOnlyRootFilesystem"] is True, name
            assert security["capabilities"]["drop"] == ["ALL"], name
            resources = container["resources"]
            for section in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources[section]), f"{name}: {section}"
    namespace = rendered.get("Namespace", "mldiag")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_replicas_and_disruption_budgets(rendered: Rendered) -> None:
    budgets = _by_kind(rendered.objects, "PodDisruptionBudget")
    for platform in PLATFORM:
        deployment = rendered.get("Deployment", platform.service)
        replicas = deployment["spec"]["replicas"]
        if rendered.overlay == "production":
            assert replicas == (2 if platform.service in SCALED_OUT else 1), platform.service
        # maxUnavailable never blocks a drain, even with a single replica.
        assert budgets[platform.service]["spec"] == {
            "maxUnavailable": 1,
            "selector": deployment["spec"]["selector"],
        }
    assert budgets["nats"]["spec"]["maxUnavailable"] == 1


def test_xprof_instances_fit_in_the_pod(dev: Rendered, monkeypatch: pytest.MonkeyPatch) -> None:
    platform = next(p for p in PLATFORM if p.service == "xprof-provisioner")
    container = dev.service_container(platform)
    env = {name: str(value) for name, value in _env_values(container, dev.objects).items()}
    settings: Any = settings_from(platform, env, monkeypatch)
    limit = _bytes(container["resources"]["limits"]["memory"])
    assert 0 < settings.memory_limit_bytes * settings.max_instances < limit
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert str(settings.work_dir) in mounts, "the work dir must be writable (a volume)"
    assert env["HOME"] in mounts


def _bytes(quantity: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return int(quantity.removesuffix(suffix)) * factor
    return int(quantity)


# --- ConfigMaps and Secrets -----------------------------------------------------------------


def test_every_config_map_key_referenced_exists(rendered: Rendered) -> None:
    config_maps = _by_kind(rendered.objects, "ConfigMap")
    for obj in rendered.objects:
        for container in _containers(obj):
            for source in container.get("envFrom", []):
                assert source["configMapRef"]["name"] in config_maps
            for variable in container.get("env", []):
                if ref := variable.get("valueFrom", {}).get("configMapKeyRef"):
                    assert ref["key"] in config_maps[ref["name"]]["data"], ref
        for volume in (_pod_spec(obj) or {}).get("volumes", []):
            if config_map := volume.get("configMap"):
                assert config_map["name"] in config_maps


def test_shared_environment_is_read_by_every_service(dev: Rendered) -> None:
    # mldiag-env goes to every service whole, so each of its keys must mean something to all.
    shared = dev.get("ConfigMap", "mldiag-env")["data"]
    for platform in PLATFORM:
        assert set(shared) <= settings_env_names(settings_class_of(platform)), platform.service


def test_production_carries_no_secret_and_documents_every_one_it_needs(
    production: Rendered,
) -> None:
    assert not _by_kind(production.objects, "Secret"), "Secrets are made by the operator"
    documented = DOCS.read_text()
    for name, key, _optional in _secret_references(production.objects):
        assert f"`{name}`" in documented, f"docs/kubernetes.md does not name Secret {name}"
        if key is not None:
            assert f"`{key}`" in documented, f"docs/kubernetes.md does not name {name}/{key}"


def test_dev_secrets_hold_every_key_referenced(dev: Rendered) -> None:
    secrets = _by_kind(dev.objects, "Secret")
    made_by_cnpg = {"mldiag-postgres-superuser"}
    for name, key, optional in _secret_references(dev.objects):
        if name in made_by_cnpg:
            continue
        assert name in secrets, f"the dev overlay has no Secret {name}"
        assert secrets[name]["metadata"]["labels"]["mldiag.io/dev-only"] == "true"
        if key is not None and not optional:
            assert key in secrets[name]["stringData"], f"{name} has no key {key}"


def test_dev_secrets_are_what_the_generator_makes() -> None:
    # The same Secrets `mldiag substrate generate --format k8s` prints, with fixed passwords.
    spec = importlib.util.spec_from_file_location("make_secrets", DEV_SECRETS_SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert (DEV_SECRETS_SCRIPT.parent / "secrets.dev.yaml").read_text() == script.dev_secrets(), (
        f"secrets.dev.yaml is stale: run .venv/bin/python {DEV_SECRETS_SCRIPT.relative_to(ROOT)}"
    )


def test_credentials_follow_the_one_model(rendered: Rendered) -> None:
    # MLDIAG_NATS_USER is the service; its password and database URL come from
    # mldiag-credentials under <service>-nats-password and <service>-database-url.
    for platform in PLATFORM:
        env = {v["name"]: v for v in rendered.service_container(platform)["env"]}
        assert env["MLDIAG_NATS_USER"]["value"] == platform.service
        assert env["MLDIAG_NATS_PASSWORD"]["valueFrom"]["secretKeyRef"] == {
            "name": "mldiag-credentials",
            "key": f"{platform.service}-nats-password",
        }
        if "MLDIAG_DATABASE_URL" in env:
            assert env["MLDIAG_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
                "name": "mldiag-credentials",
                "key": f"{platform.service}-database-url",
            }


# --- PostgreSQL -----------------------------------------------------------------------------


def test_postgres_cluster(rendered: Rendered) -> None:
    # kubernetes-validate has no schema for CloudNativePG's Cluster: its required fields,
    # by hand, after https://cloudnative-pg.io/docs/ (API reference, Cluster).
    cluster = rendered.get("Cluster", "mldiag-postgres")
    assert cluster["apiVersion"] == CNPG_API
    spec = cluster["spec"]
    assert isinstance(spec["instances"], int)
    assert spec["instances"] == (3 if rendered.overlay == "production" else 1)
    assert re.fullmatch(r"\d+(Mi|Gi|Ti)", spec["storage"]["size"])
    assert re.fullmatch(r"[\w./-]+:\d+[\w.-]*", spec["imageName"])
    initdb = spec["bootstrap"]["initdb"]
    assert (initdb["database"], initdb["owner"]) == (substrate.POSTGRES_DATABASE, "mldiag")
    # The roles Job logs in as the superuser, whose Secret the operator makes.
    assert spec["enableSuperuserAccess"] is True
    job = rendered.get("Job", "mldiag-postgres-roles")["spec"]["template"]["spec"]
    (container,) = job["containers"]
    env = {v["name"]: v for v in container["env"]}
    assert env["PGHOST"]["value"] == f"{cluster['metadata']['name']}-rw"
    assert env["PGDATABASE"]["value"] == initdb["database"]
    for name, key in (("PGUSER", "username"), ("PGPASSWORD", "password")):
        assert env[name]["valueFrom"]["secretKeyRef"] == {
            "name": f"{cluster['metadata']['name']}-superuser",
            "key": key,
        }
    (volume,) = job["volumes"]
    assert volume["secret"]["secretName"] == substrate.CREDENTIALS_SECRET
    (item,) = volume["secret"]["items"]
    (mount,) = container["volumeMounts"]
    assert container["command"][-1] == f"{mount['mountPath']}/{item['path']}"
    assert container["image"] == spec["imageName"], "psql of the server's own version"


def test_database_urls_name_the_cluster_and_the_services_role(dev: Rendered) -> None:
    cluster = dev.get("Cluster", "mldiag-postgres")
    credentials = dev.get("Secret", substrate.CREDENTIALS_SECRET)["stringData"]
    users = set()
    for platform in PLATFORM:
        url = _env_values(dev.service_container(platform), dev.objects).get("MLDIAG_DATABASE_URL")
        if url is None:
            continue
        parsed = urlparse(url)
        # The read-write Service CloudNativePG makes for the primary.
        assert parsed.hostname == f"{cluster['metadata']['name']}-rw"
        assert parsed.port == 5432
        assert parsed.path.lstrip("/") == cluster["spec"]["bootstrap"]["initdb"]["database"]
        assert parsed.username == substrate.database_role(platform.service)
        # The roles Job's SQL makes that role with that password.
        assert f"'{parsed.username}'" in credentials["postgres-roles.sql"]
        assert f"PASSWORD '{parsed.password}'" in credentials["postgres-roles.sql"]
        users.add(platform.service)
    assert users == substrate.DATABASE_USERS


# --- NATS -----------------------------------------------------------------------------------


def test_services_list_every_nats_node(rendered: Rendered) -> None:
    nats = rendered.get("StatefulSet", "nats")
    headless = rendered.get("Service", nats["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    client_port = next(p["port"] for p in headless["spec"]["ports"] if p["name"] == "client")
    nodes = [f"nats-{i}.{headless['metadata']['name']}" for i in range(nats["spec"]["replicas"])]
    shared = rendered.get("ConfigMap", "mldiag-env")["data"]
    assert shared["MLDIAG_NATS_URL"].split(",") == [f"nats://{n}:{client_port}" for n in nodes]
    assert int(shared["MLDIAG_NATS_STREAM_REPLICAS"]) == nats["spec"]["replicas"] == 3
    config = rendered.get("ConfigMap", "nats-config")["data"]["nats.conf"]
    cluster_port = next(p["port"] for p in headless["spec"]["ports"] if p["name"] == "cluster")
    assert re.findall(r"nats://([\w.-]+):(\d+)", config) == [(n, str(cluster_port)) for n in nodes]


@pytest.fixture
def nats_server() -> str:
    try:
        from mldiag.local.nats import find_nats_server  # noqa: PLC0415

        return find_nats_server()
    except Exception as error:  # noqa: BLE001  # any reason means: no server to ask
        pytest.skip(f"no nats-server to check the configuration with: {error}")


def _nats_files(rendered: Rendered, root: Path, auth_conf: str) -> Path:
    """The rendered config and auth.conf laid out where the StatefulSet mounts them."""
    nats = rendered.get("StatefulSet", "nats")
    container = nats["spec"]["template"]["spec"]["containers"][0]
    volumes = {v["name"]: v for v in nats["spec"]["template"]["spec"]["volumes"]}
    config_path = Path(container["command"][container["command"].index("--config") + 1])
    for mount in container["volumeMounts"]:
        volume = volumes.get(mount["name"], {})
        target = root / mount["mountPath"].lstrip("/")
        target.mkdir(parents=True, exist_ok=True)
        if "configMap" in volume:
            for key, text in rendered.get("ConfigMap", volume["configMap"]["name"])["data"].items():
                (target / key).write_text(text)
        if "secret" in volume:
            for item in volume["secret"]["items"]:
                (target / item["path"]).write_text(auth_conf)
    return root / config_path.relative_to("/")


def _nats_config_test(server: str, config: Path, root: Path) -> subprocess.CompletedProcess[str]:
    # The config's absolute paths (the store dir, the pid file) are the pod's; nats-server -t
    # only parses and checks, so rewrite them under root.
    text = re.sub(r"(store_dir|pid_file): /", rf"\1: {root}/", config.read_text())
    config.write_text(text)
    return subprocess.run(
        [server, "-t", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "POD_NAME": "nats-0"},
    )


def test_nats_accepts_its_configuration_with_the_dev_users(
    dev: Rendered, nats_server: str, tmp_path: Path
) -> None:
    auth_conf = dev.get("Secret", "mldiag-nats-auth")["stringData"]["auth.conf"]
    config = _nats_files(dev, tmp_path, auth_conf)
    result = _nats_config_test(nats_server, config, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # Every service's user and password are in the authorization block.
    for platform in PLATFORM:
        env = _env_values(dev.service_container(platform), dev.objects)
        user, password = env["MLDIAG_NATS_USER"], env["MLDIAG_NATS_PASSWORD"]
        entry = rf'"user": "{re.escape(str(user))}",\s*"password": "{re.escape(str(password))}"'
        assert re.search(entry, auth_conf), f"{user} is not in auth.conf with its password"


def test_nats_refuses_its_configuration_without_auth_conf(
    dev: Rendered, nats_server: str, tmp_path: Path
) -> None:
    # The include really is read: a broken auth.conf fails the check above's command.
    config = _nats_files(dev, tmp_path, "authorization { users: [ {user: a, password:")
    assert _nats_config_test(nats_server, config, tmp_path).returncode != 0


# --- the Ingress ----------------------------------------------------------------------------


def _app(platform: Platform) -> FastAPI:
    module = importlib.import_module(f"{platform.module}.app")
    app: FastAPI = module.create_app()
    return app


@pytest.fixture(scope="module")
def apps() -> dict[str, FastAPI]:
    return {platform.service: _app(platform) for platform in PLATFORM}


def _serves(app: FastAPI, method: str, path: str) -> bool:
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
    return any(route.matches(scope)[0] is Match.FULL for route in app.routes)


def _requests(apps: dict[str, FastAPI]) -> Iterator[tuple[str, str, str]]:
    """(service, method, concrete path) for every operation of every service's API."""
    for service, app in apps.items():
        for template, operations in app.openapi()["paths"].items():
            path = re.sub(r"\{[^}]+\}", "some-id", template)
            for method in operations:
                yield service, method.upper(), path
    # Outside the OpenAPI documents: the console, and XProf's pages behind the proxy.
    yield "run-registry", "GET", "/console/"
    yield "run-registry", "GET", "/console/assets/index.js"
    yield "xprof-provisioner", "GET", "/xprof/some-id"
    yield "xprof-provisioner", "GET", "/xprof/some-id/data/plugin/profile/runs"


def _route(ingresses: list[Object], host: str, path: str) -> tuple[str, str]:
    """The (Service, port name) ingress-nginx sends a request to, as it orders locations.

    With use-regex every path of the host is a case-insensitive regular expression anchored
    at the start (`location ~* "^path"`); locations are sorted by path, longest first, and
    nginx takes the first regular expression that matches.
    """
    paths = [
        entry
        for ingress in ingresses
        for rule in ingress["spec"]["rules"]
        if rule["host"] == host
        for entry in rule["http"]["paths"]
    ]
    paths.sort(key=lambda entry: entry["path"], reverse=True)
    paths.sort(key=lambda entry: len(entry["path"]), reverse=True)
    for entry in paths:
        if re.match(entry["path"], path, flags=re.IGNORECASE):
            service = entry["backend"]["service"]
            return service["name"], service["port"]["name"]
    raise AssertionError(f"no Ingress path matches {path}")


def test_the_ingress_routes_every_path_to_the_service_that_serves_it(
    rendered: Rendered, apps: dict[str, FastAPI]
) -> None:
    ingress = rendered.get("Ingress", "mldiag")
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/use-regex"] == "true"
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert (
        urlparse(rendered.get("ConfigMap", "mldiag-config")["data"]["public-url"]).hostname
        == (rule["host"])
    )
    for entry in rule["http"]["paths"]:
        assert entry["pathType"] == "ImplementationSpecific", "regular expressions need it"
    services = _by_kind(rendered.objects, "Service")
    routed = 0
    for owner, method, path in _requests(apps):
        assert _serves(apps[owner], method, path), f"{owner} does not serve {method} {path}"
        service, port = _route([ingress], rule["host"], path)
        assert service == owner, f"{method} {path} goes to {service}, {owner} serves it"
        assert port in {p["name"] for p in services[service]["spec"]["ports"]}
        routed += 1
    assert routed > 60


def test_the_ingress_says_what_the_edges_route_table_says(rendered: Rendered) -> None:
    # One table for the embedded edge (mldiag up, compose) and production's Ingress.
    (rule,) = rendered.get("Ingress", "mldiag")["spec"]["rules"]
    rules = {
        (entry["path"], entry["backend"]["service"]["name"]) for entry in rule["http"]["paths"]
    }
    assert rules == {(route.pattern, route.service) for route in ROUTES}
    for entry in rule["http"]["paths"]:
        assert entry["backend"]["service"]["port"]["name"] == "http"


def test_the_edge_and_the_ingress_route_every_request_alike(
    production: Rendered, apps: dict[str, FastAPI]
) -> None:
    ingress = production.get("Ingress", "mldiag")
    host = ingress["spec"]["rules"][0]["host"]
    table = RouteTable()
    for _owner, _method, path in _requests(apps):
        assert table.service_for(path) == _route([ingress], host, path)[0], path


@pytest.mark.parametrize(
    ("path", "service"),
    [
        ("/v1/projects/p/locations/us-central1/customJobs", "training"),
        ("/v1/customJobs/123:cancel", "training"),
        ("/v1/projects/p/locations/l/customJobs/1/logs", "training"),
        ("/upload/v1/projects/p/locations/l/packages", "training"),
        ("/v1/projects/p/locations/l/models/7@1", "training"),
        ("/v1/projects/p/locations/l/operations/o1", "run-registry"),
        ("/v1/machineLearningRuns/r1/metrics:write", "ingestion"),
        ("/v1/projects/p/locations/l/machineLearningRuns/r1:heartbeat", "ingestion"),
        ("/v1/machineLearningRuns/r1:reportSignal", "ingestion"),
        ("/v1/metrics", "ingestion"),
        ("/v1/logs", "ingestion"),
        # Look-alikes that belong to the registry.
        ("/v1/machineLearningRuns/r1/metrics", "run-registry"),
        ("/v1/machineLearningRuns/r1/metrics/train/metrics:write", "run-registry"),
        ("/v1/machineLearningRuns/r1/metrics:latest", "run-registry"),
        ("/v1/metricsfoo", "run-registry"),
        ("/v1/xprofInstances", "xprof-provisioner"),
        ("/v1/xprofInstances/x1", "xprof-provisioner"),
        ("/xprof/open", "xprof-provisioner"),
        ("/console/", "run-registry"),
        ("/", "run-registry"),
        ("/healthz", "run-registry"),
    ],
)
def test_ingress_routes(production: Rendered, path: str, service: str) -> None:
    ingress = production.get("Ingress", "mldiag")
    assert _route([ingress], ingress["spec"]["rules"][0]["host"], path)[0] == service


def test_otlp_grpc_has_an_ingress_of_its_own(production: Rendered) -> None:
    grpc = production.get("Ingress", "mldiag-otlp-grpc")
    assert grpc["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == (
        "GRPC"
    )
    assert grpc["spec"]["tls"], "gRPC through ingress-nginx needs TLS (HTTP/2)"
    (rule,) = grpc["spec"]["rules"]
    (entry,) = rule["http"]["paths"]
    backend = entry["backend"]["service"]
    assert (backend["name"], backend["port"]["name"]) == ("ingestion-otlp", "otlp-grpc")
    assert rule["host"] != production.get("Ingress", "mldiag")["spec"]["rules"][0]["host"]


# --- NetworkPolicies ------------------------------------------------------------------------


def _pod_labels(rendered: Rendered) -> dict[str, dict[str, str]]:
    return {
        obj["metadata"]["name"]: obj["spec"]["template"]["metadata"]["labels"]
        for obj in rendered.objects
        if obj["kind"] in POD_OWNERS
    }


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.get("matchLabels", {}).items())


def _allowed(rendered: Rendered, target: dict[str, str], port: int) -> set[str]:
    """Workloads in the namespace that the policies let reach a pod with these labels."""
    policies = [
        p
        for p in _by_kind(rendered.objects, "NetworkPolicy").values()
        if _selects(p["spec"]["podSelector"], target)
    ]
    assert any(p["spec"]["podSelector"] == {} for p in policies), "no default deny"
    allowed: set[str] = set()
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            if rule.get("ports") and port not in {p["port"] for p in rule["ports"]}:
                continue
            peers = rule.get("from")
            if peers is None:
                allowed.add("*")
                continue
            allowed |= {
                name
                for name, labels in _pod_labels(rendered).items()
                for peer in peers
                if "podSelector" in peer
                and "namespaceSelector" not in peer
                and _selects(peer["podSelector"], labels)
            }
    return allowed


def test_only_the_services_reach_nats(rendered: Rendered) -> None:
    nats = _pod_labels(rendered)["nats"]
    services = {platform.service for platform in PLATFORM}
    assert _allowed(rendered, nats, 4222) == services | {"nats"}
    assert _allowed(rendered, nats, 6222) == {"nats"}


def test_only_the_services_with_tables_reach_postgres(rendered: Rendered) -> None:
    cluster = rendered.get("Cluster", "mldiag-postgres")
    # The label CloudNativePG puts on the cluster's pods.
    postgres = {"cnpg.io/cluster": cluster["metadata"]["name"]}
    with_tables = {
        platform.service
        for platform in PLATFORM
        if any(
            variable["name"] == "MLDIAG_DATABASE_URL"
            for variable in rendered.service_container(platform)["env"]
        )
    }
    assert with_tables == substrate.DATABASE_USERS
    assert _allowed(rendered, postgres, 5432) == with_tables | {"mldiag-postgres-roles"}


def test_only_the_proxy_port_of_the_provisioner_is_open(
    dev: Rendered, monkeypatch: pytest.MonkeyPatch
) -> None:
    platform = next(p for p in PLATFORM if p.service == "xprof-provisioner")
    labels = _pod_labels(dev)[platform.service]
    container = dev.service_container(platform)
    env = {name: str(value) for name, value in _env_values(container, dev.objects).items()}
    settings: Any = settings_from(platform, env, monkeypatch)
    assert _allowed(dev, labels, settings.port) == {"*"}
    for port in settings.instance_ports:
        assert not _allowed(dev, labels, port), f"XProf's port {port} is reachable"
    assert [p["containerPort"] for p in container["ports"]] == [settings.port]


@by_service
def test_each_service_port_is_open_and_nothing_else(rendered: Rendered, platform: Platform) -> None:
    labels = _pod_labels(rendered)[platform.service]
    for port in rendered.service_container(platform)["ports"]:
        assert _allowed(rendered, labels, port["containerPort"]) == {"*"}
    assert not _allowed(rendered, labels, 9100)


# --- the NATS cluster, for real -------------------------------------------------------------


def _local_nats_configs(
    rendered: Rendered, root: Path, auth_conf: str
) -> list[tuple[Path, int, int]]:
    """The rendered config of each node, moved onto loopback ports and a local store, with
    the node's client and monitoring ports. Every rewrite must apply exactly once, so a change to the
    config's shape fails here instead of testing something else."""
    nodes = rendered.get("StatefulSet", "nats")["spec"]["replicas"]
    client, monitor, route = ([free_port() for _ in range(nodes)] for _ in range(3))
    configs = []
    for index in range(nodes):
        node_root = root / f"nats-{index}"
        config = _nats_files(rendered, node_root, auth_conf)
        text = config.read_text()
        rewrites = [
            (r"listen: 0\.0\.0\.0:4222", f"listen: 127.0.0.1:{client[index]}"),
            (r"http_port: 8222", f"http_port: {monitor[index]}"),
            (r"listen: 0\.0\.0\.0:6222", f"listen: 127.0.0.1:{route[index]}"),
            (r"(store_dir|pid_file): /", rf"\1: {node_root}/"),
        ] + [
            (rf"nats://nats-{peer}\.nats-headless:6222", f"nats://127.0.0.1:{route[peer]}")
            for peer in range(nodes)
        ]
        for pattern, replacement in rewrites:
            text, count = re.subn(pattern, replacement, text)
            assert count == (2 if pattern.startswith("(store_dir") else 1), pattern
        config.write_text(text)
        configs.append((config, client[index], monitor[index]))
    return configs


@pytest.mark.connected
async def test_the_services_declare_r3_streams_on_the_rendered_cluster(
    dev: Rendered, nats_server: str, tmp_path: Path
) -> None:
    # Three nats-server processes from the rendered config and the dev auth.conf (the
    # generator's users and permissions); each service connects as itself and declares the
    # streams with the replicas the manifests give it, as it does at start.
    auth_conf = dev.get("Secret", "mldiag-nats-auth")["stringData"]["auth.conf"]
    processes = []
    configs = _local_nats_configs(dev, tmp_path, auth_conf)
    try:
        for index, (config, _client, _monitor) in enumerate(configs):
            with (tmp_path / f"nats-{index}.log").open("w") as log:
                processes.append(
                    subprocess.Popen(  # noqa: ASYNC220  # started once, stopped below
                        [nats_server, "-c", str(config)],
                        env={**os.environ, "POD_NAME": f"nats-{index}"},
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )
        async with httpx.AsyncClient() as http:
            for _config, _client, monitor in configs:
                await _until_healthy(http, f"http://127.0.0.1:{monitor}/healthz")
        url = ",".join(f"nats://127.0.0.1:{client}" for _config, client, _monitor in configs)
        for platform in PLATFORM:
            env = _env_values(dev.service_container(platform), dev.objects)
            settings = NatsSettings(
                url=url,
                namespace=str(env["MLDIAG_NATS_NAMESPACE"]),
                stream_replicas=int(str(env["MLDIAG_NATS_STREAM_REPLICAS"])),
                user=env["MLDIAG_NATS_USER"],
                password=env["MLDIAG_NATS_PASSWORD"],
            )
            async with connect_bus(settings, platform.service) as bus:
                js = bus.broker.config.connection_state.stream
                for spec in ALL_STREAMS:
                    info = await js.stream_info(bus.namespace.stream(spec))
                    assert info.config.num_replicas == 3
                    assert info.cluster is not None
                    assert len(info.cluster.replicas or []) == 2, "a leader and two replicas"
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)


async def _until_healthy(http: httpx.AsyncClient, url: str, timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            if (await http.get(url, timeout=2.0)).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"{url} did not answer 200 within {timeout} s")
        await asyncio.sleep(0.2)

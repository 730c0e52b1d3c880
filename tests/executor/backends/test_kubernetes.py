"""The Kubernetes backend's manifests, without a cluster: compared with golden files,
read back into the official client's models without losing a field, validated against
Kubernetes' schemas, and the per-index entrypoint run for real.

Regenerate the golden files after a deliberate change: ``MLDIAG_UPDATE_GOLDEN=1 pytest
tests/executor/backends/test_kubernetes.py``.
"""

import asyncio
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_validate
import pytest
import yaml

from executor.backends.support_gang import gang_commands
from mldiag_executor.backends.kubernetes import (
    ENTRYPOINT,
    INDEX_ENV,
    KubernetesBackend,
    KubernetesBackendSettings,
    base_name,
    container_resources,
    index_ends,
    node_selector,
    parse_indexes,
    quantity_cpu,
    quantity_memory,
    render_attempt,
)
from mldiag_executor.errors import Rejected
from mldiag_platform.errors import MldiagError
from mldiag_schemas.replicas import ReplicaKey, Resources, StartReplica

GOLDEN = Path(__file__).parent / "golden"
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
ADDRESS = "replicas.mldiag.invalid"
EXECUTOR = "k8s-test"
KUBERNETES_VERSIONS = ("1.33.0", kubernetes_validate.utils.latest_version())
N1_STANDARD_4 = Resources(cpus=4, memory_bytes=15 << 30)
A2_T4 = Resources(
    cpus=8, memory_bytes=30 << 30, accelerator_type="NVIDIA_TESLA_T4", accelerator_count=1
)
SETTINGS = KubernetesBackendSettings(namespace="training", service_account="trainer")


def _commands(**overrides: Any) -> list[StartReplica]:
    arguments: dict[str, Any] = {
        "executor_id": EXECUTOR,
        "address": ADDRESS,
        "pools": [(1, N1_STANDARD_4), (2, A2_T4)],
        "deadline": NOW + timedelta(hours=2),
        "logs_root": "gs://bucket/jobs/4242/logs",
    }
    commands: list[StartReplica] = gang_commands(**(arguments | overrides))
    return commands


def _render(commands: list[StartReplica], **overrides: Any) -> list[dict[str, Any]]:
    return render_attempt(
        commands,
        settings=overrides.pop("settings", SETTINGS),
        executor_id=EXECUTOR,
        address=ADDRESS,
        now=NOW,
        **overrides,
    )


CASES = {
    "chief-and-gpu-workers": lambda: _render(_commands()),
    "single-cpu-replica": lambda: _render(
        _commands(pools=[(1, Resources(cpus=0.5, memory_bytes=512 << 20))], attempt=3)
    ),
    "tpu-pool": lambda: _render(
        _commands(
            pools=[
                (
                    1,
                    Resources(
                        cpus=24,
                        memory_bytes=48 << 30,
                        accelerator_type="TPU_V5_LITEPOD",
                        accelerator_count=4,
                    ),
                )
            ]
        ),
        settings=KubernetesBackendSettings(backoff_limit_per_index=2),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_manifests_match_their_golden_file(case: str) -> None:
    rendered = yaml.safe_dump_all(CASES[case](), sort_keys=True, width=100)
    path = GOLDEN / f"{case}.yaml"
    if os.environ.get("MLDIAG_UPDATE_GOLDEN") == "1":
        path.write_text(rendered)
    assert path.exists(), f"{path} is missing: run with MLDIAG_UPDATE_GOLDEN=1"
    assert rendered == path.read_text(), (
        f"{path} differs from the rendering: if the change is meant, MLDIAG_UPDATE_GOLDEN=1"
    )


MODELS = {"Job": "V1Job", "Service": "V1Service", "Secret": "V1Secret"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_read_back_into_the_official_models_whole(case: str) -> None:
    api: Any = kubernetes.client.ApiClient()
    for manifest in CASES[case]():
        # The client's own path for a response body (kubernetes>=35 takes the text itself).
        model = api.deserialize(json.dumps(manifest), MODELS[manifest["kind"]], "application/json")
        assert type(model).__name__ == MODELS[manifest["kind"]]
        # Nothing the models do not know (a misspelt field would vanish here).
        assert api.sanitize_for_serialization(model) == manifest


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_manifests_are_valid_kubernetes(case: str, version: str) -> None:
    for manifest in CASES[case]():
        kubernetes_validate.validate(manifest, version, strict=True)


def test_one_indexed_job_per_pool_with_the_failure_policy() -> None:
    secret, service, chief, workers = _render(_commands())
    assert [secret["kind"], service["kind"], chief["kind"], workers["kind"]] == [
        "Secret",
        "Service",
        "Job",
        "Job",
    ]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    spec = workers["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimitPerIndex"] == 0
    assert spec["podReplacementPolicy"] == "Failed"
    assert spec["activeDeadlineSeconds"] == 7200
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {
        "action": "Ignore",
        "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
    }
    assert rules[1]["action"] == "FailIndex"
    assert rules[1]["onExitCodes"]["values"] == [126, 127]
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == service["metadata"]["name"] == "mldiag-4242-a0"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    container = pod["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "8", "memory": "30Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "30Gi", "nvidia.com/gpu": "1"},
    }
    assert container["args"] == [
        "mldiag",
        "run",
        "--replica",
        "{replica}",
        "--",
        "python",
        "train.py",
    ]
    assert spec["template"]["metadata"]["labels"]["mldiag.io/job"] == "4242"


def test_the_token_lives_in_the_secret_only() -> None:
    manifests = _render(_commands())
    secret = manifests[0]
    assert secret["stringData"] == {"MLDIAG_TOKEN": "run-token"}
    for job in manifests[2:]:
        text = json.dumps(job)
        assert "run-token" not in text
        env = job["spec"]["template"]["spec"]["containers"][0]["env"]
        token = next(e for e in env if e["name"] == "MLDIAG_TOKEN")
        assert token["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]


def _container_env(job: dict[str, Any], index: int) -> dict[str, str]:
    """What the pod of completion index ``index`` sees after the entrypoint ran: the
    entrypoint itself, executed with the container's variables."""
    container = job["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env["JOB_COMPLETION_INDEX"] = str(index)
    env["PATH"] = os.environ["PATH"]
    dump = "import json,os,sys; print(json.dumps({**dict(os.environ), 'argv': sys.argv[1:]}))"
    # The launcher replaced by python printing what it was given: argv after `-c ENTRYPOINT`.
    args = [sys.executable, "-c", dump, "{replica}"]
    assert container["command"][1:] == ["-c", ENTRYPOINT]
    result = subprocess.run(
        [sys.executable, "-c", ENTRYPOINT, *args],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    seen: dict[str, Any] = json.loads(result.stdout)
    assert seen.pop("argv") == [seen["MLDIAG_REPLICA"]]
    return seen


def test_each_index_gets_its_own_environment_with_pod_dns_names() -> None:
    _, _, chief, workers = _render(_commands())
    names = {
        "chief": "mldiag-4242-a0-wp0-0.mldiag-4242-a0",
        "w0": "mldiag-4242-a0-wp1-0.mldiag-4242-a0",
        "w1": "mldiag-4242-a0-wp1-1.mldiag-4242-a0",
    }
    for index in (0, 1):
        env = _container_env(workers, index)
        assert INDEX_ENV not in env
        assert env["MLDIAG_REPLICA"] == f"workerpool1-{index}"
        assert env["RANK"] == env["JAX_PROCESS_ID"] == str(index + 1)
        spec = json.loads(env["CLUSTER_SPEC"])
        assert spec["task"] == {"type": "workerpool1", "index": index}
        assert spec["cluster"] == {
            "workerpool0": [f"{names['chief']}:20000"],
            "workerpool1": [f"{names['w0']}:20001", f"{names['w1']}:20002"],
        }
        assert json.loads(env["TF_CONFIG"])["cluster"]["worker"] == spec["cluster"]["workerpool1"]
        assert env["MASTER_ADDR"] == names["chief"]
        assert env["MASTER_PORT"] == "20000"
        assert env["JAX_COORDINATOR_ADDRESS"] == f"{names['chief']}:20000"
        assert ADDRESS not in json.dumps(env)
    chief_env = _container_env(chief, 0)
    assert chief_env["RANK"] == "0"
    assert json.loads(chief_env["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0}


def test_a_replica_restarted_alone_keeps_the_others_names() -> None:
    first = _commands()
    known = {20000: "mldiag-4242-a0-wp0-0.mldiag-4242-a0"}
    restarted = [c for c in _commands(attempt=1) if c.replica.pool == 1 and c.replica.index == 1]
    _, _, job = _render(restarted, known_hosts=known)
    assert job["spec"]["completions"] == 1
    env = _container_env(job, 0)
    assert env["MLDIAG_REPLICA"] == "workerpool1-1"
    assert env["MASTER_ADDR"] == known[20000]
    assert "mldiag-4242-a1-wp1-0.mldiag-4242-a1:20002" in env["CLUSTER_SPEC"]
    assert len(first) == 3


def test_packages_are_refused_and_one_attempt_at_a_time() -> None:
    commands = _commands()
    with_package = commands[0].model_copy(
        update={"launch": commands[0].launch.model_copy(update={"package_uris": ["gs://b/p.tgz"]})}
    )
    with pytest.raises(Rejected, match="put the package in the image"):
        _render([with_package])
    with pytest.raises(ValueError, match="one job attempt"):
        _render([commands[0], _commands(attempt=1)[1]])


def test_names_quantities_and_selectors() -> None:
    key = ReplicaKey(job_id="4242", pool=1, index=0, attempt=2)
    assert base_name(key) == "mldiag-4242-a2"
    long_key = ReplicaKey(job_id="x" * 60, pool=1, index=0, attempt=2)
    assert len(base_name(long_key)) + 10 <= 63
    assert quantity_cpu(4) == "4"
    assert quantity_cpu(0.5) == "500m"
    assert quantity_memory(15 << 30) == "15Gi"
    assert quantity_memory(1000) == "1000"
    assert node_selector(A2_T4, SETTINGS) == {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    tpu = Resources(cpus=1, memory_bytes=0, accelerator_type="TPU_V4_POD", accelerator_count=4)
    assert node_selector(tpu, SETTINGS) == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v4-podslice"
    }
    assert container_resources(tpu) == {
        "requests": {"cpu": "1", "google.com/tpu": "4"},
        "limits": {"google.com/tpu": "4"},
    }
    assert node_selector(N1_STANDARD_4, SETTINGS) == {}


def test_parse_indexes() -> None:
    assert parse_indexes("0,2-4,7") == {0, 2, 3, 4, 7}
    assert parse_indexes("") == parse_indexes(None) == set()


def _pod(index: int, exit_code: int, created: int) -> Any:
    return kubernetes.client.V1Pod(
        metadata=kubernetes.client.V1ObjectMeta(
            annotations={"batch.kubernetes.io/job-completion-index": str(index)},
            creation_timestamp=NOW + timedelta(seconds=created),
        ),
        status=kubernetes.client.V1PodStatus(
            container_statuses=[
                kubernetes.client.V1ContainerStatus(
                    name="replica",
                    image="i",
                    image_id="",
                    ready=False,
                    restart_count=0,
                    state=kubernetes.client.V1ContainerState(
                        terminated=kubernetes.client.V1ContainerStateTerminated(
                            exit_code=exit_code, reason="Error"
                        )
                    ),
                )
            ]
        ),
    )


def test_index_ends_read_from_job_status_and_pods() -> None:
    job = kubernetes.client.V1Job(
        spec=kubernetes.client.V1JobSpec(
            completions=3, template=kubernetes.client.V1PodTemplateSpec()
        ),
        status=kubernetes.client.V1JobStatus(completed_indexes="0", failed_indexes="1"),
    )
    pods = [_pod(1, 137, 1), _pod(1, 3, 2), _pod(0, 0, 0)]
    ends = index_ends(job, pods)
    assert [(e.index, e.reason, e.exit_code) for e in ends] == [(0, "exited", 0), (1, "exited", 3)]
    assert job.status is not None
    job.status.conditions = [
        kubernetes.client.V1JobCondition(type="Failed", status="True", reason="DeadlineExceeded")
    ]
    ends = index_ends(job, pods)
    assert ends[-1].index == 2
    assert ends[-1].reason == "killed"
    assert "DeadlineExceeded" in ends[-1].message


def test_the_executor_builds_it_from_its_settings(tmp_path: Path) -> None:
    from mldiag_executor.backends import create_backend  # noqa: PLC0415
    from mldiag_executor.settings import ExecutorSettings  # noqa: PLC0415

    base = {"backend": "kubernetes", "executor_id": "k8s", "state_dir": tmp_path}
    with pytest.raises(MldiagError, match="MLDIAG_EXECUTOR_CPUS"):
        create_backend(ExecutorSettings(**base))
    backend = create_backend(ExecutorSettings(**base, cpus=64, memory_bytes=1 << 38))
    assert backend.name == "kubernetes"
    assert backend.capacity() == Resources(cpus=64, memory_bytes=1 << 38)
    assert backend.address() == "replicas.mldiag.invalid"


class RecordingApis:
    """Stands in for ``BatchV1Api`` and ``CoreV1Api`` (no cluster here): keeps what was
    created, answers reads from it as the API server would (409 on a second create, 404
    once deleted), and lets a test set a Job's status and pods."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.status: dict[str, Any] = {}
        self.pods: dict[str, list[Any]] = {}

    def _create(self, kind: str, namespace: str, body: dict[str, Any]) -> None:
        key = (kind, body["metadata"]["name"])
        self.calls.append(("create", f"{kind}/{key[1]}@{namespace}"))
        if key in self.objects:
            raise kubernetes.client.ApiException(status=409)
        self.objects[key] = body

    def create_namespaced_secret(self, namespace: str, body: dict[str, Any]) -> None:
        self._create("Secret", namespace, body)

    def create_namespaced_service(self, namespace: str, body: dict[str, Any]) -> None:
        self._create("Service", namespace, body)

    def create_namespaced_job(self, namespace: str, body: dict[str, Any]) -> None:
        self._create("Job", namespace, body)

    def _delete(self, kind: str, name: str) -> None:
        self.calls.append(("delete", f"{kind}/{name}"))
        self.objects.pop((kind, name), None)

    def delete_namespaced_job(self, name: str, namespace: str, body: Any) -> None:
        assert namespace == "training"
        assert body.propagation_policy == "Foreground"
        self._delete("Job", name)

    def delete_namespaced_service(self, name: str, namespace: str) -> None:
        assert namespace == "training"
        self._delete("Service", name)

    def delete_namespaced_secret(self, name: str, namespace: str) -> None:
        assert namespace == "training"
        self._delete("Secret", name)

    def _job(self, name: str) -> Any:
        body = self.objects.get(("Job", name))
        if body is None:
            raise kubernetes.client.ApiException(status=404)
        api: Any = kubernetes.client.ApiClient()
        job = api.deserialize(json.dumps(body), "V1Job", "application/json")
        job.status = self.status.get(name)
        return job

    def read_namespaced_job(self, name: str, namespace: str) -> Any:
        assert namespace == "training"
        return self._job(name)

    def read_namespaced_job_status(self, name: str, namespace: str) -> Any:
        assert namespace == "training"
        return self._job(name)

    def list_namespaced_job(self, namespace: str, label_selector: str) -> Any:
        assert namespace == "training"
        wanted = dict(pair.split("=") for pair in label_selector.split(","))
        items = [
            self._job(name)
            for (kind, name), body in self.objects.items()
            if kind == "Job" and wanted.items() <= body["metadata"]["labels"].items()
        ]
        return kubernetes.client.V1JobList(items=items)

    def list_namespaced_pod(self, namespace: str, label_selector: str) -> Any:
        assert namespace == "training"
        return kubernetes.client.V1PodList(items=self.pods.get(label_selector.split("=")[1], []))


async def test_the_backend_creates_watches_stops_and_recovers_through_the_api() -> None:
    apis = RecordingApis()
    settings = KubernetesBackendSettings(
        namespace="training", collect_seconds=0.2, poll_seconds=0.05
    )
    backend = KubernetesBackend(
        executor_id=EXECUTOR, capacity=N1_STANDARD_4, settings=settings, apis=(apis, apis)
    )
    commands = _commands(deadline=datetime.now(UTC) + timedelta(hours=1))
    try:
        for command in commands:
            await backend.start(command, None)  # type: ignore[arg-type]  # unused here
        await backend.start(commands[0], None)  # type: ignore[arg-type]  # a redelivery
        assert sorted(backend.running(), key=str) == sorted((c.replica for c in commands), key=str)
        deadline = time.monotonic() + 10
        while len(apis.calls) < 4:
            assert time.monotonic() < deadline, apis.calls
            await asyncio.sleep(0.05)
        assert apis.calls == [
            ("create", "Secret/mldiag-4242-a0-token@training"),
            ("create", "Service/mldiag-4242-a0@training"),
            ("create", "Job/mldiag-4242-a0-wp0@training"),
            ("create", "Job/mldiag-4242-a0-wp1@training"),
        ]
        # Index 1 of the workers fails with 3; the chief completes.
        apis.status["mldiag-4242-a0-wp1"] = kubernetes.client.V1JobStatus(failed_indexes="1")
        apis.pods["mldiag-4242-a0-wp1"] = [_pod(1, 3, 0)]
        apis.status["mldiag-4242-a0-wp0"] = kubernetes.client.V1JobStatus(completed_indexes="0")
        ends = {}
        for _ in range(2):
            ended = await asyncio.wait_for(anext(backend.exits()), 10)
            ends[ended.key.replica_name] = (ended.reason, ended.exit_code)
        assert ends == {"workerpool0-0": ("exited", 0), "workerpool1-1": ("exited", 3)}
        # A new executor process finds the Jobs by label.
        again = KubernetesBackend(
            executor_id=EXECUTOR, capacity=N1_STANDARD_4, settings=settings, apis=(apis, apis)
        )
        assert sorted(k.replica_name for k in await again.recover()) == [
            "workerpool0-0",
            "workerpool1-0",
            "workerpool1-1",
        ]
        await again.close()
        # Stopping the running worker deletes its pool's Job and waits until it is gone.
        await backend.stop(commands[1].replica, 0)
        assert ("delete", "Job/mldiag-4242-a0-wp1") in apis.calls
        ended = await asyncio.wait_for(anext(backend.exits()), 10)
        assert (ended.key, ended.reason) == (commands[1].replica, "killed")
        for command in commands:
            await backend.reported(command.replica)
        assert ("Service", "mldiag-4242-a0") not in apis.objects
        assert ("Secret", "mldiag-4242-a0-token") not in apis.objects
    finally:
        await backend.close()

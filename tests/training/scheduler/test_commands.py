"""Commands and errors as pure functions: the launch of a package, ids, failure codes."""

from datetime import UTC, datetime

from mldiag_schemas.jobs import CustomJobSpec, JobState, ReplicaState
from mldiag_schemas.replicas import ReplicaKey, Resources
from mldiag_training.scheduler.commands import failure_status, start_replica, stop_replica
from mldiag_training.scheduler.environment import PlatformPlace
from mldiag_training.scheduler.repository import JobRow, ReplicaRow

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = CustomJobSpec.model_validate(
    {
        "workerPoolSpecs": [
            {
                "replicaCount": "1",
                "pythonPackageSpec": {
                    "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:latest",
                    "packageUris": ["gs://b/trainer-0.1.tar.gz"],
                    "pythonModule": "trainer.task",
                    "args": ["--epochs", "2"],
                },
            }
        ]
    }
)
JOB = JobRow(
    job_id="42",
    project="p",
    location="us-central1",
    spec=SPEC,
    state=JobState.PENDING,
    error=None,
    run_ready=True,
    cancel_requested=False,
    restarts=0,
    deadline=NOW,
    create_time=NOW,
    start_time=None,
    end_time=None,
    run_token="mldiag_x",
)
REPLICA = ReplicaRow(
    job_id="42",
    pool=0,
    index=0,
    attempt=3,
    state=ReplicaState.PENDING,
    executor_id="e1",
    address="e1.local",
    host="",
    port=23456,
    resources=Resources(cpus=4, memory_bytes=1),
    exit_code=1,
    message="x" * 5000 + "Traceback: boom",
    restarts=3,
    not_before=None,
    start_time=None,
    end_time=None,
    stop_reason=None,
)


def test_a_package_launch() -> None:
    platform = PlatformPlace("http://api", "mldiag_x", "gs://store")
    start = start_replica(JOB, REPLICA, {0: ["e1.local:23456"]}, platform)
    launch = start.launch
    assert launch.command == []
    assert launch.image_uri == "us-docker.pkg.dev/vertex-ai/training/pytorch:latest"
    assert (launch.package_uris, launch.python_module, launch.args) == (
        ["gs://b/trainer-0.1.tar.gz"],
        "trainer.task",
        ["--epochs", "2"],
    )
    assert (launch.port, start.executor_id, start.replica.attempt) == (23456, "e1", 3)
    assert launch.logs_uri == "gs://store/jobs/42/logs/workerpool0-0/attempt-3"
    assert start.run_token.get_secret_value() == "mldiag_x"
    assert start.deadline == NOW
    assert start_replica(JOB, REPLICA, {0: ["e1.local:23456"]}, platform).event_id == (
        start.event_id
    )  # the same attempt, the same command


def test_stop_ids_name_the_attempt_and_reason() -> None:
    key = ReplicaKey(job_id="42", pool=0, index=0, attempt=1)
    first = stop_replica("e1", key, "cancelled", 30)
    assert stop_replica("e1", key, "cancelled", 30).event_id == first.event_id
    assert stop_replica("e1", key, "superseded", 30).event_id != first.event_id
    assert stop_replica("e1", key.model_copy(update={"attempt": 2}), "cancelled", 30).event_id != (
        first.event_id
    )


def test_failure_codes_and_message_tail() -> None:
    exited = failure_status(REPLICA, "exited", "retries are disabled")
    assert exited.code == 3
    assert exited.message.startswith(
        "The replica workerpool0-0 exited with a non-zero status of 1 (attempt 3)"
    )
    assert exited.message.endswith("Traceback: boom")
    assert len(exited.message) < 2300
    # each detail an Any (google.rpc.ErrorInfo), or the Vertex SDK cannot parse the job
    assert exited.details == [
        {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": "replica_exited",
            "domain": "mldiag",
            "metadata": {"replica": "workerpool0-0", "attempt": "3", "exitCode": "1"},
        }
    ]
    assert failure_status(REPLICA, "lost", "x").code == 13
    assert failure_status(REPLICA, "setup_failed", "x").code == 9

"""The Vertex dialect: enums as numbers on request, google.rpc.Status error bodies."""

import json
from datetime import UTC, datetime

import pytest
from starlette.requests import Request

from mldiag_platform.errors import FailedPrecondition, NotFound
from mldiag_schemas.jobs import (
    AcceleratorType,
    CustomJob,
    CustomJobSpec,
    JobState,
    ListReplicasResponse,
    MachineSpec,
    Replica,
    ReplicaState,
    Scheduling,
    Strategy,
    WorkerPoolSpec,
)
from mldiag_training.jobs.errors import InvalidCustomJob, JobNotTerminal, UnsupportedField
from mldiag_training.scheduler.errors import Unfittable
from mldiag_training.vertex import (
    canonical_code,
    encode,
    enum_name,
    vertex_error_body,
    vertex_error_response,
    wants_enum_numbers,
)


def request_with(query: bytes) -> Request:
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": query})


def a_job() -> CustomJob:
    pool = WorkerPoolSpec(
        machine_spec=MachineSpec(
            machine_type="n1-standard-4",
            accelerator_type=AcceleratorType.NVIDIA_TESLA_T4,
            accelerator_count=1,
        ),
        replica_count=2,
    )
    spec = CustomJobSpec(
        worker_pool_specs=[pool], scheduling=Scheduling(timeout=90.5, strategy=Strategy.SPOT)
    )
    now = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
    return CustomJob(
        name="projects/p/locations/us-central1/customJobs/1",
        display_name="d",
        job_spec=spec,
        state=JobState.RUNNING,
        create_time=now,
    )


@pytest.mark.parametrize(
    ("query", "numbers"),
    [
        (b"%24alt=json%3Benum-encoding%3Dint", True),  # what the SDK sends
        (b"$alt=json;enum-encoding=int", True),
        (b"enum-encoding=int", True),
        (b"%24alt=json", False),
        (b"", False),
        (b"enum-encoding=name", False),
    ],
)
def test_enum_encoding_is_read_from_alt_or_its_own_parameter(query: bytes, numbers: bool) -> None:
    assert wants_enum_numbers(request_with(query)) is numbers


def test_enums_become_numbers_only_when_asked() -> None:
    job = a_job()
    names = json.loads(encode(job, enum_numbers=False))
    assert names["state"] == "JOB_STATE_RUNNING"
    numbers = json.loads(encode(job, enum_numbers=True))
    assert numbers["state"] == 3
    machine = numbers["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]
    assert machine["acceleratorType"] == 5
    assert numbers["jobSpec"]["scheduling"]["strategy"] == 4
    # int64 stays a string and durations stay proto Durations either way.
    assert numbers["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] == "2"
    assert numbers["jobSpec"]["scheduling"]["timeout"] == "90.5s"
    assert numbers["createTime"].startswith("2026-12-04T12:00:00")
    # Both encodings read back as the same job.
    assert CustomJob.model_validate(numbers) == CustomJob.model_validate(names) == job


def test_unset_fields_are_left_out_as_proto3_json_does() -> None:
    document = json.loads(encode(a_job(), enum_numbers=False))
    assert "error" not in document
    assert "endTime" not in document


def test_a_replicas_state_is_not_a_vertex_enum() -> None:
    replica = Replica(name="workerpool0-0", pool=0, index=0, attempt=0, state=ReplicaState.RUNNING)
    page = ListReplicasResponse(replicas=[replica])
    assert json.loads(encode(page, enum_numbers=True))["replicas"][0]["state"] == "RUNNING"


def test_enum_names_are_read_from_names_and_numbers() -> None:
    assert enum_name(JobState, "JOB_STATE_FAILED") == "JOB_STATE_FAILED"
    assert enum_name(JobState, "5") == "JOB_STATE_FAILED"
    assert enum_name(AcceleratorType, 13) == "NVIDIA_H100_80GB"
    with pytest.raises(ValueError, match="not a JobState"):
        enum_name(JobState, "99")
    with pytest.raises(ValueError, match="not a JobState"):
        enum_name(JobState, "FINISHED")


@pytest.mark.parametrize(
    ("status", "code", "canonical"),
    [
        (400, "invalid_argument", "INVALID_ARGUMENT"),
        (400, "invalid_page_token", "INVALID_ARGUMENT"),
        (400, "unknown_machine_type", "INVALID_ARGUMENT"),
        (401, "unauthenticated", "UNAUTHENTICATED"),
        (403, "permission_denied", "PERMISSION_DENIED"),
        (404, "not_found", "NOT_FOUND"),
        (409, "failed_precondition", "FAILED_PRECONDITION"),
        (409, "job_not_ended", "FAILED_PRECONDITION"),
        (409, Unfittable.code, "FAILED_PRECONDITION"),
        (413, "payload_too_large", "INVALID_ARGUMENT"),
        (501, "unimplemented", "UNIMPLEMENTED"),
        (503, "unavailable", "UNAVAILABLE"),
        (500, "internal", "INTERNAL"),
        (405, "method_not_allowed", "UNIMPLEMENTED"),
        (418, "teapot", "UNKNOWN"),
    ],
)
def test_every_code_has_its_canonical_name(status: int, code: str, canonical: str) -> None:
    assert canonical_code(status, code) == canonical


def test_an_error_body_names_the_code_and_fields_as_google_does() -> None:
    error = InvalidCustomJob(
        "jobSpec.workerPoolSpecs[0].replicaCount: one",
        details=[{"field": "jobSpec.workerPoolSpecs[0].replicaCount", "problem": "one"}],
    )
    status, body = vertex_error_body(400, error.code, error.message, error.details)
    assert status == 400
    document = json.loads(body.model_dump_json())["error"]
    assert document["code"] == 400
    assert document["status"] == "INVALID_ARGUMENT"
    assert document["message"] == error.message
    info, bad_request = document["details"]
    assert info == {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "invalid_argument",
        "domain": "mldiag",
    }
    assert bad_request["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert bad_request["fieldViolations"] == [
        {"field": "jobSpec.workerPoolSpecs[0].replicaCount", "description": "one"}
    ]


def test_a_failed_precondition_is_a_400_as_google_maps_it() -> None:
    error = JobNotTerminal("running", details=[{"state": "JOB_STATE_RUNNING"}])
    response = vertex_error_response(error.http_status, error.code, error.message, error.details)
    assert response.status_code == 400
    document = json.loads(bytes(response.body))["error"]
    assert document["status"] == "FAILED_PRECONDITION"
    assert document["details"][0]["reason"] == "job_not_ended"
    assert document["details"][1] == {"state": "JOB_STATE_RUNNING"}
    assert FailedPrecondition.http_status == 409  # mldiag's other APIs keep theirs


def test_unimplemented_and_not_found_keep_their_status() -> None:
    for error in (UnsupportedField("x"), NotFound("y")):
        response = vertex_error_response(error.http_status, error.code, error.message, [])
        assert response.status_code == error.http_status

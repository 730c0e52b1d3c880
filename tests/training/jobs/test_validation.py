"""Reading CustomJob bodies: what Vertex accepts is accepted, every mistake is refused with
the field named and the right canonical code."""

import json
from typing import Any

import pytest

from mldiag_platform.errors import InvalidArgument, MldiagError, Unimplemented
from mldiag_platform.http import DEFAULT_MAX_BODY_BYTES
from mldiag_schemas.jobs import AcceleratorType, JobState, Strategy
from mldiag_training.jobs.validation import check_machines, parse_custom_job
from mldiag_training.scheduler.machines import MachineTable
from training.jobs.bodies import container_pool, sdk_job


def refused(body: dict[str, Any] | bytes) -> MldiagError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(MldiagError) as caught:
        job = parse_custom_job(raw)
        check_machines(job.job_spec, MachineTable())
    return caught.value


def field_of(error: MldiagError) -> str:
    return str(error.details[0]["field"])


def test_the_sdks_body_is_accepted_with_int64_strings_and_enum_numbers() -> None:
    pools = [
        container_pool(),
        {
            "machineSpec": {
                "machineType": "n1-standard-8",
                "acceleratorType": 5,
                "acceleratorCount": 2,
            },
            "replicaCount": "3",
            "pythonPackageSpec": {
                "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/pytorch:latest",
                "packageUris": ["gs://bucket/trainer-0.1.tar.gz"],
                "pythonModule": "trainer.task",
                "args": ["--epochs", "2"],
            },
        },
    ]
    body = sdk_job(workerPoolSpecs=pools, scheduling={"timeout": "3600s", "strategy": 4})
    job = parse_custom_job(json.dumps(body).encode())
    check_machines(job.job_spec, MachineTable())
    workers = job.job_spec.worker_pool_specs[1]
    assert workers.replica_count == 3
    assert workers.machine_spec is not None
    assert workers.machine_spec.accelerator_type is AcceleratorType.NVIDIA_TESLA_T4
    assert job.job_spec.scheduling is not None
    assert job.job_spec.scheduling.timeout == 3600.0
    assert job.job_spec.scheduling.strategy is Strategy.SPOT


def test_snake_case_is_accepted_like_camel_case() -> None:
    body = {
        "display_name": "snake",
        "job_spec": {
            "worker_pool_specs": [
                {
                    "machine_spec": {"machine_type": "n1-standard-4"},
                    "replica_count": 1,
                    "container_spec": {"image_uri": "python:3.12"},
                }
            ],
            "base_output_directory": {"output_uri_prefix": "file:///tmp/out"},
        },
    }
    job = parse_custom_job(json.dumps(body).encode())
    assert job.display_name == "snake"
    assert job.job_spec.worker_pool_specs[0].replica_count == 1


def test_output_only_fields_a_client_sends_are_ignored() -> None:
    body = {
        **sdk_job(),
        "name": "projects/x/locations/y/customJobs/1",
        "state": "JOB_STATE_SUCCEEDED",
        "create_time": "not even a time",
        "webAccessUris": {"workerpool0-0": "https://x"},
        "error": {"code": 5},
    }
    job = parse_custom_job(json.dumps(body).encode())
    assert job.name == ""
    assert job.state is JobState.UNSPECIFIED
    assert job.create_time is None
    assert job.web_access_uris == {}
    assert job.error is None


def test_skipped_middle_pools_are_accepted() -> None:
    pools = [container_pool(), {}, container_pool("2")]
    job = parse_custom_job(json.dumps(sdk_job(workerPoolSpecs=pools)).encode())
    assert job.job_spec.worker_pool_specs[1].empty


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**sdk_job(), "colour": "blue"}, "colour"),
        (sdk_job(unknownSpecField=1), "jobSpec.unknownSpecField"),
        ({**sdk_job(), "displayName": 3}, "displayName"),
        ({"jobSpec": sdk_job()["jobSpec"]}, "displayName"),
        ({**sdk_job(), "displayName": ""}, "displayName"),
        ({"displayName": "x"}, "jobSpec"),
        (sdk_job(workerPoolSpecs=[]), "jobSpec.workerPoolSpecs"),
        (sdk_job(workerPoolSpecs=[{}, container_pool()]), "jobSpec.workerPoolSpecs"),
        (sdk_job(workerPoolSpecs=[container_pool(), {}]), "jobSpec.workerPoolSpecs"),
        (sdk_job(workerPoolSpecs=[container_pool("2")]), "jobSpec.workerPoolSpecs[0].replicaCount"),
        (sdk_job(workerPoolSpecs=[container_pool("0")]), "jobSpec.workerPoolSpecs[0].replicaCount"),
        (
            sdk_job(workerPoolSpecs=[container_pool(), container_pool("0")]),
            "jobSpec.workerPoolSpecs[1].replicaCount",
        ),
        (
            sdk_job(workerPoolSpecs=[container_pool(), container_pool("two")]),
            "jobSpec.workerPoolSpecs[1].replicaCount",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    container_pool(),
                    {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1"},
                ]
            ),
            "jobSpec.workerPoolSpecs[1]",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {"replicaCount": "1", "containerSpec": {"imageUri": "python:3.12"}}
                ]
            ),
            "jobSpec.workerPoolSpecs[0].machineSpec",
        ),
        (
            sdk_job(workerPoolSpecs=[container_pool(), container_pool("1", "n9-imaginary-4")]),
            "jobSpec.workerPoolSpecs[1].machineSpec.machineType",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        **container_pool(),
                        "machineSpec": {"machineType": "n1-standard-4", "acceleratorType": 99},
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        **container_pool(),
                        "machineSpec": {
                            "machineType": "n1-standard-4",
                            "acceleratorType": "NVIDIA_TESLA_Q1",
                            "acceleratorCount": 1,
                        },
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        **container_pool(),
                        "machineSpec": {
                            "machineType": "n1-standard-4",
                            "acceleratorType": "NVIDIA_TESLA_T4",
                        },
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorCount",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        **container_pool(),
                        "machineSpec": {"machineType": "n1-standard-4", "acceleratorCount": 2},
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0].machineSpec.acceleratorType",
        ),
        ({**sdk_job(), "labels": {"Team": "a"}}, "labels.Team.[key]"),
        ({**sdk_job(), "labels": {"team": "Has Spaces"}}, "labels.team"),
        ({**sdk_job(), "labels": {f"k{i}": "v" for i in range(65)}}, "labels"),
        (
            sdk_job(baseOutputDirectory={"outputUriPrefix": "/tmp/out"}),
            "jobSpec.baseOutputDirectory.outputUriPrefix",
        ),
        (
            sdk_job(baseOutputDirectory={"outputUriPrefix": "s3://bucket/x"}),
            "jobSpec.baseOutputDirectory.outputUriPrefix",
        ),
        (
            sdk_job(baseOutputDirectory={"outputUriPrefix": "gs://"}),
            "jobSpec.baseOutputDirectory.outputUriPrefix",
        ),
        (sdk_job(scheduling={"timeout": "soon"}), "jobSpec.scheduling.timeout"),
        (sdk_job(scheduling={"timeout": "0s"}), "jobSpec.scheduling.timeout"),
        (sdk_job(scheduling={"strategy": 42}), "jobSpec.scheduling.strategy"),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        **container_pool(),
                        "pythonPackageSpec": {
                            "executorImageUri": "python:3.12",
                            "packageUris": ["gs://b/p.tar.gz"],
                            "pythonModule": "m",
                        },
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0]",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        "machineSpec": {"machineType": "n1-standard-4"},
                        "replicaCount": "1",
                        "pythonPackageSpec": {
                            "executorImageUri": "python:3.12",
                            "packageUris": ["https://example.com/p.tar.gz"],
                            "pythonModule": "m",
                        },
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0].pythonPackageSpec.packageUris[0]",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    {
                        **container_pool(),
                        "containerSpec": {"imageUri": "x", "env": [{"name": "1BAD", "value": ""}]},
                    }
                ]
            ),
            "jobSpec.workerPoolSpecs[0].containerSpec.env[0].name",
        ),
    ],
)
def test_bad_input_is_invalid_argument_naming_the_field(body: dict[str, Any], field: str) -> None:
    error = refused(body)
    assert isinstance(error, InvalidArgument), error
    assert field_of(error) == field, error.details
    assert error.message


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (sdk_job(network="projects/1/global/networks/default"), "jobSpec.network"),
        (sdk_job(reserved_ip_ranges=["r1"]), "jobSpec.reservedIpRanges"),
        (sdk_job(persistentResourceId="p"), "jobSpec.persistentResourceId"),
        (sdk_job(serviceAccount="sa@x"), "jobSpec.serviceAccount"),
        (sdk_job(enableWebAccess=True), "jobSpec.enableWebAccess"),
        ({**sdk_job(), "encryptionSpec": {"kmsKeyName": "k"}}, "encryptionSpec"),
        (
            sdk_job(workerPoolSpecs=[{**container_pool(), "nfsMounts": [{"server": "s"}]}]),
            "jobSpec.workerPoolSpecs[0].nfsMounts",
        ),
        (
            sdk_job(
                workerPoolSpecs=[
                    container_pool(),
                    {
                        **container_pool(),
                        "machineSpec": {"machineType": "a2-highgpu-1g", "gpuPartitionSize": "1g"},
                    },
                ]
            ),
            "jobSpec.workerPoolSpecs[1].machineSpec.gpuPartitionSize",
        ),
        (sdk_job(scheduling={"strategy": "FLEX_START"}), "jobSpec.scheduling.strategy"),
        (sdk_job(scheduling={"strategy": 1}), "jobSpec.scheduling.strategy"),
        (sdk_job(scheduling={"strategy": "LOW_COST"}), "jobSpec.scheduling.strategy"),
        (sdk_job(scheduling={"maxWaitDuration": "1800s"}), "jobSpec.scheduling.maxWaitDuration"),
    ],
)
def test_unsupported_vertex_fields_are_unimplemented_by_name(
    body: dict[str, Any], field: str
) -> None:
    error = refused(body)
    assert isinstance(error, Unimplemented), error
    assert error.http_status == 501
    assert field_of(error) == field


def test_an_unsupported_field_is_named_before_other_mistakes() -> None:
    body = {**sdk_job(network="n"), "colour": "blue", "displayName": ""}
    assert field_of(refused(body)) == "jobSpec.network"


def test_unsupported_fields_holding_their_default_are_not_set() -> None:
    body = sdk_job(network="", enableWebAccess=False, reservedIpRanges=[])
    job = parse_custom_job(json.dumps(body).encode())
    assert job.display_name == "train"


@pytest.mark.parametrize("strategy", ["STANDARD", "SPOT", "STRATEGY_UNSPECIFIED", 3, 4, 0])
def test_standard_and_spot_strategies_are_accepted(strategy: object) -> None:
    parse_custom_job(json.dumps(sdk_job(scheduling={"strategy": strategy})).encode())


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[]", b'"text"', b"{", b'{"displayName": "a\\u0000b", "jobSpec": {}}'],
)
def test_bodies_that_are_not_a_job_object_are_invalid(raw: bytes) -> None:
    error = refused(raw)
    assert isinstance(error, InvalidArgument)


def test_a_nul_is_refused_naming_its_field() -> None:
    body = sdk_job()
    body["displayName"] = "a\x00b"
    error = refused(json.dumps(body).encode())
    assert isinstance(error, InvalidArgument)
    assert field_of(error) == "displayName"


def test_the_default_body_limit_is_far_above_any_job() -> None:
    # The platform's BodyLimit guards the route; a job body is kilobytes.
    assert len(json.dumps(sdk_job())) * 1000 < DEFAULT_MAX_BODY_BYTES

"""The replica's environment against the shapes of reference/training.md §1.9."""

import json

from mldiag_schemas.jobs import CustomJobSpec
from mldiag_training.scheduler.environment import (
    PlatformPlace,
    ReplicaPlace,
    expand,
    logs_uri,
    replica_env,
)

SPEC = CustomJobSpec.model_validate(
    {
        "workerPoolSpecs": [
            {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": "1",
                "containerSpec": {
                    "imageUri": "python:3.12",
                    "command": ["python", "train.py"],
                    "env": [
                        {"name": "DATA", "value": "$(AIP_MODEL_DIR)data"},
                        {"name": "ESCAPED", "value": "$$(AIP_MODEL_DIR)"},
                        {"name": "AGAIN", "value": "$(DATA)/x $(NOPE)"},
                        {"name": "MLDIAG_TOKEN", "value": "stolen"},
                        {"name": "RANK", "value": "7"},
                    ],
                },
            },
            {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": "2",
                "containerSpec": {"imageUri": "python:3.12"},
            },
            {},
            {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": "1",
                "containerSpec": {"imageUri": "python:3.12"},
            },
        ],
        "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/out/"},
        "experiment": "exp",
    }
)
CLUSTER = {0: ["h0:2222"], 1: ["h1:2223", "h2:2224"], 3: ["h3:2225"]}
PLATFORM = PlatformPlace("http://api:8080", "mldiag_secret", "file:///data/")


def _env(pool: int, index: int, spec: CustomJobSpec = SPEC) -> dict[str, str]:
    place = ReplicaPlace("123", "proj", "us-central1", pool, index, 2, CLUSTER)
    return replica_env(spec, place, PLATFORM)


def test_cluster_spec_has_vertex_shape() -> None:
    spec = json.loads(_env(1, 1)["CLUSTER_SPEC"])
    assert spec["cluster"] == {
        "workerpool0": ["h0:2222"],
        "workerpool1": ["h1:2223", "h2:2224"],
        "workerpool3": ["h3:2225"],
    }
    assert spec["environment"] == "cloud"
    assert spec["task"] == {"type": "workerpool1", "index": 1}
    assert spec["job"]["worker_pool_specs"][1]["replica_count"] == "2"
    assert spec["job"]["base_output_directory"] == {"output_uri_prefix": "gs://bucket/out/"}


def test_tf_config_leaves_the_evaluator_out_of_the_cluster() -> None:
    chief = json.loads(_env(0, 0)["TF_CONFIG"])
    assert chief["cluster"] == {"chief": ["h0:2222"], "worker": ["h1:2223", "h2:2224"]}
    assert chief["task"] == {"type": "chief", "index": 0}
    assert chief["environment"] == "cloud"
    evaluator = json.loads(_env(3, 0)["TF_CONFIG"])
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in evaluator["cluster"]


def test_a_trials_task_carries_its_trial_id_as_vertex_does() -> None:
    dumped = SPEC.model_dump(by_alias=True, exclude_none=True)
    for pool in dumped["workerPoolSpecs"]:
        if "containerSpec" in pool:
            pool["containerSpec"].setdefault("env", []).append(
                {"name": "CLOUD_ML_TRIAL_ID", "value": "3"}
            )
    trial = CustomJobSpec.model_validate(dumped)
    chief, worker = _env(0, 0, trial), _env(1, 1, trial)
    assert json.loads(chief["TF_CONFIG"])["task"] == {"type": "chief", "index": 0, "trial": "3"}
    assert json.loads(worker["CLUSTER_SPEC"])["task"] == {
        "type": "workerpool1",
        "index": 1,
        "trial": "3",
    }
    assert worker["CLOUD_ML_TRIAL_ID"] == "3"
    # a plain custom job's task names no trial
    assert "trial" not in json.loads(_env(0, 0)["TF_CONFIG"])["task"]


def test_ranks_world_and_coordinator() -> None:
    worker = _env(1, 1)
    assert worker["MASTER_ADDR"] == "h0"
    assert worker["MASTER_PORT"] == "2222"
    assert worker["WORLD_SIZE"] == worker["JAX_NUM_PROCESSES"] == "3"
    assert worker["RANK"] == worker["JAX_PROCESS_ID"] == "2"
    assert worker["LOCAL_RANK"] == "0"
    assert worker["JAX_COORDINATOR_ADDRESS"] == "h0:2222"
    assert _env(0, 0)["RANK"] == "0"
    evaluator = _env(3, 0)
    assert "RANK" not in evaluator and "JAX_PROCESS_ID" not in evaluator


def test_outputs_cloud_and_mldiag_variables() -> None:
    env = _env(1, 0)
    assert env["AIP_MODEL_DIR"] == "gs://bucket/out/model/"
    assert env["AIP_CHECKPOINT_DIR"] == "gs://bucket/out/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == "gs://bucket/out/logs/"
    assert (env["CLOUD_ML_PROJECT_ID"], env["CLOUD_ML_REGION"], env["CLOUD_ML_JOB_ID"]) == (
        "proj",
        "us-central1",
        "123",
    )
    assert env["MLDIAG_API_URL"] == "http://api:8080"
    assert env["MLDIAG_TOKEN"] == "mldiag_secret"
    assert (env["MLDIAG_RUN_ID"], env["MLDIAG_PROJECT"], env["MLDIAG_LOCATION"]) == (
        "123",
        "proj",
        "us-central1",
    )
    assert (env["MLDIAG_CREATE_RUN"], env["MLDIAG_REPLICA"], env["MLDIAG_ATTEMPT"]) == (
        "0",
        "workerpool1-0",
        "2",
    )
    assert env["AIP_EXPERIMENT_NAME"] == "exp"


def test_output_defaults_to_the_job_under_storage() -> None:
    spec = SPEC.model_copy(update={"base_output_directory": None})
    assert _env(0, 0, spec)["AIP_MODEL_DIR"] == "file:///data/jobs/123/output/model/"
    assert logs_uri("file:///data/", "123", 1, 0, 2) == (
        "file:///data/jobs/123/logs/workerpool1-0/attempt-2"
    )


def test_user_env_expands_and_never_overrides_the_platform() -> None:
    env = _env(0, 0)
    assert env["DATA"] == "gs://bucket/out/model/data"
    assert env["ESCAPED"] == "$(AIP_MODEL_DIR)"
    assert env["AGAIN"] == "gs://bucket/out/model/data/x $(NOPE)"
    assert env["MLDIAG_TOKEN"] == "mldiag_secret"
    assert env["RANK"] == "0"


def test_expand_alone() -> None:
    assert expand("a$(X)b$$(X)c$(Y)", {"X": "1"}) == "a1b$(X)c$(Y)"

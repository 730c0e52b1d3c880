"""Run ids from the workload's identity, process indexes, settings from the environment."""

import uuid
from pathlib import Path

import pytest

from mldiag.config import DEFAULT_API_URL, Settings
from mldiag.identity import RUN_ID_NAMESPACE, process_index, resolve_run_id, workload_identity


def test_explicit_run_id_wins_and_is_validated() -> None:
    assert resolve_run_id("my-run", "w", {"MLDIAG_RUN_ID": "env-run"}) == "my-run"
    assert resolve_run_id(None, "w", {"MLDIAG_RUN_ID": "env-run"}) == "env-run"
    with pytest.raises(ValueError, match="invalid run id"):
        resolve_run_id("Not_Valid", None, {})


def test_the_same_workload_gives_the_same_run_on_every_host_and_restart() -> None:
    slurm = {"SLURM_JOB_ID": "1234", "SLURM_CLUSTER_NAME": "hpc"}
    assert workload_identity(None, slurm) == "slurm/hpc/1234"
    assert resolve_run_id(None, None, slurm) == resolve_run_id(None, None, dict(slurm))
    assert resolve_run_id(None, None, slurm) == str(uuid.uuid5(RUN_ID_NAMESPACE, "slurm/hpc/1234"))
    array = {"SLURM_JOB_ID": "1240", "SLURM_ARRAY_JOB_ID": "1234", "SLURM_ARRAY_TASK_ID": "6"}
    assert workload_identity(None, array) == "slurm//1234_6"
    k8s = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "JOBSET_NAME": "train", "POD_NAMESPACE": "ml"}
    assert workload_identity(None, k8s) == "k8s/ml/train"
    assert workload_identity(None, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) is None
    assert workload_identity("mine", slurm) == "custom/mine"
    assert workload_identity(None, {"RUN_WORKLOAD_ID": "official"}) == "custom/official"


def test_without_an_identity_each_process_gets_a_random_run() -> None:
    assert resolve_run_id(None, None, {}) != resolve_run_id(None, None, {})


def test_process_index_from_the_launchers_environment() -> None:
    assert process_index(None, {}) == 0
    assert process_index(None, {"RANK": "3", "LOCAL_RANK": "1"}) == 3
    assert process_index(None, {"LOCAL_RANK": "1"}) == 1
    assert process_index(None, {"JAX_PROCESS_ID": "2", "RANK": "5"}) == 2
    assert process_index(4, {"RANK": "5"}) == 4


def test_settings_from_arguments_then_environment_then_defaults(tmp_path: Path) -> None:
    defaults = Settings.resolve(env={})
    assert (defaults.api_url, defaults.ingestion_url) == (DEFAULT_API_URL, DEFAULT_API_URL)
    # One base URL: naming the API is enough, writes go there too (the edge routes them).
    only_api = Settings.resolve(env={"MLDIAG_API_URL": "http://platform:9/"})
    assert (only_api.api_url, only_api.ingestion_url) == ("http://platform:9", "http://platform:9")
    assert Settings.resolve(api_url="http://a:1", env={}).ingestion_url == "http://a:1"
    env = {
        "MLDIAG_API_URL": "http://api:1/",
        "MLDIAG_INGESTION_URL": "http://ing:2",
        "MLDIAG_TOKEN": "t",
        "MLDIAG_SPOOL_DIR": str(tmp_path),
    }
    from_env = Settings.resolve(env=env)
    assert from_env.api_url == "http://api:1"
    assert from_env.ingestion_url == "http://ing:2"
    assert from_env.token == "t"
    assert from_env.spool_dir == tmp_path
    chosen = Settings.resolve(api_url="http://x:3", env=env, tuning={"batch_points": 7})
    assert chosen.api_url == "http://x:3"
    assert chosen.batch_points == 7
    with pytest.raises(TypeError, match="unknown"):
        Settings.resolve(env={}, tuning={"nope": 1})


def test_heartbeat_interval_from_the_environment_or_an_argument() -> None:
    assert Settings.resolve(env={}).heartbeat_interval == 10.0
    assert Settings.resolve(env={"MLDIAG_HEARTBEAT_INTERVAL": "0"}).heartbeat_interval == 0.0
    chosen = Settings.resolve(
        env={"MLDIAG_HEARTBEAT_INTERVAL": "3"}, tuning={"heartbeat_interval": 1.5}
    )
    assert chosen.heartbeat_interval == 1.5
    for bad in ("soon", "-1", "nan"):
        with pytest.raises(ValueError, match="MLDIAG_HEARTBEAT_INTERVAL"):
            Settings.resolve(env={"MLDIAG_HEARTBEAT_INTERVAL": bad})

"""The substrate's access table, its secrets and what is rendered from them (no servers)."""

import base64
import json
import stat
from pathlib import Path

import pytest
import yaml

from mldiag.cli import main
from mldiag.local.config import locked_down_substrate, resolve_config
from mldiag.local.secrets import SECRETS_FILE, kept_secrets
from mldiag_platform import substrate
from mldiag_schemas import bus
from mldiag_schemas.bus import Namespace

NAMESPACE = Namespace("mldiag")
SECRETS = {name: f"secret-of-{name}" for name in substrate.SECRET_NAMES}


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_secrets_are_made_once_owner_only_and_reused(tmp_path: Path) -> None:
    directory = tmp_path / "secrets"
    first = kept_secrets(directory, ["a", "b"])
    assert (_mode(directory), _mode(directory / SECRETS_FILE)) == (0o700, 0o600)
    assert len(set(first.values())) == 2
    assert all(len(value) >= 32 for value in first.values())

    # Loosened by someone: tightened again; a new name is added, the others kept.
    directory.chmod(0o755)
    (directory / SECRETS_FILE).chmod(0o644)
    again = kept_secrets(directory, ["a", "b", "c"])
    assert {key: again[key] for key in ("a", "b")} == first
    assert (_mode(directory), _mode(directory / SECRETS_FILE)) == (0o700, 0o600)
    assert set(json.loads((directory / SECRETS_FILE).read_text())) == {"a", "b", "c"}


def test_only_run_registry_and_training_may_write_the_token_directory() -> None:
    # run-registry keeps the API tokens; training grants each job's run-scoped replica token.
    kv_subjects = f"$KV.{NAMESPACE.bucket(bus.TOKEN_DIRECTORY_BUCKET)}.>"
    writers = [
        user.name
        for user in substrate.NATS_USERS
        if kv_subjects in substrate.nats_permissions(user, NAMESPACE)["publish"]["allow"]
    ]
    assert writers == ["run-registry", "training"]


def test_an_executor_may_create_any_durable_on_the_dispatch_queue_and_only_there() -> None:
    # Its durable is executor-<its id>: one NATS token, which a wildcard cannot match by
    # prefix, so the durable's token is open and the stream is what bounds it.
    executor = next(user for user in substrate.SERVICES if user.name == "executor")
    allowed = substrate.nats_permissions(executor, NAMESPACE)["publish"]["allow"]
    dispatch = NAMESPACE.stream(bus.DISPATCH)
    consumer_api = [s for s in allowed if s.startswith("$JS.API.CONSUMER.")]
    assert consumer_api
    assert all(f".{dispatch}." in subject for subject in consumer_api)
    assert f"$JS.API.CONSUMER.CREATE.{dispatch}.*" in allowed
    assert f"$JS.ACK.{dispatch}.*.>" in allowed
    # It writes no token and no run fact, and publishes only replica facts and announcements.
    assert not [s for s in allowed if s.startswith("$KV.")]
    assert not [s for s in allowed if s.startswith("mldiag.runs.")]
    assert {s for s in allowed if s.startswith("mldiag.") and "deadletter" not in s} == {
        "mldiag.training.replica.started.*",
        "mldiag.training.replica.exited.*",
        "mldiag.executors.announced.*",
    }


def test_training_sends_commands_and_hears_executors() -> None:
    training = next(user for user in substrate.SERVICES if user.name == "training")
    permissions = substrate.nats_permissions(training, NAMESPACE)
    assert "mldiag.dispatch.replica.start.*" in permissions["publish"]["allow"]
    assert "mldiag.dispatch.replica.stop.*" in permissions["publish"]["allow"]
    assert "mldiag.executors.announced.*" in permissions["subscribe"]["allow"]
    assert "training" in substrate.DATABASE_USERS


def test_the_notifier_reads_events_analyses_runs_and_tokens_and_publishes_nothing() -> None:
    notifier = next(user for user in substrate.SERVICES if user.name == "notifier")
    permissions = substrate.nats_permissions(notifier, NAMESPACE)["publish"]["allow"]
    for stream, durable in (
        (bus.EVENTS, bus.NOTIFIER_EVENTS_DURABLE),
        (bus.ANALYSES, bus.NOTIFIER_ANALYSES_DURABLE),
        (bus.RUNS, bus.NOTIFIER_RUNS_DURABLE),
    ):
        next_message = "$JS.API.CONSUMER.MSG.NEXT"
        assert (
            f"{next_message}.{NAMESPACE.stream(stream)}.{NAMESPACE.durable(durable)}" in permissions
        )
    assert not [subject for subject in permissions if subject.startswith("mldiag.events.")]
    # It reads the token directory, never writes it.
    assert f"$KV.{NAMESPACE.bucket(bus.TOKEN_DIRECTORY_BUCKET)}.>" not in permissions
    assert "notifier" in substrate.DATABASE_USERS


def test_the_stack_keeps_one_notifier_key_only_the_notifier_gets(tmp_path: Path) -> None:
    config = resolve_config(tmp_path / "home", environ={})
    locked = locked_down_substrate(config, environ={})
    key = locked.service_env("notifier")["MLDIAG_NOTIFIER_SECRET_KEY"]
    assert len(base64.urlsafe_b64decode(key)) == 32  # a Fernet key
    assert all(
        "MLDIAG_NOTIFIER_SECRET_KEY" not in locked.service_env(name)
        for name in locked.credentials
        if name != "notifier"
    )
    # Kept: the next start encrypts and decrypts with the same key; Kubernetes gets it too.
    again = locked_down_substrate(config, environ={})
    assert again.service_env("notifier")["MLDIAG_NOTIFIER_SECRET_KEY"] == key
    rendered = substrate.kubernetes_secrets(NAMESPACE, SECRETS, "postgres")
    assert f'"{substrate.notifier_secret_key(SECRETS)}"' in rendered


@pytest.mark.parametrize("user", substrate.SERVICES, ids=lambda user: user.name)
def test_a_service_gets_no_wildcard_over_the_bus(user: substrate.BusUser) -> None:
    permissions = substrate.nats_permissions(user, NAMESPACE)
    for allowed in permissions["publish"]["allow"] + permissions["subscribe"]["allow"]:
        assert allowed not in (">", "$JS.API.>", "$KV.>", "_INBOX.>", "mldiag.>")
    assert [s for s in permissions["subscribe"]["allow"] if s.startswith("_INBOX")] == [
        f"_INBOX.{user.name}.>"
    ]


def test_the_stack_gives_each_service_its_own_credentials(tmp_path: Path) -> None:
    config = resolve_config(tmp_path / "home", port_offset=7, environ={})
    locked = locked_down_substrate(config, environ={"MLDIAG_NATS_NAMESPACE": "other"})
    users = {locked.service_env(name)["MLDIAG_NATS_USER"] for name in locked.credentials}
    # Every service but the edge, which touches neither NATS nor PostgreSQL.
    assert users == set(config.services) - {"edge"} == set(substrate.SERVICE_NAMES)
    registry = locked.service_env("run-registry")["MLDIAG_DATABASE_URL"]
    assert registry.startswith("postgresql://mldiag_run_registry:")
    assert registry.endswith(f"@127.0.0.1:{config.postgres_port}/mldiag")
    assert '"other.runs.run.created.*"' in locked.nats_authorization
    # Made once, in the home's secrets directory, and the same on the next start.
    assert _mode(config.secrets_dir) == 0o700
    assert locked_down_substrate(config, environ={"MLDIAG_NATS_NAMESPACE": "other"}) == locked


def test_generate_for_compose_writes_owner_only_files_with_kept_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "substrate"
    assert main(["substrate", "generate", "--out", str(out)]) == 0
    assert "nats-auth.conf" in capsys.readouterr().out
    files = {path.name: path for path in out.iterdir()}
    for service in substrate.SERVICE_NAMES:
        assert f"{service}.env" in files
    assert all(_mode(path) == 0o600 for path in files.values())
    registry_env = files["run-registry.env"].read_text()
    assert "MLDIAG_NATS_USER=run-registry\n" in registry_env
    assert "@postgres:5432/mldiag" in registry_env
    # No DSN where no settings field reads it (compose's test checks every variable).
    assert "MLDIAG_DATABASE_URL" not in files["ingestion.env"].read_text()

    before = files["nats-auth.conf"].read_text()
    assert main(["substrate", "generate", "--out", str(out)]) == 0
    assert files["nats-auth.conf"].read_text() == before


def test_generate_for_kubernetes_prints_the_two_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "substrate"
    args = ["substrate", "generate", "--out", str(out), "--format", "k8s"]
    assert main([*args, "--postgres-host", "db"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    by_name = {doc["metadata"]["name"]: doc for doc in documents}
    assert set(by_name) == {"mldiag-nats-auth", "mldiag-credentials"}
    assert all(doc["kind"] == "Secret" for doc in documents)

    secrets = kept_secrets(out, substrate.SECRET_NAMES)
    auth = by_name["mldiag-nats-auth"]["stringData"]["auth.conf"]
    assert auth == substrate.nats_authorization(NAMESPACE, secrets)
    credentials = by_name["mldiag-credentials"]["stringData"]
    for service in substrate.SERVICE_NAMES:
        assert credentials[f"{service}-nats-password"] == secrets[f"nats-{service}"]
        assert credentials[f"{service}-database-url"] == substrate.database_url(
            service, secrets, "db"
        )

"""``mldiag import``: usage errors (exit 2), sources and platforms that do not answer
(exit 3), and ``import tensorboard`` against the real run-registry and ingestion: one line
per run, ``--dry-run`` that creates nothing, ``--format json`` reports, a damaged event
file imported up to the damage (exit 1)."""

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from mldiag.api_client import ApiError, RegistryClient
from mldiag.imports.tensorboard import find_runs, read_logdir
from sdk.cli.conftest import Platform, Result
from sdk.imports.event_files import write_run
from sdk.imports.platform_reads import read_points, wait_for_counts
from support import free_port

Mldiag = Callable[..., Result]


def test_a_logdir_that_is_not_a_directory_is_a_usage_error(mldiag: Mldiag, tmp_path: Path) -> None:
    result = mldiag("import", "tensorboard", str(tmp_path / "missing"))
    assert result.code == 2
    assert "is not a directory" in result.err


def test_mlflow_needs_a_tracking_server_url(
    mldiag: Mldiag, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    result = mldiag("import", "mlflow")
    assert (result.code, "--tracking-uri" in result.err) == (2, True)
    result = mldiag("import", "mlflow", "--tracking-uri", "file:///tmp/mlruns")
    assert (result.code, "http(s) URL" in result.err) == (2, True)


def test_an_mlflow_server_that_does_not_answer_exits_3(mldiag: Mldiag) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    result = mldiag("import", "mlflow", "--tracking-uri", closed, "--api-url", closed)
    assert result.code == 3
    assert "error: source_unreachable: cannot reach MLflow at" in result.err


def test_a_platform_that_does_not_answer_exits_3(mldiag: Mldiag, tmp_path: Path) -> None:
    write_run(tmp_path, range(3), start=time.time() - 60)
    result = mldiag(
        "import", "tensorboard", str(tmp_path), "--api-url", f"http://127.0.0.1:{free_port()}"
    )
    assert result.code == 3
    assert "cannot reach the mldiag API" in result.err


@pytest.mark.connected
def test_tensorboard_import_dry_run_then_real_then_again(
    mldiag: Mldiag, platform_apps: Platform, tmp_path: Path
) -> None:
    logdir = tmp_path / "experiment"
    write_run(logdir / "seed-1", range(30), start=time.time() - 3600)
    write_run(logdir / "seed-2", range(20), start=time.time() - 3600)
    urls = ("--api-url", platform_apps.api_url, "--ingestion-url", platform_apps.ingestion_url)
    run_ids = [run.run_id for run in read_logdir(logdir)]

    dry = mldiag("import", "tensorboard", str(logdir), "--dry-run", *urls)
    assert dry.code == 0, dry.err
    assert "read 90, sent 90, skipped as present 0" in dry.out
    assert "dry run: nothing was created or sent" in dry.out
    with RegistryClient(platform_apps.api_url, token=platform_apps.tokens.admin) as registry:
        with pytest.raises(ApiError) as missing:
            registry.get_run(run_ids[0])
        assert missing.value.status == 404

        done = mldiag("import", "tensorboard", str(logdir), "--run-prefix", "exp/", *urls)
        assert done.code == 0, done.err
        lines = done.out.splitlines()
        assert len(lines) == 2
        assert lines[0].startswith(f"{run_ids[0]}  'exp/seed-1' in 'experiment' (created): read 90")
        assert "not imported: 30 histograms, 30 images, 30 text plugin tensors" in lines[0]
        wait_for_counts(registry, run_ids[1], {"loss": 20, "lr": 20, "acc/top1": 20})
        assert [step for step, _, _ in read_points(registry, run_ids[1], "lr")] == list(range(20))
        assert registry.get_run(run_ids[1])["displayName"] == "exp/seed-2"
        wait_for_counts(registry, run_ids[0], {"loss": 30, "lr": 30, "acc/top1": 30})

        again = mldiag("import", "tensorboard", str(logdir), "--format", "json", *urls)
        assert again.code == 0, again.err  # without the prefix: the names differ now
        assert again.err.count("note: run tb-") == 2
        assert "has ended (COMPLETED) and takes no edits: displayName not updated" in again.err
        reports = json.loads(again.out)
        assert [(r["runId"], r["created"], r["pointsSent"]) for r in reports] == [
            (run_ids[0], False, 0),
            (run_ids[1], False, 0),
        ]
        assert [r["pointsPresent"] for r in reports] == [90, 60]


@pytest.mark.connected
def test_a_damaged_event_file_is_imported_up_to_the_damage_and_exits_1(
    mldiag: Mldiag, platform_apps: Platform, tmp_path: Path
) -> None:
    write_run(tmp_path, range(10), start=time.time() - 3600)
    ((_, (path,)),) = find_runs(tmp_path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    result = mldiag(
        "import", "tensorboard", str(tmp_path), "--api-url", platform_apps.api_url,
        "--ingestion-url", platform_apps.ingestion_url,
    )  # fmt: skip
    assert result.code == 1
    assert "warning:" in result.err
    assert "corrupt record at byte" in result.err
    assert "(created): read " in result.out

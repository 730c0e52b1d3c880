"""A real MLflow tracking server for the import tests, from a venv of its own.

``MLDIAG_TEST_MLFLOW_PYTHON`` names a Python with ``mlflow`` installed (CI makes one);
without it the venv ``.ci-venvs/mlflow`` is made on first use with uv. When neither works
the tests skip and say why: MLflow is far too heavy to be a dependency of the project.
"""

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from support import free_port

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".ci-venvs" / "mlflow"
START_TIMEOUT = 240  # the server imports for tens of seconds on a busy machine


def mlflow_python() -> Path:
    """A Python with mlflow, or a skip saying why there is none."""
    named = os.environ.get("MLDIAG_TEST_MLFLOW_PYTHON")
    if named:
        if not Path(named).exists():
            pytest.skip(f"MLDIAG_TEST_MLFLOW_PYTHON names {named}, which does not exist")
        return Path(named)
    python = VENV / "bin" / "python"
    if not python.exists():
        uv = shutil.which("uv") or str(ROOT / ".tools" / "bin" / "uv")
        try:
            subprocess.run([uv, "venv", "-q", "-p", "3.11", str(VENV)], check=True, timeout=120)
            subprocess.run(
                [uv, "pip", "install", "-q", "--python", str(python), "mlflow"],
                check=True,
                timeout=600,
            )
        except (OSError, subprocess.SubprocessError) as error:
            shutil.rmtree(VENV, ignore_errors=True)
            pytest.skip(
                f"no MLflow: set MLDIAG_TEST_MLFLOW_PYTHON, or let uv make {VENV} ({error})"
            )
    return python


@contextmanager
def mlflow_server(python: Path, workdir: Path) -> Iterator[str]:
    """``mlflow server`` on a SQLite store under ``workdir``; yields its URL."""
    port = free_port()
    log = (workdir / "mlflow.log").open("wb")
    command = [
        str(python), "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{workdir / 'mlflow.db'}",
        "--artifacts-destination", str(workdir / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise AssertionError(
                    f"mlflow server exited: {(workdir / 'mlflow.log').read_text()[-2000:]}"
                )
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not start"
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        log.close()

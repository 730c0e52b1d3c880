"""The README's "Walk-through from a fresh checkout", followed step by step: every shell block
marked ``<!-- walkthrough -->`` runs, in order and as written, in one bash against a real
embedded stack (its own ``MLDIAG_HOME``, config directory and ports), and what each step
says it does is checked in its output.
"""

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import world_readable_tempdir

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- walkthrough -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```bash\n(.*?)\n```", re.DOTALL)
BASE_PORTS = (4317, 4318, 8080, 8081, 8082, 8083, 8084, 8085, 8086, 8087, 8090, 14222, 18222, 15432)
STEP = "### walkthrough step {} ###"


def walkthrough_blocks(readme: str) -> list[str]:
    """The walk-through's shell blocks, in order."""
    return BLOCK.findall(readme)


def _free_offset() -> int:
    """A port offset whose whole range is free, below the ephemeral ports and XProf's 9100+."""
    import socket  # noqa: PLC0415

    def free(offset: int) -> bool:
        for port in BASE_PORTS:
            with socket.socket() as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    sock.bind(("127.0.0.1", port + offset))
                except OSError:
                    return False
        return True

    # Another start than the walking skeleton's, so the two can run side by side.
    return next(offset for offset in range(2_050, 14_000, 131) if free(offset))


@pytest.fixture
def places() -> Iterator[dict[str, str]]:
    """The walk-through's environment: a stack home, a config directory and ports of its own."""
    base = world_readable_tempdir("mldiag-walkthrough-")
    env = {
        **os.environ,
        "MLDIAG_HOME": str(base / "home"),
        "MLDIAG_CONFIG_DIR": str(base / "config"),
        "MLDIAG_PORT_OFFSET": str(_free_offset()),
        "TMPDIR": str(base),  # `mktemp -d` lands here, and goes with it
    }
    for name in ("MLDIAG_API_URL", "MLDIAG_TOKEN", "VIRTUAL_ENV"):
        env.pop(name, None)
    yield env
    subprocess.run(  # whatever a failed step left running
        [sys.executable, "-m", "mldiag.cli", "down", "--timeout", "20"],
        env=env,
        capture_output=True,
        check=False,
        timeout=60,
    )
    shutil.rmtree(base, ignore_errors=True)


def test_the_readme_has_a_walkthrough() -> None:
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    assert len(blocks) == 6
    commands = "\n".join(blocks)
    for step in ("mldiag up --detach", "mldiag login", "mldiag runs list", "mldiag jobs create"):
        assert step in commands


def test_the_readme_walkthrough_runs_as_written(places: dict[str, str]) -> None:
    blocks = walkthrough_blocks((ROOT / "README.md").read_text())
    script = "set -euo pipefail\n" + "\n".join(
        f"echo '{STEP.format(index)}'\n{block}" for index, block in enumerate(blocks)
    )
    bash = shutil.which("bash")
    assert bash, "the walk-through is bash"
    done = subprocess.run(  # the README's own commands, in one shell as a reader types them
        [bash, "-c", script],
        cwd=ROOT,
        env=places,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    transcript = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, transcript
    steps = re.split(r"### walkthrough step \d+ ###\n", done.stdout)[1:]
    assert len(steps) == len(blocks), transcript
    _install, up, login, first_run, job, stop = steps

    api = f"http://127.0.0.1:{8080 + int(places['MLDIAG_PORT_OFFSET'])}"
    assert "mldiag is up in" in up, transcript
    assert f"mldiag stack in {places['MLDIAG_HOME']}: healthy" in up, transcript
    assert f"logged in to {api}" in login, transcript
    assert f"{api} from the stored login" in login, transcript
    token = (Path(places["MLDIAG_HOME"]) / "admin-token").read_text().strip()
    assert token not in done.stdout + done.stderr  # the token is never printed
    assert "walkthrough" in first_run, transcript
    assert "hello from a job" in job, transcript
    assert "ended: JOB_STATE_SUCCEEDED" in done.stderr, transcript
    assert "logged out" in stop, transcript
    assert "stopped." in stop, transcript
    assert not (Path(places["MLDIAG_HOME"]) / "state.json").exists()

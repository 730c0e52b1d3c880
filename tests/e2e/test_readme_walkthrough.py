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

from stacks import free_port_offset
from support import world_readable_tempdir

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- walkthrough -->"
BLOCK = re.compile(re.escape(MARKER) + r"\n```bash\n(.*?)\n```", re.DOTALL)
STEP = "### walkthrough step {} ###"


def walkthrough_blocks(readme: str) -> list[str]:
    """The walk-through's shell blocks, in order."""
    return BLOCK.findall(readme)


@pytest.fixture
def places() -> Iterator[dict[str, str]]:
    """The walk-through's environment: a stack home, a config directory and ports of its own."""
    base = world_readable_tempdir("mldiag-walkthrough-")
    env = {
        **os.environ,
        "MLDIAG_HOME": str(base / "home"),
        "MLDIAG_CONFIG_DIR": str(base / "config"),
        # Another start than the walking skeleton's, so the two can run side by side.
        "MLDIAG_PORT_OFFSET": str(free_port_offset(start=2_050, stride=131)),
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

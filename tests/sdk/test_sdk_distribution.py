"""The SDK's distribution: a name of its own on PyPI (``mldiag`` is someone else's), the
license everywhere, and install lines in the docs that name it."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "libs" / "sdk"


def _project(path: Path) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads(path.read_text())["project"]
    return project


def test_the_distribution_is_mldiag_sdk_with_its_extras() -> None:
    project = _project(SDK / "pyproject.toml")
    assert project["name"] == "mldiag-sdk"
    assert project["license"] == "Apache-2.0"
    assert project["scripts"] == {"mldiag": "mldiag.cli:main"}
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    assert {"server", "system", "gcs"} <= set(extras)
    assert [re.split(r"[<>=]", r)[0] for r in extras["system"]] == ["psutil", "nvidia-ml-py"]
    # the build reads both next to the pyproject (the image copies them there too)
    assert (SDK / "README.md").is_file()
    assert (SDK / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()


def test_every_package_carries_the_license() -> None:
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    members = [ROOT, *(p.parent for p in ROOT.glob("*/pyproject.toml"))]
    members += [p.parent for p in ROOT.glob("*/*/pyproject.toml") if ".venv" not in p.parts]
    for member in members:
        assert _project(member / "pyproject.toml").get("license") == "Apache-2.0", member


def test_no_install_line_names_the_other_projects_distribution() -> None:
    # `pip install mldiag` or 'mldiag[extra]' would install an unrelated project
    wrong = re.compile(r"pip install\s+['\"]?mldiag(\[|['\"\s]|$)", re.MULTILINE)
    texts = [ROOT / "README.md", SDK / "README.md", *(ROOT / "docs").glob("**/*.md")]
    texts += list((SDK / "src").glob("**/*.py"))
    offenders = [str(path) for path in texts if wrong.search(path.read_text())]
    assert offenders == []

"""Packing a local directory of Python code into a wheel, for ``mldiag jobs create
--worker-pool-spec=…,local-package-path=DIR,python-module=trainer.task``.

No build backend runs (none may be installed, and nothing may be downloaded): the
directory's modules and packages are zipped as a pure-Python wheel (``py3-none-any``),
which pip installs anywhere and Python can even import straight from the zip. Name,
version and dependencies come from ``pyproject.toml``'s ``[project]`` table when there is
one. The wheel is reproducible (sorted entries, fixed times), so the same sources give the
same bytes, the same SHA-256 and one stored package.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

_SKIPPED_DIRS = frozenset({"__pycache__", "build", "dist", "node_modules", "venv"})
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_VERSION = re.compile(r"^[0-9][A-Za-z0-9.+!-]*$")
DEFAULT_VERSION = "0.0.0"
"""The version of a package whose directory does not say one."""


class PackagingError(Exception):
    """The directory cannot be packed as asked (a person's mistake, said plainly)."""


@dataclass(frozen=True)
class BuiltPackage:
    """A wheel built in memory."""

    filename: str
    data: bytes

    @property
    def sha256(self) -> str:
        """The SHA-256 of the wheel's bytes (hex)."""
        return hashlib.sha256(self.data).hexdigest()


def _source_root(directory: Path) -> Path:
    src = directory / "src"
    return src if src.is_dir() and (directory / "pyproject.toml").is_file() else directory


def _project_table(directory: Path) -> dict[str, object]:
    path = directory / "pyproject.toml"
    if not path.is_file():
        return {}
    try:
        document = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise PackagingError(f"{path} is not valid TOML: {error}") from None
    project = document.get("project")
    return project if isinstance(project, dict) else {}


def _has_python(path: Path) -> bool:
    return any(p.suffix == ".py" and not _skipped(p.relative_to(path)) for p in path.rglob("*.py"))


def _skipped(relative: Path) -> bool:
    return any(
        part.startswith(".") or part in _SKIPPED_DIRS or part.endswith(".egg-info")
        for part in relative.parts
    )


def _files(root: Path) -> list[tuple[str, Path]]:
    """(archive name, file) of every top-level module and every package's files."""
    chosen: list[tuple[str, Path]] = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(".") or entry.name in _SKIPPED_DIRS:
            continue
        if entry.is_file() and entry.suffix == ".py" and entry.name != "setup.py":
            chosen.append((entry.name, entry))
        elif entry.is_dir() and not entry.name.endswith(".egg-info") and _has_python(entry):
            for path in sorted(entry.rglob("*")):
                relative = path.relative_to(root)
                if path.is_file() and not _skipped(relative) and path.suffix not in (".pyc",):
                    chosen.append((relative.as_posix(), path))
    return chosen


def module_file(root: Path, module: str) -> Path | None:
    """The file ``python -m module`` would run from ``root``, if there is one."""
    parts = module.split(".")
    candidate = root.joinpath(*parts)
    for path in (candidate.with_suffix(".py"), candidate / "__main__.py"):
        if path.is_file():
            return path
    return None


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_wheel(directory: Path, python_module: str = "") -> BuiltPackage:
    """Pack ``directory`` (its ``src/`` when it is a ``pyproject.toml`` project with one) as
    a pure-Python wheel; with ``python_module``, check first that the wheel will hold it."""
    if not directory.is_dir():
        raise PackagingError(f"local-package-path {directory} is not a directory")
    root = _source_root(directory)
    if python_module and module_file(root, python_module) is None:
        path = python_module.replace(".", "/")
        raise PackagingError(
            f"python-module {python_module} is not in {root}: expected {path}.py"
            f" (or {path}/__main__.py) there"
        )
    files = _files(root)
    if not files:
        raise PackagingError(f"{root} holds no Python module or package to pack")
    project = _project_table(directory)
    name = str(project.get("name") or _default_name(python_module, files))
    version = str(project.get("version") or DEFAULT_VERSION)
    if not _NAME.fullmatch(name):
        raise PackagingError(f"package name {name!r} is not a valid distribution name")
    if not _VERSION.fullmatch(version):
        raise PackagingError(f"package version {version!r} is not a valid version")
    dependencies = project.get("dependencies") or []
    if not isinstance(dependencies, list):
        raise PackagingError("[project] dependencies must be a list of requirements")
    stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version.replace('-', '_')}"
    dist_info = f"{stem}.dist-info"
    metadata = "".join(
        [
            "Metadata-Version: 2.1\n",
            f"Name: {name}\n",
            f"Version: {version}\n",
            *(f"Requires-Dist: {requirement}\n" for requirement in dependencies),
        ]
    )
    wheel_file = "Wheel-Version: 1.0\nGenerator: mldiag\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    entries = [(arcname, path.read_bytes()) for arcname, path in files]
    entries += [
        (f"{dist_info}/METADATA", metadata.encode()),
        (f"{dist_info}/WHEEL", wheel_file.encode()),
    ]
    record = "".join(f"{arc},{_record_hash(data)},{len(data)}\n" for arc, data in entries)
    record += f"{dist_info}/RECORD,,\n"
    entries.append((f"{dist_info}/RECORD", record.encode()))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, data in entries:
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return BuiltPackage(f"{stem}-py3-none-any.whl", buffer.getvalue())


def _default_name(python_module: str, files: list[tuple[str, Path]]) -> str:
    if python_module:
        return python_module.split(".", maxsplit=1)[0].replace("_", "-")
    first = files[0][0].split("/")[0]
    return first.removesuffix(".py").replace("_", "-")

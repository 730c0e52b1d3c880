"""Launch preparation: what a ``StartReplica`` becomes on a machine without containers.

- **Outputs.** The scheduler hands out URIs (``AIP_MODEL_DIR`` …); ordinary code writes
  directories. With file storage (``file://<root>``) ``gs://B/P`` is ``<root>/gs/B/P`` and
  ``file:///x`` is ``/x``; with GCS storage a directory under the attempt is pulled at start
  and pushed at exit. The URIs stay in ``MLDIAG_AIP_MODEL_URI`` (``…_CHECKPOINT_URI``,
  ``…_TENSORBOARD_LOG_URI``).
- **Images.** The image table maps an image prefix to an interpreter (or a venv); the
  longest prefix wins; anything unmatched runs with the executor's own interpreter and a
  note at the head of the replica's stderr log.
- **Packages.** ``pythonPackageSpec.packageUris`` are fetched and ``pip install --target``-ed
  once into ``<state>/packages/<sha256 of their bytes>``, then put on ``PYTHONPATH``.

Every failure here is a :class:`~mldiag_executor.errors.SetupFailed`: the attempt never got
going, and the message says why (with pip's last lines).
"""

import asyncio
import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

import structlog

from mldiag_executor.backends.base import PreparedLaunch
from mldiag_executor.errors import SetupFailed
from mldiag_platform.errors import MldiagError
from mldiag_platform.storage import GcsStore, ObjectStore
from mldiag_schemas.replicas import ReplicaKey, StartReplica

log = structlog.get_logger(__name__)

OUTPUT_VARIABLES = {
    "AIP_MODEL_DIR": "MLDIAG_AIP_MODEL_URI",
    "AIP_CHECKPOINT_DIR": "MLDIAG_AIP_CHECKPOINT_URI",
    "AIP_TENSORBOARD_LOG_DIR": "MLDIAG_AIP_TENSORBOARD_LOG_URI",
}
"""The output directories a replica gets, and where their URIs are kept."""

PIP_TAIL_CHARS = 4000
"""How much of pip's output a setup failure carries."""

_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def attempt_name(key: ReplicaKey) -> str:
    """The attempt's directory name: ``<job>-p<pool>-i<index>-a<attempt>``."""
    return f"{key.job_id}-p{key.pool}-i{key.index}-a{key.attempt}"


# --- storage URIs → local paths ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Storage:
    """The platform's object storage as the executor sees it (``MLDIAG_STORAGE_URL``)."""

    url: str
    _buckets: dict[str, ObjectStore] = field(default_factory=dict, compare=False, repr=False)

    @property
    def file_root(self) -> Path | None:
        """The local root of file storage; None for GCS."""
        parsed = urlparse(self.url)
        if parsed.scheme == "file":
            return Path(parsed.netloc + parsed.path).resolve()
        return None

    def local_path(self, uri: str) -> Path | None:
        """The local path of ``uri``, or None when it lives in GCS and must be synced.

        ``file:///x`` is ``/x``; ``gs://B/P`` is ``<root>/gs/B/P`` on file storage.
        """
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            return Path(parsed.netloc + parsed.path)
        if parsed.scheme == "gs" and parsed.netloc:
            root = self.file_root
            if root is None:
                return None
            relative = PurePosixPath(parsed.path.lstrip("/"))
            if ".." in relative.parts:
                raise SetupFailed(f"{uri!r}: '..' is not allowed in a storage URI")
            return root / "gs" / parsed.netloc / relative
        raise SetupFailed(f"unsupported storage URI {uri!r}: use gs://BUCKET/PATH or file:///PATH")

    def gcs_object(self, uri: str) -> tuple[ObjectStore, str]:
        """The store and key of a ``gs://`` URI (GCS storage only)."""
        parsed = urlparse(uri)
        store = self._buckets.get(parsed.netloc)
        if store is None:  # one client per bucket: building one reads credentials
            store = self._buckets[parsed.netloc] = GcsStore(parsed.netloc)
        return store, parsed.path.lstrip("/")


async def read_uri(storage: Storage, uri: str) -> bytes:
    """The bytes at ``uri`` (``file://``, or ``gs://`` through file storage or GCS)."""
    try:
        path = storage.local_path(uri)
        if path is not None:
            return await asyncio.to_thread(path.read_bytes)
        store, key = storage.gcs_object(uri)
        return await store.get(key)
    except MldiagError:
        raise
    except Exception as exc:  # any failure to fetch is the attempt's setup
        raise SetupFailed(f"cannot fetch {uri!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class SyncedOutput:
    """An output directory given locally and pushed to GCS at exit."""

    local: Path
    uri: str


async def pull_output(storage: Storage, output: SyncedOutput) -> None:
    """Download what ``output.uri`` holds already (a checkpoint to resume from)."""
    store, prefix = storage.gcs_object(output.uri)
    prefix = prefix.rstrip("/") + "/" if prefix.strip("/") else ""
    for key in await store.list(prefix):
        relative = key[len(prefix) :]
        if relative and ".." not in PurePosixPath(relative).parts:
            await store.download_to(key, output.local / relative)


async def push_output(storage: Storage, output: SyncedOutput) -> None:
    """Upload every file of ``output.local`` under ``output.uri``."""
    store, prefix = storage.gcs_object(output.uri)
    prefix = prefix.rstrip("/")
    files = await asyncio.to_thread(
        lambda: [path for path in output.local.rglob("*") if path.is_file()]
    )
    for path in files:
        relative = path.relative_to(output.local).as_posix()
        await store.upload_from(path, f"{prefix}/{relative}" if prefix else relative)


# --- images → interpreters -----------------------------------------------------------------


def interpreter_for(image_uri: str, images: Mapping[str, str]) -> tuple[str, str | None]:
    """The interpreter of ``image_uri`` and a note when none matched (the longest matching
    prefix wins; a directory is a venv: its ``bin/python``)."""
    matches = [prefix for prefix in images if image_uri.startswith(prefix)]
    if not matches:
        return sys.executable, (
            f"mldiag executor: image {image_uri!r} matches no entry of MLDIAG_EXECUTOR_IMAGES;"
            f" running with the executor's own interpreter {sys.executable}"
        )
    target = Path(images[max(matches, key=len)])
    if target.is_dir():
        target = target / "bin" / "python"
    return str(target), None


# --- packages ------------------------------------------------------------------------------


def package_key(packages: list[tuple[str, bytes]]) -> str:
    """The cache key of a set of packages: sha256 over their names and bytes, in order."""
    digest = hashlib.sha256()
    for name, data in packages:
        digest.update(f"{name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def _has_pip(python: str) -> bool:
    try:
        return (
            subprocess.run(  # an interpreter from the executor's own table
                [python, "-m", "pip", "--version"],
                capture_output=True,
                timeout=30,
                check=False,
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_pip(python: str) -> list[str] | None:
    """A pip to install with: the replica's interpreter's, the executor's, or python3's."""
    candidates = [python, sys.executable]
    if python3 := shutil.which("python3"):
        candidates.append(python3)
    for candidate in dict.fromkeys(candidates):
        if _has_pip(candidate):
            return [candidate, "-m", "pip"]
    return None


async def install_packages(
    packages: list[tuple[str, bytes]], python: str, cache: Path, timeout_seconds: float
) -> Path:
    """Install ``packages`` (file name, bytes) into ``<cache>/<key>`` once; the directory.

    Two installs of the same key at once each build a temporary directory and rename it;
    the first rename wins and the other is dropped, so a reader never sees half a tree.
    """
    target = cache / package_key(packages)
    if target.is_dir():
        return target
    pip = await asyncio.to_thread(find_pip, python)
    if pip is None:
        raise SetupFailed(f"no pip to install packages with ({python} has none, nor python3)")
    work = cache / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"
    downloads, staged = work / "downloads", work / "site"
    downloads.mkdir(parents=True)
    try:
        files = []
        for position, (name, data) in enumerate(packages):
            path = downloads / f"{position}" / name
            path.parent.mkdir()
            path.write_bytes(data)
            files.append(str(path))
        process = await asyncio.create_subprocess_exec(
            *pip,
            "install",
            "--target",
            str(staged),
            "--no-input",
            "--disable-pip-version-check",
            *files,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "PIP_ROOT_USER_ACTION": "ignore"},
        )
        try:
            output, _ = await asyncio.wait_for(process.communicate(), timeout_seconds)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise SetupFailed(f"pip install took longer than {timeout_seconds:g} s") from None
        if process.returncode != 0:
            tail = output.decode("utf-8", "replace")[-PIP_TAIL_CHARS:]
            raise SetupFailed(f"pip install failed (exit {process.returncode}):\n{tail}")
        staged.mkdir(exist_ok=True)  # a package with nothing to install is still installed
        with contextlib.suppress(OSError):  # another install of the same key won the race
            staged.rename(target)
        if not target.is_dir():
            raise SetupFailed(f"cannot place the installed packages at {target}")
        return target
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --- the whole preparation ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    """What launch preparation needs from the executor's settings."""

    storage: Storage
    state_dir: Path
    images: Mapping[str, str] = field(default_factory=dict)
    pip_timeout_seconds: float = 600.0

    @property
    def attempts_dir(self) -> Path:
        """Where every attempt's directory lives."""
        return self.state_dir / "attempts"

    @property
    def packages_dir(self) -> Path:
        """The package cache."""
        return self.state_dir / "packages"

    def attempt_dir(self, key: ReplicaKey) -> Path:
        """The directory of one attempt."""
        return self.attempts_dir / attempt_name(key)


async def prepare(command: StartReplica, config: LaunchConfig) -> PreparedLaunch:
    """Turn ``command`` into something a process backend can run; see the module's doc.

    Creates the attempt's directory with ``work/`` (and ``outputs/`` on GCS storage).
    """
    spec = command.launch
    attempt_dir = config.attempt_dir(command.replica)
    working_dir = attempt_dir / "work"
    await asyncio.to_thread(working_dir.mkdir, parents=True, exist_ok=True)
    env = dict(spec.env)
    synced = await _map_outputs(env, attempt_dir, config.storage)
    python, note = interpreter_for(spec.image_uri, config.images)
    if not await asyncio.to_thread(Path(python).exists):
        raise SetupFailed(f"the interpreter {python!r} for image {spec.image_uri!r} is missing")
    # `python` in a command or a script finds the image's interpreter first.
    inherited = env.get("PATH") or os.environ.get("PATH", "")
    env["PATH"] = os.pathsep.join(part for part in (str(Path(python).parent), inherited) if part)
    if spec.package_uris:
        site = await _install(spec.package_uris, spec.python_module, python, config)
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(site), env.get("PYTHONPATH", "")) if part
        )
    return PreparedLaunch(
        key=command.replica,
        python=python,
        argv=_argv(command, python),
        env=env,
        attempt_dir=attempt_dir,
        working_dir=working_dir,
        logs_uri=spec.logs_uri,
        resources=spec.resources,
        port=spec.port,
        deadline=command.deadline,
        notes=[note] if note else [],
        outputs=[(output.local, output.uri) for output in synced],
    )


async def _map_outputs(
    env: dict[str, str], attempt_dir: Path, storage: Storage
) -> list[SyncedOutput]:
    """Replace the output URIs in ``env`` by local directories (made here); the ones to sync."""
    synced: list[SyncedOutput] = []
    for variable, uri_variable in OUTPUT_VARIABLES.items():
        uri = env.get(variable)
        if not uri:
            continue
        env[uri_variable] = uri
        local = storage.local_path(uri)
        if local is None:
            local = attempt_dir / "outputs" / variable.lower()
            output = SyncedOutput(local, uri)
            await asyncio.to_thread(local.mkdir, parents=True, exist_ok=True)
            try:
                await pull_output(storage, output)
            except Exception as exc:  # the attempt cannot resume without it
                raise SetupFailed(f"cannot pull {uri!r}: {exc}") from exc
            synced.append(output)
        else:
            try:
                await asyncio.to_thread(local.mkdir, parents=True, exist_ok=True)
            except OSError as exc:
                raise SetupFailed(f"cannot create {local} for {variable}: {exc}") from exc
        env[variable] = f"{local}/" if uri.endswith("/") else str(local)
    return synced


async def _install(uris: list[str], module: str, python: str, config: LaunchConfig) -> Path:
    if not module:
        raise SetupFailed("packageUris need a pythonModule to run")
    packages = []
    for uri in uris:
        name = PurePosixPath(urlparse(uri).path).name or "package.tar.gz"
        packages.append((name, await read_uri(config.storage, uri)))
    return await install_packages(packages, python, config.packages_dir, config.pip_timeout_seconds)


def _argv(command: StartReplica, python: str) -> list[str]:
    spec = command.launch
    if spec.python_module:
        return [python, "-m", spec.python_module, *spec.args]
    if not spec.command:
        raise SetupFailed("nothing to run: neither a command nor a python module")
    argv = list(spec.command)
    if _PYTHON.fullmatch(argv[0]):  # a container's `python` is the image's: here, the table's
        argv[0] = python
    return argv

"""Pre-warming XProf's caches for one session directory, in a process of its own.

``python -P -m mldiag_xprof_provisioner.warm.child DIR`` converts every ``<host>.xplane.pb``
in ``DIR`` the way XProf's server would on the first open, so the server finds the results
next to the xplanes and answers from them:

- ``trace_viewer@`` per host (the streaming trace viewer: ``<host>.SSTABLE``,
  ``<host>.metadata.SSTABLE``, ``<host>.trie.SSTABLE``), with the UI's default options;
- ``overview_page`` over all hosts (``ALL_HOSTS.op_stats_v2.pb``, which other tools reuse);
- ``cache_version.txt`` with XProf's version, last: without it the server logs "Cache version
  file not found, invalidating cache" and converts again. It is also the marker the
  provisioner uploads after the other caches.

A separate process because conversion takes 50-90x the xplane in memory and never gives it
back; the process exiting is what returns it. It prints one JSON line (hosts, seconds) on
success and exits non-zero on failure.
"""

import json
import sys
import time
from pathlib import Path

from mldiag_schemas.profiling import XPLANE_SUFFIX
from mldiag_xprof_provisioner.files import CACHE_VERSION_FILE
from mldiag_xprof_provisioner.orphans import die_with_parent

TRACE_VIEWER_OPTIONS = {"resolution": 8000, "full_dma": False}
"""What XProf's data route passes for a first ``trace_viewer@`` request."""


def warm(directory: Path) -> dict[str, object]:
    """Convert the session in ``directory``; returns a summary."""
    from xprof import version  # type: ignore[import-untyped]  # noqa: PLC0415  # heavy, untyped
    from xprof.convert import raw_to_tool_data  # type: ignore[import-untyped]  # noqa: PLC0415

    xplanes = sorted(p for p in directory.iterdir() if p.name.endswith(XPLANE_SUFFIX))
    if not xplanes:
        raise FileNotFoundError(f"no {XPLANE_SUFFIX} file in {directory}")
    hosts = [p.name[: -len(XPLANE_SUFFIX)] for p in xplanes]
    timings: dict[str, float] = {}
    for path, host in zip(xplanes, hosts, strict=True):
        started = time.perf_counter()
        params = {"hosts": [host], "trace_viewer_options": TRACE_VIEWER_OPTIONS}
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(path)], "trace_viewer@", params)
        if data is None:
            raise ValueError(f"trace_viewer@ conversion of {path.name} returned nothing")
        timings[f"trace_viewer@:{host}"] = round(time.perf_counter() - started, 3)
    started = time.perf_counter()
    data, _ = raw_to_tool_data.xspace_to_tool_data(
        [str(path) for path in xplanes], "overview_page", {"hosts": hosts}
    )
    if data is None:
        raise ValueError("overview_page conversion returned nothing")
    timings["overview_page"] = round(time.perf_counter() - started, 3)
    (directory / CACHE_VERSION_FILE).write_text(version.__version__)
    return {"hosts": hosts, "seconds": timings, "xprof": version.__version__}


def main(argv: list[str] | None = None) -> int:
    """Warm ``argv[0]``; print the summary as JSON."""
    die_with_parent()
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python -m mldiag_xprof_provisioner.warm.child DIR\n")
        return 2
    summary = warm(Path(args[0]))
    sys.stdout.write(json.dumps(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

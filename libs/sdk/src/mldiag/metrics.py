"""The official SDK's recording functions, on the current run (see :func:`mldiag.init`).

``record`` and ``record_metrics`` never block and never raise for telemetry reasons. As in
the official SDK, they record on process 0 only unless ``record_on_all_hosts`` is set
(``Run.log`` records on every host).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from mldiag.run import Run, current_run

logger = logging.getLogger("mldiag")
_warned = False


def record(
    metric_name: str,
    value: Any,
    step: int | None = None,
    labels: Mapping[str, str] | None = None,
    record_on_all_hosts: bool = False,
) -> None:
    """Record one value on the current run (at its current step when ``step`` is None)."""
    run = _recording_run(record_on_all_hosts)
    if run is not None:
        run.record(metric_name, value, step, labels)


def record_metrics(
    metrics: Iterable[Mapping[str, Any]],
    step: int | None = None,
    record_on_all_hosts: bool = False,
) -> None:
    """Record several ``{"metric_name", "value", "step"?, "labels"?}`` items at once."""
    run = _recording_run(record_on_all_hosts)
    if run is None:
        return
    for item in metrics:
        try:
            name, value = item["metric_name"], item["value"]
        except (KeyError, TypeError):
            logger.warning("mldiag.record.bad_item item=%r (skipped)", item)
            continue
        run.record(name, value, item.get("step", step), item.get("labels"))


def _recording_run(record_on_all_hosts: bool) -> Run | None:
    """The run to record on: None without a run (warned once) and, like the official SDK,
    on hosts other than process 0 unless ``record_on_all_hosts``."""
    run = current_run()
    if run is None:
        _warn_no_run()
        return None
    if run.process_index != 0 and not record_on_all_hosts:
        return None
    return run


def _warn_no_run() -> None:
    global _warned  # noqa: PLW0603  # warn once per process, not once per call
    if not _warned:
        _warned = True
        logger.warning("mldiag.record.no_run (call mldiag.init or machinelearning_run first)")

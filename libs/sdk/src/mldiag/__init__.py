"""mldiag: the Python SDK and the ``mldiag`` CLI (``mldiag up`` runs the platform locally).

Record a run::

    import mldiag

    with mldiag.init(name="llama-8b", run_set="pretrain", configs={"lr": 3e-4}) as run:
        for step in range(1000):
            run.log({"loss": loss, "learning_rate": lr})

or, with the official SDK's names, ``mldiag.machinelearning_run(...)`` and
``mldiag.metrics.record("loss", loss, step=step)``; profile with ``mldiag.xprof()``
(``start``/``stop``, a ``with`` block or a decorator). ``mldiag.data_wait()``,
``mldiag.checkpoint()`` and ``mldiag.preemption_notice()`` mark the current run from code
that does not hold it. A tuning job's trial reports its objective with
``mldiag.report_hyperparameter_tuning_metric(tag, value, global_step)`` (or Google's
``cloudml-hypertune``, forwarded by the replica launcher). ``mldiag.LogHandler`` ships a
program's ``logging`` records to its run's logs. Importing this package does no I/O.

Habits from other tools work too: ``mldiag.init(config={...}, project=..., location=...)``,
then ``mldiag.log({"loss": loss})`` and ``mldiag.finish()`` on the current run
(``mldiag.current_run()``). ``MLDIAG_MODE=disabled`` makes every call a no-op (CI,
notebooks); ``MLDIAG_MODE=offline`` records to disk and ``mldiag sync`` uploads it later.
"""

from mldiag import metrics
from mldiag.config import Mode, ModeError
from mldiag.control import RunControl, RunPhase, RunSpec
from mldiag.hypertune import report_hyperparameter_tuning_metric
from mldiag.instrument import checkpoint, data_wait, preemption_notice
from mldiag.logs import LogHandler
from mldiag.run import (
    NoActiveRunError,
    Run,
    current_run,
    finish,
    init,
    log,
    machinelearning_run,
)
from mldiag.signals import SignalKind
from mldiag.xprof import XProf, XProfError, xprof

__all__ = [
    "LogHandler",
    "Mode",
    "ModeError",
    "NoActiveRunError",
    "Run",
    "RunControl",
    "RunPhase",
    "RunSpec",
    "SignalKind",
    "XProf",
    "XProfError",
    "checkpoint",
    "current_run",
    "data_wait",
    "finish",
    "init",
    "log",
    "machinelearning_run",
    "metrics",
    "preemption_notice",
    "report_hyperparameter_tuning_metric",
    "xprof",
]

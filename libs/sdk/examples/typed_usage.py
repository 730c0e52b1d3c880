"""Typed usage examples of the SDK, checked by mypy (strict) with the rest of the repository.

Not run by the tests; each function shows one way in and must keep type-checking.
"""

import contextlib
import logging

import mldiag
from mldiag.logs import LogShipper


def pythonic(losses: list[float]) -> None:
    """``init`` / ``log`` / a ``with`` block that marks the run COMPLETED or FAILED."""
    with mldiag.init(name="llama-8b", run_set="pretrain", configs={"lr": 3e-4}) as run:
        for loss in losses:
            run.log({"loss": loss, "learning_rate": 3e-4})  # step 0, 1, 2, ...
        run.log({"eval_loss": 1.5}, step=run.step, labels={"split": "validation"})
        sent: bool = run.flush(timeout=5.0)
        print(run.run_id, run.host, run.process_index, sent)  # noqa: T201  # an example


def explicit_lifecycle() -> None:
    """Start and finish by hand, with a deterministic run for every host of one job."""
    run: mldiag.Run = mldiag.init(
        name="sweep-3",
        workload_id="sweep-3",
        api_url="http://127.0.0.1:8080",
        ingestion_url="http://127.0.0.1:8081",
        shutdown_timeout=5.0,
    )
    try:
        run.log({"loss": 0.5}, step=10)
    except KeyboardInterrupt:
        run.finish("FAILED", error="interrupted")
        raise
    all_sent: bool = run.finish(mldiag.RunPhase.COMPLETED)  # reports, never raises
    if not all_sent:
        print("the rest stays spooled and is replayed by the next run")  # noqa: T201


def habits_from_other_tools(losses: list[float]) -> None:
    """W&B-style module-level calls, ``config=``, a project and location, and the modes."""
    mldiag.init(
        name="resnet",
        config={"optimizer": {"name": "adam", "lr": 3e-4}},
        project="vision",
        location="us-central1",
        mode="offline",  # or "disabled", or MLDIAG_MODE; upload later with `mldiag sync`
    )
    for loss in losses:
        mldiag.log({"loss": loss})
    run = mldiag.current_run()
    if run is not None and run.mode is mldiag.Mode.OFFLINE:
        print("recorded offline:", run.run_id)  # noqa: T201  # an example
    done: bool = mldiag.finish()
    try:
        mldiag.log({"loss": 0.0})
    except mldiag.NoActiveRunError as error:
        print(error.code, done)  # noqa: T201  # "no_active_run": the run has finished


def official_names(step: int) -> None:
    """The official SDK's names: moving over is an import change."""
    run = mldiag.machinelearning_run(
        name="gemma",
        run_group="finetune",
        configs={"batch_size": 32},
        gcs_path="gs://bucket/runs",
        base_url="http://127.0.0.1:8080",
    )
    mldiag.metrics.record("loss", 0.25, step=step)
    mldiag.metrics.record("throughput", 1200.0, labels={"device": "0"})
    mldiag.metrics.record_metrics(
        [{"metric_name": "mfu", "value": 41.0}, {"metric_name": "tflops", "value": 310.0}],
        step=step,
    )
    assert mldiag.current_run() is run  # noqa: S101  # an example
    run.finish()


def framework_marks(batches: list[list[float]]) -> None:
    """Input waits, blocking checkpoint saves and JAX compilations as metrics."""
    run = mldiag.init(name="marked")
    run.watch_jax()  # only needed when JAX is imported after init
    iterator = iter(batches)
    for step in range(len(batches)):
        with run.data_wait():  # data_wait_time, recorded at the step logged next
            batch = next(iterator)
        run.log({"loss": sum(batch)}, step=step)
        if step % 100 == 0:
            with run.checkpoint():  # checkpoint_time at this step
                pass
    with mldiag.data_wait(), mldiag.checkpoint():  # the current run's, from library code
        pass
    run.finish()


def lifecycle_signals(returncode: int) -> None:
    """Signals for the event detector, from a launcher or an orchestrator's hook."""
    run = mldiag.init(name="launched")
    notified: bool = mldiag.preemption_notice("maintenance")
    accepted: bool = run.report_signal(
        mldiag.SignalKind.PROCESS_EXITED, exit_code=returncode, reason="", timeout=2.0
    )
    run.report_signal("PROCESS_EXITED", signal="SIGKILL", reason="oom_killed")
    print(notified, accepted)  # noqa: T201  # an example
    run.finish("FAILED", error="exit 137", error_code="SIGKILL")


def profiles(steps: int) -> None:
    """Programmatic traces (start/stop, a block, a decorator) and on-demand captures."""
    run = mldiag.init(name="profiled", gcs_path="gs://bucket/runs", profiler_port=9999)
    prof: mldiag.XProf = mldiag.xprof(process_index_list=[0], host_tracer_level=2)
    session: str = prof.start()  # trace-YYYYMMDD-HHMMSS-<6 hex>
    prof.stop()
    with mldiag.xprof(run, session_id="warmup") as block:
        assert block.session_id == "warmup"  # noqa: S101  # an example

    @mldiag.xprof(python_tracer_level=1)
    def train_step(step: int) -> float:
        return float(step)

    loss: float = train_step(steps)
    with contextlib.suppress(mldiag.XProfError):  # stop() without start() raises
        prof.stop()
    print(session, loss)  # noqa: T201  # an example
    run.finish()  # waits for the uploads


def logs(lines: list[str]) -> None:
    """A program's ``logging`` records as its run's log lines, and lines shipped by hand."""
    handler = mldiag.LogHandler()
    logging.getLogger().addHandler(handler)
    run = mldiag.init(name="logged")
    logging.getLogger(__name__).warning("loss is rising")  # a WARNING line of the run
    shipper = LogShipper(run.settings.ingestion_url, run.run_id, run.settings.token, host="h1")
    for line in lines:
        shipper.write(line, "STDERR", pid=42)
    stored: bool = shipper.close(timeout=5.0)
    print(stored, shipper.sent, shipper.dropped)  # noqa: T201  # an example
    run.finish()
    handler.close()

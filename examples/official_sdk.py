"""The official ``google-cloud-mldiagnostics`` SDK, unchanged, recording into mldiag.

Shows that a program written for Google Cloud ML Diagnostics needs only environment
variables to record into a self-hosted mldiag (docs/otlp.md, docs/sdk.md): the SDK's
self-hosted mode creates and ends the run through the API (``DIAGON_BASE_URL``, the token
as the password of the URL) and exports metrics and configs over OTLP/gRPC to ingestion
(``OTEL_EXPORTER_OTLP_ENDPOINT``).

    pip install 'google-cloud-mldiagnostics[otel]' jax
    export DIAGON_BASE_URL=http://sdk:$MLDIAG_TOKEN@127.0.0.1:8080
    export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_INSECURE=true
    export OTEL_EXPORTER_OTLP_HEADERS=authorization=Bearer%20$MLDIAG_TOKEN
    export OTEL_METRIC_EXPORT_INTERVAL=200   # ms; the SDK's default is 60 s
    python examples/official_sdk.py --workload official-sdk-example

It prints the run's name (``machineLearningRuns/<id>``). Each step is held a little longer
than the export interval: the SDK's metrics are OpenTelemetry gauges, which export the last
value of each collection.
"""

import argparse
import time

from google_cloud_mldiagnostics import machinelearning_run, metrics


def main() -> None:
    """Record a few steps of a loss and a learning rate with the official names."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="official-sdk-example", help="run_workload_id")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--seconds-per-step", type=float, default=0.8)
    args = parser.parse_args()

    run = machinelearning_run(
        name="official-sdk-example",
        run_group="examples",
        configs={"learning_rate": 0.01, "optimizer": {"name": "adam"}},
        run_workload_id=args.workload,
        metrics_record_interval_sec=0,
    )
    print(run.name, flush=True)  # noqa: T201
    for step in range(1, args.steps + 1):
        metrics.record("loss", 1.0 / step, step=step, labels={"phase": "train"})
        metrics.record("learning_rate", 0.01, step=step)
        time.sleep(args.seconds_per_step)


if __name__ == "__main__":
    main()

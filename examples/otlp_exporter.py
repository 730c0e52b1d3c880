"""OpenTelemetry metrics exported over OTLP/HTTP to mldiag, without the mldiag SDK.

Shows what any OpenTelemetry-instrumented program needs to write to mldiag
(docs/otlp.md): an ``OTLPMetricExporter`` (``http/protobuf``) pointed at the API URL's
``/v1/metrics`` with the token as a Bearer header, the run named by the resource attribute
``mldiag.run_id``, and a ``training_step`` gauge beside each metric, with the same
attributes, giving the points their step. Each step is exported with ``force_flush`` so
every step's gauge value is sent (a gauge exports only its last value per collection).

The run itself is created first with one plain HTTP call (OTLP carries points, not runs).

    pip install opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
    export MLDIAG_API_URL=http://127.0.0.1:8080 MLDIAG_TOKEN=...
    python examples/otlp_exporter.py --run-id otlp-example --steps 20

An OTLP/gRPC exporter works the same way on ingestion's port 4317.
"""

import argparse
import json
import math
import os
import urllib.error
import urllib.request

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

API_URL = os.environ.get("MLDIAG_API_URL", "http://127.0.0.1:8080").rstrip("/")
TOKEN = os.environ.get("MLDIAG_TOKEN", "")
HOUR_MS = 3_600_000


def create_run(run_id: str) -> None:
    """Create the run (an existing one is fine: a rerun writes into it)."""
    body = json.dumps({"runId": run_id, "displayName": "OTLP exporter example"}).encode()
    request = urllib.request.Request(  # noqa: S310 (the API URL is the user's, http or https)
        f"{API_URL}/v1/machineLearningRuns",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10):  # noqa: S310
            pass
    except urllib.error.HTTPError as exc:
        if exc.code != 409:  # 409: the run exists already
            raise


def main() -> None:
    """Export ``--steps`` steps of a loss and a learning rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", default="otlp-example")
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    create_run(args.run_id)

    exporter = OTLPMetricExporter(
        endpoint=f"{API_URL}/v1/metrics", headers={"authorization": f"Bearer {TOKEN}"}
    )
    # Exports happen on force_flush below; the periodic export is only a backstop.
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=HOUR_MS)
    resource = Resource.create({"service.name": "otlp-example", "mldiag.run_id": args.run_id})
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("examples.otlp_exporter")
    loss = meter.create_gauge("loss")
    learning_rate = meter.create_gauge("learning_rate")
    training_step = meter.create_gauge("training_step")

    attributes = {"phase": "train"}
    for step in range(1, args.steps + 1):
        loss.set(2.0 * math.exp(-step / 10), attributes)
        learning_rate.set(0.01, attributes)
        training_step.set(step, attributes)
        if not provider.force_flush(timeout_millis=10_000):
            raise SystemExit(f"the export of step {step} did not finish")
    provider.shutdown()
    print(f"exported {args.steps} steps to run {args.run_id}", flush=True)  # noqa: T201


if __name__ == "__main__":
    main()

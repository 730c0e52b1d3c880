"""MLflow side of benchmarks/metrics_e2e.py; runs in the throwaway MLflow venv.

``setup URI`` prints a new run id; ``log URI RUN FIRST COUNT GO_FILE`` waits for GO_FILE,
then logs steps FIRST..FIRST+COUNT-1 of metric ``loss`` with ``log_batch`` (1000 per call);
``read URI RUN REPEAT`` prints the median seconds of ``get_metric_history(RUN, "loss")``.
"""

import os
import statistics
import sys
import time

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient


def main() -> None:
    """Dispatch on the first argument."""
    mode, uri = sys.argv[1], sys.argv[2]
    client = MlflowClient(tracking_uri=uri)
    if mode == "setup":
        experiment = client.create_experiment(f"bench-{os.getpid()}-{time.time_ns()}")
        sys.stdout.write(client.create_run(experiment).info.run_id + "\n")
    elif mode == "log":
        run_id, first, count, go = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
        stamp = int(time.time() * 1000)
        batches = [
            [
                Metric("loss", step * 0.001, stamp, step)
                for step in range(s, min(s + 1000, first + count))
            ]
            for s in range(first, first + count, 1000)
        ]
        # one call before the clock starts: connections and lazy imports are warm, as in a
        # long training run
        client.log_batch(run_id, metrics=[Metric("warmup", 0.0, stamp, first)])
        while not os.path.exists(go):
            time.sleep(0.005)
        for batch in batches:
            client.log_batch(run_id, metrics=batch)
    elif mode == "read":
        run_id, repeat = sys.argv[3], int(sys.argv[4])
        samples = []
        points = 0
        for _ in range(repeat):
            started = time.perf_counter()
            points = len(client.get_metric_history(run_id, "loss"))
            samples.append(time.perf_counter() - started)
        sys.stdout.write(f"{statistics.median(samples)} {points}\n")


if __name__ == "__main__":
    main()

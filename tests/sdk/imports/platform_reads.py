"""Reading back what an import stored, through the registry's API."""

import time
from datetime import datetime
from typing import Any

from mldiag.api_client import RegistryClient


def wait_for_counts(client: RegistryClient, run_id: str, expected: dict[str, int]) -> None:
    """Wait until the registry holds ``expected`` points per metric (it consumes the bus
    asynchronously), then a moment more, so that a surplus would show too."""
    deadline = time.monotonic() + 60
    counts: dict[str, int] = {}
    while time.monotonic() < deadline:
        listed = client.list_metrics(run_id)["metrics"]
        counts = {entry["name"]: entry["pointCount"] for entry in listed}
        if counts == expected:
            time.sleep(0.5)
            listed = client.list_metrics(run_id)["metrics"]
            assert {entry["name"]: entry["pointCount"] for entry in listed} == expected
            return
        time.sleep(0.1)
    raise AssertionError(f"the registry holds {counts}, expected {expected}")


def read_points(client: RegistryClient, run_id: str, metric: str) -> list[tuple[int, float, float]]:
    """Every stored point of ``metric``: (step, value, epoch seconds), in step order."""
    points: list[dict[str, Any]] = []
    token = ""
    while True:
        page = client.read_metric(run_id, metric, page_size=1000, page_token=token)
        points.extend(page["points"])
        token = page.get("nextPageToken") or ""
        if not token:
            break
    return [
        (point["step"], point["value"], datetime.fromisoformat(point["time"]).timestamp())
        for point in points
    ]

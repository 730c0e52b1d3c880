"""Helpers of the profiles tests: a run, a profiler target, the registry's storage root."""

from typing import Any

import httpx

STORAGE_ROOT = "file:///srv/mldiag-artifacts"
XPROF_URL = "http://xprof.test:8084"


async def new_run(api: httpx.AsyncClient, run_id: str, **fields: Any) -> dict[str, Any]:
    """Create a run; its resource."""
    response = await api.post(
        "/v1/machineLearningRuns", json={"runId": run_id, "displayName": run_id, **fields}
    )
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()["response"]
    return run


async def register(
    api: httpx.AsyncClient, run_id: str, host: str, index: int = 0, port: int = 9012
) -> dict[str, Any]:
    """Register a profiler target; its resource."""
    response = await api.post(
        f"/v1/machineLearningRuns/{run_id}/profilerTargets",
        json={"host": host, "processIndex": index, "address": f"{host}:{port}", "pid": 100 + index},
    )
    assert response.status_code == 200, response.text
    target: dict[str, Any] = response.json()
    return target

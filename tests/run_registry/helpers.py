"""Names the registry's tests share (importable, unlike conftest)."""

from collections.abc import Callable

import asyncpg
import numpy as np

from mldiag_run_registry.metrics.repository import MetricsRepository
from mldiag_run_registry.settings import RunRegistrySettings

RegistrySettings = Callable[..., RunRegistrySettings]
"""Settings of a registry on this test's namespace and schema, with the given overrides
(the ``registry_settings_with`` fixture)."""


async def stored_points(pool: asyncpg.Pool, schema: str, run_ids: list[str]) -> tuple[int, int]:
    """(points stored, distinct (series, step) among them) for ``run_ids``, read back through
    the registry's own repository: points live in compressed chunks SQL cannot count by step."""
    repository = MetricsRepository(pool, schema)
    rows = await pool.fetch(
        f"SELECT run_id, project FROM {schema}.runs WHERE run_id = ANY($1)",  # a test's own schema
        run_ids,
    )
    project_of = {row["run_id"]: row["project"] for row in rows}
    total = distinct = 0
    for series in await repository.list_series(run_ids, None):
        project = project_of.get(series.run_id, "")  # points of an unknown run: project ''
        steps = [
            block.steps
            async for block in repository.scan_points(project, [series.series_id], None, None)
        ]
        total += sum(len(part) for part in steps)
        distinct += len(np.unique(np.concatenate(steps))) if steps else 0
    return total, distinct

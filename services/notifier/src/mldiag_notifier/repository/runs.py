"""The runs read model: what rules match on, kept from the runs' facts."""

import json
from datetime import datetime

from mldiag_notifier.repository.common import Table
from mldiag_notifier.routing import RunFacts


class RunsTable(Table):
    """The runs read model."""

    async def save_run(self, run: RunFacts, deleted: bool, update_time: datetime) -> None:
        """Upsert a run's facts unless a later fact is stored already."""
        await self._pool.execute(
            """INSERT INTO runs (run_id, project, location, name, display_name, run_set,
                   labels, deleted, update_time)
               VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
               ON CONFLICT (run_id) DO UPDATE SET project = EXCLUDED.project,
                   location = EXCLUDED.location, name = EXCLUDED.name,
                   display_name = EXCLUDED.display_name, run_set = EXCLUDED.run_set,
                   labels = EXCLUDED.labels, deleted = runs.deleted OR EXCLUDED.deleted,
                   update_time = EXCLUDED.update_time
               WHERE runs.update_time <= EXCLUDED.update_time OR EXCLUDED.deleted""",
            run.run_id,
            run.project,
            run.location,
            run.name,
            run.display_name,
            run.run_set,
            json.dumps(run.labels),
            deleted,
            update_time,
        )

    async def run(self, run_id: str) -> RunFacts | None:
        """A run's facts (a deleted run's too: its last events still notify)."""
        row = await self._pool.fetchrow("SELECT * FROM runs WHERE run_id = $1", run_id)
        if row is None:
            return None
        return RunFacts(
            run_id=row["run_id"],
            project=row["project"],
            location=row["location"],
            name=row["name"],
            display_name=row["display_name"],
            run_set=row["run_set"],
            labels=json.loads(row["labels"]),
        )

-- One retention policy per project (every location of a project shares it: metric storage
-- is partitioned by project). No row: the defaults (keep points and rollups forever, purge
-- deleted runs after the registry's default period).
CREATE TABLE retention_policies (
    project text PRIMARY KEY,
    raw_points_days integer NOT NULL,
    rollups_days integer NOT NULL,
    deleted_runs_days integer NOT NULL,
    update_time timestamptz NOT NULL
);

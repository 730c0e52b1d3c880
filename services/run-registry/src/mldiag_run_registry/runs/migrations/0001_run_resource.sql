-- The full run resource on top of the initial runs table. Configs are JSON text (not
-- jsonb) because a user config may hold NaN or Infinity, which jsonb cannot represent.
-- runPhase is not stored: it mirrors state (STATE_X <-> X).
ALTER TABLE runs
    ADD COLUMN configs text NOT NULL DEFAULT '{}',
    ADD COLUMN artifacts jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN orchestrator text NOT NULL DEFAULT 'ORCHESTRATOR_UNSPECIFIED',
    ADD COLUMN workload_details jsonb NOT NULL DEFAULT '{}'::jsonb,
    ADD COLUMN error_details jsonb,
    ADD COLUMN etag text NOT NULL DEFAULT md5(random()::text),
    ADD COLUMN end_time timestamptz,
    ADD COLUMN delete_time timestamptz,
    ADD COLUMN workload_id text NOT NULL DEFAULT '',
    ADD COLUMN logical_id text NOT NULL DEFAULT '',
    ADD COLUMN cluster_id text NOT NULL DEFAULT '',
    ADD COLUMN creator text NOT NULL DEFAULT '',
    ADD COLUMN metrics_summary jsonb NOT NULL DEFAULT '{}'::jsonb;

-- The official SDK upserts on its logical id: one run per logical id and parent.
CREATE UNIQUE INDEX runs_by_logical_id ON runs (project, location, logical_id)
    WHERE logical_id <> '';

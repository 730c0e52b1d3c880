-- Runs, the metric points recorded against them, and the events and analyses other
-- services publish about them. Event and analysis bodies are kept as JSON text (not jsonb):
-- their evidence holds NaN and Infinity, which jsonb cannot represent.
CREATE TABLE runs (
    run_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    display_name text NOT NULL,
    run_set text NOT NULL,
    labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    state text NOT NULL,
    create_time timestamptz NOT NULL,
    update_time timestamptz NOT NULL
);
CREATE INDEX runs_by_parent_newest ON runs (project, location, create_time DESC, run_id DESC);

-- One row per bus message of points already stored: the idempotency ledger that makes a
-- redelivered or replayed message a no-op.
CREATE TABLE metric_messages (
    event_id uuid PRIMARY KEY,
    run_id text NOT NULL,
    point_count integer NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE metric_points (
    run_id text NOT NULL,
    metric text NOT NULL,
    step bigint NOT NULL,
    time timestamptz NOT NULL,
    value double precision NOT NULL,
    host text NOT NULL DEFAULT ''
);
CREATE INDEX metric_points_by_series ON metric_points (run_id, metric, step);

CREATE TABLE events (
    event_id uuid PRIMARY KEY,
    run_id text NOT NULL,
    start_time timestamptz NOT NULL,
    body text NOT NULL
);
CREATE INDEX events_by_run ON events (run_id, start_time);

CREATE TABLE analyses (
    analysis_id uuid PRIMARY KEY,
    event_id uuid NOT NULL,
    run_id text NOT NULL,
    create_time timestamptz NOT NULL,
    body text NOT NULL
);
CREATE INDEX analyses_by_run ON analyses (run_id, create_time);

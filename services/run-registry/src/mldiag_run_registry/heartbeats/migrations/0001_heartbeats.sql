-- The latest heartbeat of every process of a run: one row per (run, host, process index),
-- kept current by upserts that never go back in time.
CREATE TABLE heartbeats (
    run_id text NOT NULL,
    host text NOT NULL,
    process_index integer NOT NULL,
    pid integer NOT NULL,
    step bigint,
    interval_seconds double precision NOT NULL,
    last_seen timestamptz NOT NULL,
    first_seen timestamptz NOT NULL,  -- the first heartbeat with this pid
    PRIMARY KEY (run_id, host, process_index)
);

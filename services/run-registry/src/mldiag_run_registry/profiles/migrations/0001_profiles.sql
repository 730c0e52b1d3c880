-- Profiler sessions of runs, one row each; their hosts' parts in profiler_session_hosts.
-- Project and location are copied from the run (captures and reports need them to build
-- names), but reads still check the run first, which hides the sessions of deleted runs.
CREATE TABLE profiler_sessions (
    run_id text NOT NULL,
    session_id text NOT NULL,
    project text NOT NULL,
    location text NOT NULL,
    kind text NOT NULL,
    phase text NOT NULL,
    duration_seconds double precision,
    tracer_levels jsonb NOT NULL DEFAULT '{}'::jsonb,
    storage_folder_uri text NOT NULL DEFAULT '',
    auto_captured boolean NOT NULL DEFAULT false,
    monitored_events uuid[] NOT NULL DEFAULT '{}',
    operation text NOT NULL DEFAULT '',
    prewarmed boolean NOT NULL DEFAULT false,
    create_time timestamptz NOT NULL,
    update_time timestamptz NOT NULL,
    end_time timestamptz,
    PRIMARY KEY (run_id, session_id)
);
CREATE INDEX profiler_sessions_newest
    ON profiler_sessions (run_id, create_time DESC, session_id DESC);

-- One row per host of a session. update_time is when the host's state was true (the
-- report's time): merges compare it, so an older report never replaces a newer one.
CREATE TABLE profiler_session_hosts (
    run_id text NOT NULL,
    session_id text NOT NULL,
    host text NOT NULL,
    phase text NOT NULL,
    start_time timestamptz,
    end_time timestamptz,
    file_uri text NOT NULL DEFAULT '',
    size_bytes bigint NOT NULL DEFAULT 0,
    error text NOT NULL DEFAULT '',
    update_time timestamptz NOT NULL,
    PRIMARY KEY (run_id, session_id, host),
    FOREIGN KEY (run_id, session_id) REFERENCES profiler_sessions ON DELETE CASCADE
);

-- The profiler servers of a run's processes (one per host and process index); a restarted
-- process registers again and replaces its address and pid.
CREATE TABLE profiler_targets (
    run_id text NOT NULL,
    host text NOT NULL,
    process_index integer NOT NULL,
    address text NOT NULL,
    pid integer NOT NULL DEFAULT 0,
    register_time timestamptz NOT NULL,
    update_time timestamptz NOT NULL,
    PRIMARY KEY (run_id, host, process_index)
);

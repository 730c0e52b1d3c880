-- Custom jobs, their replicas and the executors that run them. The jobs room inserts,
-- reads, deletes jobs and asks for cancels; the scheduler is the one writer of states
-- (jobs' and replicas'), of placements and of the executors it has heard from.
CREATE TABLE custom_jobs (
    job_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    display_name text NOT NULL,
    labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- The CustomJobSpec as its JSON (camelCase, as the API serves it back).
    spec jsonb NOT NULL,
    state text NOT NULL,
    -- google.rpc.Status JSON when FAILED or CANCELLED.
    error jsonb,
    -- The run of the same id exists (run-registry said so): replicas may start.
    run_ready boolean NOT NULL DEFAULT false,
    cancel_requested boolean NOT NULL DEFAULT false,
    -- Replica restarts so far (goodput and the console show them).
    restarts integer NOT NULL DEFAULT 0,
    -- create_time + scheduling.timeout: the job fails with DEADLINE_EXCEEDED after it.
    deadline timestamptz NOT NULL,
    create_time timestamptz NOT NULL,
    start_time timestamptz,
    end_time timestamptz,
    update_time timestamptz NOT NULL
);
CREATE INDEX custom_jobs_by_parent_newest
    ON custom_jobs (project, location, create_time DESC, job_id DESC);
-- The scheduler's working set: every job that has not ended.
CREATE INDEX custom_jobs_active ON custom_jobs (create_time, job_id)
    WHERE state IN ('JOB_STATE_QUEUED', 'JOB_STATE_PENDING', 'JOB_STATE_RUNNING',
                    'JOB_STATE_CANCELLING');

-- One row per replica: its current attempt. A restart bumps `attempt` in place; facts
-- about any other attempt are stale.
CREATE TABLE replicas (
    job_id text NOT NULL REFERENCES custom_jobs (job_id) ON DELETE CASCADE,
    pool integer NOT NULL,
    index integer NOT NULL,
    attempt integer NOT NULL DEFAULT 0,
    -- ReplicaState: PENDING, RUNNING, SUCCEEDED, FAILED, RESTARTING, CANCELLED.
    state text NOT NULL,
    executor_id text,
    host text NOT NULL DEFAULT '',
    port integer,
    exit_code integer,
    message text NOT NULL DEFAULT '',
    restarts integer NOT NULL DEFAULT 0,
    -- A RESTARTING replica starts its next attempt no earlier than this (backoff).
    not_before timestamptz,
    start_time timestamptz,
    end_time timestamptz,
    PRIMARY KEY (job_id, pool, index)
);
CREATE INDEX replicas_by_executor ON replicas (executor_id)
    WHERE state IN ('PENDING', 'RUNNING');

-- The executors' latest announcements: capacity, address, ports.
CREATE TABLE executors (
    executor_id text PRIMARY KEY,
    backend text NOT NULL,
    address text NOT NULL,
    capacity jsonb NOT NULL,
    first_port integer NOT NULL,
    port_count integer NOT NULL,
    last_seen timestamptz NOT NULL
);

-- Hyperparameter tuning jobs (studies) and their trials. The tuning room is the one writer
-- of both; every change to a study happens under `SELECT … FOR UPDATE` of its row, which
-- bumps `revision` (the controller's in-memory search is rebuilt when the revision moved).
CREATE TABLE tuning_jobs (
    job_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    display_name text NOT NULL,
    labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    -- The HyperparameterTuningJob as created (camelCase JSON, no output fields, no trials).
    body jsonb NOT NULL,
    state text NOT NULL,
    -- google.rpc.Status JSON when FAILED or CANCELLED.
    error jsonb,
    -- The sampler's seed: a rebuilt search suggests what the lost one would have.
    seed bigint NOT NULL,
    revision bigint NOT NULL DEFAULT 0,
    cancel_requested boolean NOT NULL DEFAULT false,
    -- A studyStoppingConfig rule fired (or the grid ran out): no new trials.
    stop_reason text,
    -- The best trial announced last (TuningJobStateChanged goes out when it changes).
    best_trial integer,
    -- When the best value last improved (max_duration_no_progress) and at which count of
    -- ended trials (max_num_trials_no_progress).
    progress_time timestamptz,
    progress_trials integer NOT NULL DEFAULT 0,
    create_time timestamptz NOT NULL,
    start_time timestamptz,
    end_time timestamptz,
    update_time timestamptz NOT NULL
);
CREATE INDEX tuning_jobs_by_parent_newest
    ON tuning_jobs (project, location, create_time DESC, job_id DESC);
-- The controller's working set.
CREATE INDEX tuning_jobs_active ON tuning_jobs (create_time, job_id)
    WHERE state IN ('JOB_STATE_QUEUED', 'JOB_STATE_PENDING', 'JOB_STATE_RUNNING',
                    'JOB_STATE_CANCELLING');

CREATE TABLE tuning_trials (
    tuning_job_id text NOT NULL REFERENCES tuning_jobs (job_id) ON DELETE CASCADE,
    -- The search's trial number (0, 1, ...); the trial's id is number + 1.
    number integer NOT NULL,
    -- Chosen before the custom job exists, committed with the row: created exactly once.
    custom_job_id text NOT NULL UNIQUE,
    job_created boolean NOT NULL DEFAULT false,
    -- TrialState name.
    state text NOT NULL,
    parameters jsonb NOT NULL,
    -- Measurement JSON objects, by step.
    measurements jsonb NOT NULL DEFAULT '[]'::jsonb,
    final_measurement jsonb,
    infeasible_reason text NOT NULL DEFAULT '',
    stopped_early boolean NOT NULL DEFAULT false,
    cancel_sent boolean NOT NULL DEFAULT false,
    -- The custom job's end as heard: its state and error, the TELEMETRY stream's last
    -- sequence of the trial's metrics then (finalised once the metrics consumer is past it).
    job_state text,
    job_error text,
    job_end_time timestamptz,
    metrics_sequence bigint,
    start_time timestamptz NOT NULL,
    end_time timestamptz,
    PRIMARY KEY (tuning_job_id, number)
);
CREATE INDEX tuning_trials_unfinished ON tuning_trials (tuning_job_id)
    WHERE state IN ('ACTIVE', 'STOPPING', 'REQUESTED');

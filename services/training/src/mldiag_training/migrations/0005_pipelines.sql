-- Training pipelines. A pipeline's job id is chosen before the job exists and stored here
-- in the pipeline's own transaction, so the job is created exactly once (its create is
-- idempotent by id; a pipeline found without its job at start has it created then).
CREATE TABLE training_pipelines (
    pipeline_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    display_name text NOT NULL,
    labels jsonb NOT NULL DEFAULT '{}'::jsonb,
    task_definition text NOT NULL,
    -- trainingTaskInputs as sent (a Struct, served back unchanged).
    task_inputs jsonb NOT NULL,
    -- 'custom' or 'tuning': which kind of job job_id names.
    job_kind text NOT NULL,
    job_id text NOT NULL,
    -- The job as parsed from task_inputs (a CustomJob or a HyperparameterTuningJob, JSON),
    -- so a restart creates it from exactly what was validated.
    job_body jsonb NOT NULL,
    -- Model JSON (modelToUpload as asked, then with name and versionId), or NULL.
    model_to_upload jsonb,
    model_id text NOT NULL DEFAULT '',
    parent_model text NOT NULL DEFAULT '',
    state text NOT NULL,
    -- google.rpc.Status JSON when FAILED or CANCELLED.
    error jsonb,
    -- The job exists (its create returned): only then is a pipeline out of the reconcile.
    job_created boolean NOT NULL DEFAULT false,
    cancel_requested boolean NOT NULL DEFAULT false,
    create_time timestamptz NOT NULL,
    start_time timestamptz,
    end_time timestamptz,
    update_time timestamptz NOT NULL
);
CREATE INDEX training_pipelines_by_parent_newest
    ON training_pipelines (project, location, create_time DESC, pipeline_id DESC);
-- A job's state change finds its pipeline (if any) by the job's id.
CREATE UNIQUE INDEX training_pipelines_by_job ON training_pipelines (job_id);

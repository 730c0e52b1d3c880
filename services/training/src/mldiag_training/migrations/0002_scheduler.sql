-- What the scheduler keeps beside the rooms' shared tables.
-- The job's run-scoped token (granted in the token directory when the job is placed) is
-- needed again for every restart; cleared once revoked, when the job has ended.
ALTER TABLE custom_jobs ADD COLUMN run_token text;
-- What a replica holds on its executor (capacity is the sum over the replicas holding it),
-- the executor's address it was given, and why a stop was sent (NULL: none was).
ALTER TABLE replicas ADD COLUMN resources jsonb;
ALTER TABLE replicas ADD COLUMN address text NOT NULL DEFAULT '';
ALTER TABLE replicas ADD COLUMN stop_reason text;
CREATE INDEX replicas_holding ON replicas (executor_id)
    WHERE state IN ('PENDING', 'RUNNING', 'RESTARTING');
-- Ended jobs whose token is still to be revoked (looked for after every unit of work).
CREATE INDEX custom_jobs_unrevoked ON custom_jobs (job_id) WHERE run_token IS NOT NULL;

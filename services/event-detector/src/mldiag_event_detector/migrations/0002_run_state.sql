-- One state document per run (every rule's windows and open events), locked while a batch of
-- the run's messages is applied; the next time the clock must look at it (hang timeouts);
-- and each project's rule overrides.
DROP TABLE metric_watch;

CREATE TABLE run_state (
    run_id text PRIMARY KEY,
    state text NOT NULL,
    next_check_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_state_due ON run_state (next_check_at) WHERE next_check_at IS NOT NULL;

CREATE TABLE project_rules (
    project text NOT NULL,
    location text NOT NULL,
    rules text NOT NULL,
    PRIMARY KEY (project, location)
);

CREATE INDEX applied_messages_by_age ON applied_messages (applied_at);

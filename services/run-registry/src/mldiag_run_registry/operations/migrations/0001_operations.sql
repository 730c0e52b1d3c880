-- Long-running operations returned by every write. The response is JSON text (not jsonb):
-- it is a run, whose configs may hold NaN.
CREATE TABLE operations (
    operation_id text PRIMARY KEY,
    project text NOT NULL,
    location text NOT NULL,
    verb text NOT NULL,
    target text NOT NULL,
    done boolean NOT NULL,
    create_time timestamptz NOT NULL,
    end_time timestamptz,
    cancel_requested boolean NOT NULL DEFAULT false,
    response text,
    error jsonb
);
CREATE INDEX operations_by_parent_newest
    ON operations (project, location, create_time DESC, operation_id DESC);

-- A run's log lines, one row per received batch and (host, stream) group: a chunk.
-- The lines themselves are one compressed body per chunk (logs/chunks.py), so a row and
-- its index entries are paid once per batch, not once per line (docs/logs.md has the
-- measured bytes per line). (run_id, batch_id, part) is the chunk's identity: a
-- redelivered batch inserts nothing. No foreign key: it would cost a lookup per batch, and
-- chunks outlive nothing they point to (retention and purges delete them by run or age).
CREATE TABLE log_chunks (
    run_id text NOT NULL,
    batch_id uuid NOT NULL,
    part smallint NOT NULL,
    host text NOT NULL,
    stream text NOT NULL,
    first_time timestamptz NOT NULL,
    last_time timestamptz NOT NULL,
    line_count integer NOT NULL,
    -- rank in mldiag_schemas.logs.SEVERITY_ORDER: `minSeverity` skips chunks below it
    max_severity smallint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (run_id, batch_id, part)
);
-- reads walk a run's chunks in time order
CREATE INDEX log_chunks_by_time ON log_chunks (run_id, first_time);
-- retention deletes whole chunks past their age, in batches, without a scan of the table
CREATE INDEX log_chunks_by_age ON log_chunks (last_time);

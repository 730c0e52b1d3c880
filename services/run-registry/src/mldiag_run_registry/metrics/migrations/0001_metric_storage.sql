-- Metric storage built for the measured limits (docs/metrics.md):
--  * metric_series: one row per (run, metric, host, process index, label set), holding its
--    id, counters and latest value, so "latest of every metric" is one index read;
--  * metric_points: narrow raw rows (series id, step, time in µs, value) written by COPY;
--  * metric_rollups: per-series aggregates over buckets of 2^k steps (k = 6, 8, ... 18),
--    merged in the same transaction as the COPY, so chart reads never scan a series;
--  * metric_messages: the ledger of bus messages stored, which makes redeliveries no-ops.
-- No foreign keys on the hot tables: they would cost a lookup per COPY'd row.
DROP TABLE IF EXISTS metric_points;
DROP TABLE IF EXISTS metric_messages;

CREATE TABLE metric_messages (
    event_id uuid PRIMARY KEY,
    run_id text NOT NULL,
    point_count integer NOT NULL,
    stored_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE metric_series (
    series_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id text NOT NULL,
    metric text NOT NULL,
    host text NOT NULL,
    process_index integer,
    labels jsonb NOT NULL,
    -- canonical text of (host, process index, sorted labels): the series' identity
    series_key text NOT NULL,
    point_count bigint NOT NULL DEFAULT 0,
    first_step bigint,
    last_step bigint,
    last_value double precision,
    last_time_us bigint,
    UNIQUE (run_id, metric, series_key)
);

CREATE TABLE metric_points (
    series_id bigint NOT NULL,
    step bigint NOT NULL,
    time_us bigint NOT NULL,
    value double precision NOT NULL
);
-- (series, step, time): the raw page order, so a page is an index range scan that stops early
CREATE INDEX metric_points_by_series ON metric_points (series_id, step, time_us);

-- min, max and sum cover non-NaN values (NULL when a bucket is all NaN); last_value is the
-- value at last_step, NaN or not.
CREATE TABLE metric_rollups (
    series_id bigint NOT NULL,
    width_log2 smallint NOT NULL,
    bucket bigint NOT NULL,
    count bigint NOT NULL,
    nan_count bigint NOT NULL,
    min double precision,
    max double precision,
    sum double precision,
    first_step bigint NOT NULL,
    last_step bigint NOT NULL,
    last_value double precision NOT NULL,
    PRIMARY KEY (series_id, width_log2, bucket)
);

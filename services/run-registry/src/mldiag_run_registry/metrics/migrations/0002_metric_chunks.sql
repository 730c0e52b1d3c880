-- Points move from one row each (~100 bytes with their index) into compressed chunks
-- (docs/metrics.md, "Storage"):
--  * metric_chunks: up to 4096 points of one series per row, encoded by
--    mldiag_run_registry.metrics.chunks (codec 1: delta + byte planes + zlib; codec 0:
--    big-endian arrays, what this migration writes), partitioned by (project, day stored)
--    in 7-day ranges so retention drops whole partitions of a project;
--  * metric_chunk_partitions: the partitions created so far (the registry creates them on
--    demand, outside the batch's transaction);
--  * metric_series.chunk_span: the widest step span of the series' chunks, which bounds the
--    (series_id, first_step) index range a read must search for chunks overlapping a step.
-- Every point already stored is converted here, in SQL, and metric_points is dropped.
CREATE TABLE metric_chunks (
    project text NOT NULL,
    stored_day integer NOT NULL,
    series_id bigint NOT NULL,
    first_step bigint NOT NULL,
    last_step bigint NOT NULL,
    point_count integer NOT NULL,
    -- the latest time at last_step: a chart's bucket times without decoding the chunk
    last_time_us bigint NOT NULL,
    codec smallint NOT NULL,
    data bytea NOT NULL
) PARTITION BY RANGE (project, stored_day);
-- already compressed: TOAST stores it out of line without trying pglz on it again
ALTER TABLE metric_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
CREATE INDEX metric_chunks_by_series ON metric_chunks (series_id, first_step);

CREATE TABLE metric_chunk_partitions (
    table_name text PRIMARY KEY,
    project text NOT NULL,
    first_day integer NOT NULL,
    end_day integer NOT NULL
);
CREATE INDEX metric_chunk_partitions_by_project ON metric_chunk_partitions (project, end_day);

ALTER TABLE metric_series ADD COLUMN chunk_span bigint NOT NULL DEFAULT 0;

DO $$
DECLARE
    today integer := floor(extract(epoch FROM now()) / 86400)::integer;
    first_day integer := today - today % 7;
    owner text;
    partition text;
BEGIN
    -- points of a series or run unknown here get the project '' (nothing is left behind)
    FOR owner IN
        SELECT DISTINCT coalesce(r.project, '') FROM metric_series s
        LEFT JOIN runs r ON r.run_id = s.run_id
        WHERE EXISTS (SELECT 1 FROM metric_points p WHERE p.series_id = s.series_id)
        UNION
        SELECT '' WHERE EXISTS (
            SELECT 1 FROM metric_points p
            WHERE NOT EXISTS (SELECT 1 FROM metric_series s WHERE s.series_id = p.series_id))
    LOOP
        partition := 'metric_chunks_' || left(encode(sha256(convert_to(owner, 'UTF8')), 'hex'), 12)
                     || '_' || first_day;
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF metric_chunks FOR VALUES FROM (%L, %s) TO (%L, %s)',
            partition, owner, first_day, owner, first_day + 7);
        EXECUTE format('ALTER TABLE %I ALTER COLUMN data SET STORAGE EXTERNAL', partition);
        INSERT INTO metric_chunk_partitions (table_name, project, first_day, end_day)
        VALUES (partition, owner, first_day, first_day + 7);
    END LOOP;
END $$;

-- codec 0: steps, times, values as big-endian arrays; 4096 points per chunk in (step, time)
-- order. Each string_agg sorts on its own: points tied on (step, time) have equal step and
-- time bytes, so only their values' order is open, as it is for such ties in any read.
INSERT INTO metric_chunks
    (project, stored_day, series_id, first_step, last_step, point_count, last_time_us, codec,
     data)
SELECT project, floor(extract(epoch FROM now()) / 86400)::integer, series_id, min(step),
       max(step), count(*)::integer,
       (array_agg(time_us ORDER BY step DESC, time_us DESC))[1], 0,
       string_agg(int8send(step), ''::bytea ORDER BY step, time_us)
       || string_agg(int8send(time_us), ''::bytea ORDER BY step, time_us)
       || string_agg(float8send(value), ''::bytea ORDER BY step, time_us)
FROM (
    SELECT coalesce(r.project, '') AS project, p.series_id, p.step, p.time_us, p.value,
           (row_number() OVER (PARTITION BY p.series_id ORDER BY p.step, p.time_us) - 1) / 4096
               AS part
    FROM metric_points p
    LEFT JOIN metric_series s ON s.series_id = p.series_id
    LEFT JOIN runs r ON r.run_id = s.run_id
) AS numbered
GROUP BY project, series_id, part;

UPDATE metric_series AS s SET chunk_span = c.span
FROM (SELECT series_id, max(last_step - first_step) AS span FROM metric_chunks GROUP BY series_id)
    AS c
WHERE s.series_id = c.series_id;

DROP TABLE metric_points;

-- Each rollup row keeps the time of the point that gave its last_value (the point at
-- last_step written last), so a chart's bucket times (withTimes) come with the buckets instead
-- of from decoding the chunks that hold those points (docs/metrics.md, "Storage").
-- No backfill: rows written before this migration keep NULL until a batch reaching their
-- bucket's last step rewrites it; reads look those buckets' times up in the chunks, a one-off
-- cost for old data only.
ALTER TABLE metric_rollups ADD COLUMN last_time_us bigint;

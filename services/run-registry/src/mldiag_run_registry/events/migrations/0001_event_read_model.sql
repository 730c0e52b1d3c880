-- One row per workload event, holding its highest revision: the columns lists filter and
-- order on, and the JSON body as text (its evidence may hold NaN, which jsonb refuses).
-- Project and location are not copied here: reads join the run, which also hides the
-- events of deleted runs and lets an event arrive before its run.
ALTER TABLE events
    ADD COLUMN type text NOT NULL DEFAULT '',
    ADD COLUMN state text NOT NULL DEFAULT 'OPEN',
    ADD COLUMN severity text NOT NULL DEFAULT 'INFO',
    ADD COLUMN end_time timestamptz,
    ADD COLUMN revision integer NOT NULL DEFAULT 1;

-- Rows stored before these columns: the first occurrence of each key in the body is the
-- event's own (its top-level fields come before its evidence and reports).
UPDATE events SET
    type = coalesce((regexp_match(body, '"type":"([A-Z_]+)"'))[1], ''),
    state = coalesce((regexp_match(body, '"state":"(OPEN|RESOLVED)"'))[1], 'OPEN'),
    severity = coalesce((regexp_match(body, '"severity":"([A-Z]+)"'))[1], 'INFO'),
    end_time = (regexp_match(body, '"endTime":(null|"([^"]*)")'))[2]::timestamptz;

DROP INDEX IF EXISTS events_by_run;
CREATE INDEX events_by_run_newest ON events (run_id, start_time DESC, event_id DESC);
CREATE INDEX analyses_by_event ON analyses (event_id, create_time DESC);

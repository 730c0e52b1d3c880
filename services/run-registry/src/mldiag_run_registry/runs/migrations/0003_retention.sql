-- Retention (retention/): when a run's metric data was expired by its project's policy, so
-- each ended run is expired once; and the indexes the sweeper reads, so a pass never scans
-- every run: soft-deleted runs by deletion time, ended runs not yet expired by end time.
ALTER TABLE runs ADD COLUMN metrics_expire_time timestamptz;
CREATE INDEX runs_deleted_oldest ON runs (project, delete_time) WHERE delete_time IS NOT NULL;
CREATE INDEX runs_ended_unexpired ON runs (project, end_time)
    WHERE end_time IS NOT NULL AND metrics_expire_time IS NULL;

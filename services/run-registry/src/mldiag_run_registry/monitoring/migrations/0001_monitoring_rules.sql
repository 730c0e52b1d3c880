-- A project's overrides of the detection rules (MonitoringRules JSON; thresholds are finite).
CREATE TABLE monitoring_rules (
    project text NOT NULL,
    location text NOT NULL,
    rules jsonb NOT NULL,
    update_time timestamptz NOT NULL,
    PRIMARY KEY (project, location)
);

-- The run's overrides of the detection rules (MonitoringRules JSON; thresholds are finite).
ALTER TABLE runs ADD COLUMN monitoring jsonb NOT NULL DEFAULT '{}'::jsonb;

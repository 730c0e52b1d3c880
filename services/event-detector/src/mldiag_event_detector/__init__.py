"""event-detector: turns telemetry into workload events, with per-run state."""

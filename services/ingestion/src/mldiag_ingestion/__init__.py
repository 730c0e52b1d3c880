"""ingestion: the only door for untrusted telemetry; answers after JetStream has it."""

"""mldiag notifier: delivers workload events to people and systems."""

"""Workload logs: compressed chunks of a run's lines, searched, paged and retained."""

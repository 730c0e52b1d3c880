"""Profiles of runs: profiler sessions (merged from per-host reports), targets and captures."""

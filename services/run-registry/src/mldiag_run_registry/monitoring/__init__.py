"""Overrides of the detection rules: per project (its own resource) and per run."""

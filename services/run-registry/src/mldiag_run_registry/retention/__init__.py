"""Retention policies, their background sweeper, and the purge of runs deleted for good."""

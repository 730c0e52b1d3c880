"""Runs: the run resource, its lifecycle and the facts published about it."""

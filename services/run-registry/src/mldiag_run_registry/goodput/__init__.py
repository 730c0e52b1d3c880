"""Goodput: productive time against wall time, and where the rest of a run went."""

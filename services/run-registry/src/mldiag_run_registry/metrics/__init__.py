"""Metric points recorded against runs: storage from the bus and the query API."""

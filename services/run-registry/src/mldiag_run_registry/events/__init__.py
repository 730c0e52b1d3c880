"""Workload events and their analyses, as read models for the API."""

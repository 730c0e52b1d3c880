"""mldiag training service (custom jobs."""

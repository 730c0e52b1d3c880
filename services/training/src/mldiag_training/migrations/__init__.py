"""SQL migrations of the training service (jobs, replicas, executors)."""

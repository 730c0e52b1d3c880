"""The scheduler: the one writer of job and replica state (placement on executors,
dispatch, restarts with backoff, gang restarts, timeouts, cancels, executor liveness)."""

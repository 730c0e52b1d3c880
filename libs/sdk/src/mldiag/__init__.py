"""mldiag: the Python SDK and the `mldiag` CLI (`mldiag up` runs the platform locally)."""

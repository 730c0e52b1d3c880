"""Files of custom jobs: Python packages uploaded for them and their replicas' logs."""

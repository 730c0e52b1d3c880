"""Hyperparameter tuning jobs: the API, the controller of studies, and their search."""

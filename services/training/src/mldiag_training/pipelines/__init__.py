"""The trainingPipelines API (Vertex v1): runs a custom job (or a tuning job), then imports
the model it wrote."""

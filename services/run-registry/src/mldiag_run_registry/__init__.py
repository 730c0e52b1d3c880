"""run-registry: owns runs and everything recorded against them; serves the REST API."""

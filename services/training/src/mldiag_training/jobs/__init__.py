"""The custom-jobs API (Vertex v1): create, get, list, cancel, delete, and replicas."""

"""The model registry (Vertex v1 ``models``): uploads, versions, aliases and lineage."""

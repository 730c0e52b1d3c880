"""Profile captures: from a capture command to per-host xplanes in the object store."""

"""Live updates for the console: hints from the bus, streamed to browsers as server-sent events."""

"""API tokens: stored hashed, mirrored into the bus token directory."""

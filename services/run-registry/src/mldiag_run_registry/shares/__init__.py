"""Share links: signed, read-only, scoped, expiring, revocable access to one resource."""

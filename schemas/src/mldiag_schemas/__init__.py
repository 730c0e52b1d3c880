"""mldiag contracts: bus messages, HTTP resources, subjects and streams (pydantic only)."""

"""analyzer: explains workload events with reports across the layers of the stack."""

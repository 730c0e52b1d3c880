"""mldiag training executor (runs replicas."""

"""What every list API shares: AIP-160 filters and AIP-132 orderings parsed into a small
tree (``filtering``; each repository compiles it for its own columns), page sizes and
opaque keyset page tokens checked like any input (``paging``)."""

"""Operations: the long-running operations every registry write returns (AIP-151)."""

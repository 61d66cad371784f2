"""Text utilities: normalisation, tokens, and deterministic value extractors."""

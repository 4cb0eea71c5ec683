"""jobq."""

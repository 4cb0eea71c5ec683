"""canary."""

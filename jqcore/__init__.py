"""jqcore."""

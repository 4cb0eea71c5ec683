"""jqspark."""

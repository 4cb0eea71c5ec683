"""jqrelay."""

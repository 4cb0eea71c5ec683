"""A minimal Django project whose tasks run on jobq (docs/integrations.md; the tests use it too)."""

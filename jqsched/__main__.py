"""``python -m jqsched`` runs a scheduler instance (settings from the environment, see docs/settings.md)."""

from jqcore.log import configure
from jqsched.main import run

configure()
run()

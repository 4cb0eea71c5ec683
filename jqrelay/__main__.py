"""``python -m jqrelay`` runs a relay (settings from the environment, see docs/settings.md)."""

from jqcore.log import configure
from jqrelay.main import run

configure()
run()

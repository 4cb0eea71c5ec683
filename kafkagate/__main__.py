"""``python -m kafkagate`` runs the gateway (settings from the environment, see docs/settings.md)."""

from jqcore.log import configure
from kafkagate.main import run

configure()
run()

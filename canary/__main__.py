"""``python -m canary`` runs the heartbeat canary (settings from the environment)."""

from canary.main import run
from jqcore.log import configure

configure()
run()

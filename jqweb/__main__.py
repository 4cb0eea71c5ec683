"""``python -m jqweb`` runs the dashboard (settings from the environment, docs/settings.md).
A setting or a start-up check that can never pass stops it with one line (`jqcore.lifecycle.service_main`)."""

from jqcore.lifecycle import service_main
from jqweb.main import run

service_main(run)

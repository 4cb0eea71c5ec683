"""``python -m jqrelay`` runs a relay (settings from the environment, docs/settings.md).
A setting or a start-up check that can never pass stops it with one line
(`jqruntime.lifecycle.service_main`)."""

from jqruntime.lifecycle import service_main

service_main("jqrelay.main")  # imported by service_main: a missing extra is one line

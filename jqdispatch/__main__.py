"""``python -m jqdispatch`` runs a dispatcher from the ``JOBQ_DISPATCHER_*`` settings alone (see
docs/settings.md); ``jobq dispatcher`` is the same with command-line options. A missing or malformed setting
stops it with exit code 2 and one line naming the variable (:func:`jqruntime.lifecycle.service_main`)."""

from jqcore.settings.common import load
from jqdispatch.main import run
from jqdispatch.settings import DispatcherSettings
from jqruntime.lifecycle import service_main

service_main(lambda: run(load(DispatcherSettings)))

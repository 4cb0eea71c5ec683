"""``python -m jqdispatch`` runs a dispatcher from the ``JOBQ_DISPATCHER_*`` settings alone (see
docs/settings.md); ``jobq dispatcher`` is the same with command-line options. A missing or malformed setting
stops it with exit code 2 and one line naming the variable (:func:`jqcore.lifecycle.service_main`)."""

from jqcore.lifecycle import service_main
from jqcore.settings import load
from jqdispatch.main import run
from jqdispatch.settings import DispatcherSettings

service_main(lambda: run(load(DispatcherSettings)))

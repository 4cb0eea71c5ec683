"""Example applications for jobq's workers: ``examples.demo_app`` is the demo's (``jobq demo``) and the
docker-compose worker's; ``examples.dispatch_hook`` is the demo's downstream for push dispatch
(``jobq dispatcher``). Not part of the installed product; run from a checkout (the repository root on
``PYTHONPATH``)."""

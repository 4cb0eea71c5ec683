"""Example applications for jobq's workers: ``examples.demo_app`` is the demo's (``jobq demo``) and the
docker-compose worker's. Not part of the installed product; run from a checkout (the repository root on
``PYTHONPATH``)."""

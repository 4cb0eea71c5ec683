"""jqdjango: Django's tasks framework (``django.tasks``, DEP 14) on jobq, durable through Kafka.

- :mod:`jqdjango.backend`: ``TASKS``' ``BACKEND``; ``@task`` functions' ``.enqueue()`` / ``.aenqueue()``
  go through the gateway (returned once Kafka has them); ``get_result`` reads the job back.
- :mod:`jqdjango.worker`: a jobq worker registry that runs the tasks by their module path
  (``JOBQ_WORKER_APP=jqdjango.worker python -m worker``, or ``manage.py jobq_worker`` with ``jqdjango`` in
  ``INSTALLED_APPS``).

Django 6 ships ``django.tasks`` (Python >= 3.12); on Python 3.11 the ``django-tasks`` backport gives the
same API on Django 5.2 (:mod:`jqdjango.compat`). Install with ``pip install 'jobq[django]'``;
``docs/integrations.md`` has the whole setup.
"""

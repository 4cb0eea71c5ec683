"""The push dispatcher (``jobq dispatcher``, ``python -m jqdispatch``): claims the jobs of dispatch kinds
and POSTs each to its kind's URL (``docs/dispatcher.md``). Imports only ``jqcore``, ``jqengine`` and
``jqruntime``."""

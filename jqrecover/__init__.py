"""Recovery from Kafka, as a library (imports only ``jqcore``, ``jqengine`` and ``jqruntime``): ``replay`` (a
range of a topic's records re-driven into Redis; a finished job replayed as a new one), ``rebuild`` (the
pending state rebuilt after Redis lost everything) and ``reconcile`` (the balances between the gateways,
Kafka, the relays and the queues). The CLI (``jobq replay``, ``jobq rebuild``, ``jobq reconcile``), the
gateway and the dashboard call it; it raises :class:`jqcore.errors.JobqError` subclasses
(:mod:`jqrecover.errors`), never a CLI error."""

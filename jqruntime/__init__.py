"""What a running jobq process stands on: the Kafka client (:mod:`~jqruntime.kafka`) and topic admin,
Consul (:mod:`~jqruntime.consulconn`), start-up checks (:mod:`~jqruntime.preflight`), the service
lifecycle (:mod:`~jqruntime.lifecycle`), health and metrics routes (:mod:`~jqruntime.health`), the HTTP
toolkit (:mod:`~jqruntime.http`), tracing, the lease keeper (:mod:`~jqruntime.leases`), tokens, push
dispatch, the app-side HTTP client (:mod:`~jqruntime.client`) and the stores that keep what is not queue
state (:mod:`jqruntime.stores`).

The one rule: the runtime is what a process stands on; the engine (:mod:`jqengine`) knows nothing of it.
This package imports the engine and the kernel (:mod:`jqcore`); neither imports it (import-linter's
``layers`` contract in ``pyproject.toml``; the kernel's deprecated re-export of :mod:`~jqruntime.client`
aside, for this release only).
"""

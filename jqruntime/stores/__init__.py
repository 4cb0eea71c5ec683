"""The stores: what jobq keeps that is not queue state, each module the one owner of its keys.

In Redis beside the queues, over the plain client a process built its engine with (key names in
:mod:`jqcore.keys`, no hash tag): presence heartbeats, scheduler membership, stage counters, the queues'
rate samples (series), the audit trail, the gateway's idempotency records, the far tier's scan markers,
the push-dispatch configurations (:mod:`~jqruntime.stores.dispatch`). In Consul: cron schedules
(:mod:`~jqruntime.stores.cron`) and the kept queue and kind settings (:mod:`~jqruntime.stores.config`).
On disk: the job history tables (:mod:`~jqruntime.stores.history`, DuckDB) and the archive's payloads
(:mod:`~jqruntime.stores.archive`).
"""

"""The floors of jobq's path (issue 58): for each hop, the least code on the same libraries that keeps the
hop's promise, so that ``./run bench floors`` can put every figure of jobq beside the figure of its floor
and report a ratio. They are yardsticks for the benchmarks, not products: each module's docstring names
the promise it keeps and what it leaves out.

* :mod:`loadtest.floors.gateway`: HTTP → Kafka (aiohttp + confluent-kafka, acks=all, idempotent);
* :mod:`loadtest.floors.relay`: Kafka → Redis, a minimal lease queue's pending set (confluent-kafka +
  redis-py), offsets committed after Redis accepted the batch;
* :mod:`loadtest.floors.worker`: the lease worker (redis-py asyncio, one Lua call per round);
* :mod:`loadtest.floors.lease`: the lease queue they share (its keys and its one script);
* :mod:`loadtest.floors.jobq_app`: the same no-op job as a jobq handler, for jobq's side of the bench.
"""

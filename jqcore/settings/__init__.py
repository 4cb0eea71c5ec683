"""Typed settings, read from the environment once at start-up.

Every service builds one settings object from these parts. Names follow ``JOBQ_<SECTION>_<FIELD>``;
the standard names of the ecosystems are honoured as well (``CONSUL_HTTP_ADDR``, ``CONSUL_HTTP_TOKEN``,
``REDIS_URL``, ``KAFKA_BOOTSTRAP_SERVERS``). Secrets are :class:`pydantic.SecretStr`: they never appear in
``repr``, logs or ``jobq stack env``. Cross-field checks run at construction, so a bad combination stops
the service at start-up with a :class:`~jqcore.errors.ConfigError` naming the setting.

One module per concern, each name imported from its module (the package re-exports nothing, so a process
builds the settings classes it uses and no other — a worker builds neither Kafka's nor the pipeline's;
pydantic builds a class's validator as the class is defined):

* :mod:`~jqcore.settings.common`: the shared types and validators, :func:`~jqcore.settings.common.load`,
  :func:`~jqcore.settings.common.load_env`;
* :mod:`~jqcore.settings.servers`: ``RedisSettings``, ``ConsulSettings``;
* :mod:`~jqcore.settings.kafka`: ``KafkaSettings``;
* :mod:`~jqcore.settings.observe`: logs, the health and metrics routes' address, traces;
* :mod:`~jqcore.settings.pipeline`: where the shared state and streams live (the relays' keys, cron, the
  far-future tier, events, audit, history, a queue's bounds).
"""

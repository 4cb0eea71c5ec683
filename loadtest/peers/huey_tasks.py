"""huey's task lives in an importable module (a task defined in ``__main__`` is unknown to the consumer)."""

import common
from huey import RedisHuey

huey = RedisHuey("bench", url=common.QUEUE_REDIS, blocking=True, results=False)


@huey.task()
def noop(due: float) -> None:
    common.record(due)

"""QueueConfig.as_dict: the one JSON form of a queue's configuration (the gateway and the dashboard)."""

from __future__ import annotations

import dataclasses

import orjson

from jqengine import QueueConfig


def test_as_dict_has_every_field_in_order_and_lists_the_filter_keys() -> None:
    config = QueueConfig(mode="exclusive", excl_key="tenant", filter_keys=("tenant", "region"), paused=True)
    d = config.as_dict()
    assert list(d) == [f.name for f in dataclasses.fields(QueueConfig)]
    assert d["filter_keys"] == ["tenant", "region"]
    assert (d["mode"], d["excl_key"], d["paused"]) == ("exclusive", "tenant", True)
    assert orjson.loads(orjson.dumps(d)) == d
    assert QueueConfig(**{**d, "filter_keys": tuple(d["filter_keys"])}) == config

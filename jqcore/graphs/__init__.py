"""Task graphs (Chapman): the submitted shape, its validation and the Python sugar that builds it.

A graph is a DAG of nodes; every node is one job of any queue and kind. It travels whole, as one Kafka
record (an envelope of kind ``jobq.graph`` whose ``args`` is the normalized graph document, routed by the
graph's home ``queue``), so a 2xx means Kafka has every node. The engine creates the graph's record in
Redis from it (idempotent by graph id) and releases each node into its queue once its parents finished
(``jqengine.graphs``). A node's job id is derived from the graph id, the node name and the node's
run generation (:func:`node_job_id`), so a redelivered graph or a repeated release never makes a second job.

Edges carry a policy for when the parent does not complete (fails, is canceled or skipped):

* ``require`` (the default): the child is skipped — and so, transitively, are its own dependents;
* ``always``: the child runs anyway and receives the failure as that parent's input (``on_complete``);
* ``ignore``: the child runs anyway, without that parent's input.

``feed`` says how parents' results reach a handler besides ``current_job().graph.parents``: ``none``,
``last`` (the last parent's result appended to the positional args: a pipeline) or ``list`` (every
parent's result, in parent order, appended as one list: a chord's callback). An ``on_failure`` node runs
once when every other node finished and at least one failed, with every failure appended as a list.

Shapes (the same in HTTP bodies and here): ``nodes`` (any DAG), ``pipeline`` (each result feeds the next),
``chain`` (one after another, no results passed), ``group`` with an optional ``callback`` (a chord), and
``map`` (one node per item of one kind, optional ``callback``).
"""

from jqcore.graphs.build import Graph, Step, chain, fan_out, group, pipeline
from jqcore.graphs.parse import parse, spec_of
from jqcore.graphs.spec import (
    GRAPH_KIND,
    MAX_NODES,
    NODE_STATES,
    Edge,
    Feed,
    GraphSpec,
    Node,
    Policy,
    graph_envelope,
    node_job_id,
)

__all__ = [
    "GRAPH_KIND",
    "MAX_NODES",
    "NODE_STATES",
    "Edge",
    "Feed",
    "Graph",
    "GraphSpec",
    "Node",
    "Policy",
    "Step",
    "chain",
    "fan_out",
    "graph_envelope",
    "group",
    "node_job_id",
    "parse",
    "pipeline",
    "spec_of",
]

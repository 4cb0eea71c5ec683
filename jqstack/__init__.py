"""jqstack: the local stack — provisioning Kafka, Consul, Redis (and Spark's jars) from their public
registries, starting and stopping them, and the one process supervisor every jobq tool uses to run child
processes. The tests' own stack tooling (session stack, testcontainers, fault proxy) is
:mod:`jqstack.testing`, which only a checkout holds.

The bottom layer of jobq: it imports no other jobq package (see the import contracts in
``pyproject.toml``), so the CLI, the tests, the benchmarks and the services can all use it.
"""

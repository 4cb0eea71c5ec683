"""jqstack: the local stack — provisioning Kafka, Consul, Redis (and Spark's jars) from their public
registries, starting and stopping them, the pytest session stack, testcontainers, and the one process
supervisor every jobq tool uses to run child processes.

The bottom layer of jobq: it imports no other jobq package (see the import contracts in
``pyproject.toml``), so the CLI, the tests, the benchmarks and the services can all use it.
"""

# jobq's one image; every role is a `jobq` subcommand (see docker-compose.yml):
#   jobq gate | jobq relay | jobq worker --app mod:registry --queues a,b | jobq canary | jobq topics create --partitions 6
# The gateway's health probe is GET /healthz on JOBQ_GATE_PORT (28080); it is declared on the gate services
# in docker-compose.yml rather than here, since the same image also runs relays, workers and the canary.

FROM python:3.11-slim AS build
# UV_COMPILE_BYTECODE: the image runs with PYTHONDONTWRITEBYTECODE, so without .pyc files installed every
# process would compile each module it imports at every start (a service: 2.4 s of CPU instead of 1.0).
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore UV_NO_CACHE=1 UV_COMPILE_BYTECODE=1
WORKDIR /src

# Dependencies first, so this layer stays cached while only the code changes: jobq's runtime requirements
# (pyproject.toml's dependencies and the extras every role of the image needs: server, web, history,
# tracing; not tui nor spark) at the versions requirements.lock pins, each file checked against the
# sha256 the lock records (--require-hashes: anything the lock does not pin, or a file that differs, fails
# the build). The lock also pins the extras (dev: pytest, mypy, ruff, ...; bench: matplotlib, hdrhistogram;
# spark); they stay out of the image. uv, the installer, comes from the lock too (pip checks its hash) and
# lives in /opt/uv, outside the image's environment; jqstack/lockfile.py turns the requirements into pins.
COPY requirements.lock pyproject.toml ./
COPY jqstack/lockfile.py jqstack/lockfile.py
RUN python -m venv /opt/uv \
 && python jqstack/lockfile.py hashed requirements.lock uv > uv.txt \
 && /opt/uv/bin/pip install --require-hashes --no-deps -r uv.txt \
 && python -m venv --without-pip /opt/jobq \
 && python jqstack/lockfile.py pins requirements.lock pyproject.toml server,web,history,tracing > runtime.txt \
 && /opt/uv/bin/uv pip install --python /opt/jobq/bin/python --require-hashes -c requirements.lock -r runtime.txt

# The product only: .dockerignore keeps the tests, the benchmarks (loadtest/), the examples and the tests' stack
# tooling (jqstack/testing/) out of the context, and the wheel leaves them out anyway (tests/unit/test_wheel.py).
# jobq itself is built with the lock's setuptools (--require-build-hashes: its hash checked too).
COPY . .
RUN /opt/uv/bin/uv pip install --python /opt/jobq/bin/python --no-deps --require-build-hashes \
      --preview-features build-dependency-hashes -b requirements.lock . \
 && /opt/uv/bin/uv pip check --python /opt/jobq/bin/python


# `jobq history run` (docker-compose.yml's `history` service): the same jobq plus PySpark, a Java runtime
# and Spark's Kafka connector jars, resolved by Maven while the image is built (nothing is fetched when
# the history runs). Built with `--target history`; the default image (the last stage, below) stays without Spark.
FROM python:3.11-slim AS history-build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore UV_NO_CACHE=1 UV_COMPILE_BYTECODE=1 JOBQ_HOME=/opt/jobq-home
RUN apt-get update && apt-get install -y --no-install-recommends maven openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/jobq /opt/jobq
COPY --from=build /opt/uv /opt/uv
COPY --from=build /src /src
WORKDIR /src
# pyspark (an sdist, built with the lock's setuptools) under the same hash checks; then the connector's jars,
# Maven with strict checksums and each jar held to deploy/spark/jars.sha256 (jqstack.provision).
RUN python jqstack/lockfile.py pins requirements.lock pyproject.toml spark > spark.txt \
 && /opt/uv/bin/uv pip install --python /opt/jobq/bin/python --require-hashes -c requirements.lock -r spark.txt \
      --require-build-hashes --preview-features build-dependency-hashes -b requirements.lock \
 && PYTHONPATH=/src /opt/jobq/bin/python -c 'from jqstack.provision import ensure_spark_jars; ensure_spark_jars()'

FROM python:3.11-slim AS history
ENV PATH=/opt/jobq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    JOBQ_HOME=/opt/jobq-home \
    JOBQ_HISTORY_PATH=/data/history
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 jobq \
 && useradd --system --uid 10001 --gid jobq --home-dir /home/jobq --create-home --shell /usr/sbin/nologin jobq \
 && mkdir -p /data/history && chown jobq:jobq /data/history
COPY --from=history-build /opt/jobq /opt/jobq
COPY --from=history-build /opt/jobq-home /opt/jobq-home
USER 10001:10001
WORKDIR /home/jobq
ENTRYPOINT ["jobq"]
CMD ["history", "run"]


# The default image: every role but the history.
FROM python:3.11-slim
ENV PATH=/opt/jobq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 10001 jobq \
 && useradd --system --uid 10001 --gid jobq --home-dir /home/jobq --create-home --shell /usr/sbin/nologin jobq
COPY --from=build /opt/jobq /opt/jobq
USER 10001:10001
WORKDIR /home/jobq
# the gateway's default JOBQ_GATE_PORT
EXPOSE 28080
ENTRYPOINT ["jobq"]
CMD ["--help"]


# jobq's one image; every role is a `jobq` subcommand (see docker-compose.yml):
#   jobq gate | jobq relay | jobq worker --app mod:registry --queues a,b | jobq canary | jobq topics create --partitions 6
# The gateway's health probe is GET /healthz on JOBQ_GATE_PORT (28080); it is declared on the gate services
# in docker-compose.yml rather than here, since the same image also runs relays, workers and the canary.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
RUN python -m venv /opt/jobq

# Dependencies first, so this layer stays cached while only the code changes: jobq's runtime requirements
# (pyproject.toml's dependencies), every version pinned by requirements.lock. The lock also pins the extras
# (dev: pytest, mypy, ruff, ...; bench: matplotlib, hdrhistogram; spark); they stay out of the image.
COPY requirements.lock pyproject.toml ./
RUN python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' > runtime.txt \
 && /opt/jobq/bin/pip install --constraint requirements.lock --requirement runtime.txt

# Fail the build if anything installed is not exactly the lock's pin (a dependency added to pyproject.toml
# without `uv pip compile` would otherwise come in at whatever version the index serves today).
RUN /opt/jobq/bin/python -c 'import importlib.metadata as md, re, sys; \
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower(); \
lock = dict(l.strip().split("==", 1) for l in open("requirements.lock") if "==" in l and not l.lstrip().startswith("#")); \
lock = {norm(k): v for k, v in lock.items()}; \
bad = sorted(f"{d.name}=={d.version}" for d in md.distributions() \
             if norm(d.name) != "pip" and lock.get(norm(d.name)) != d.version); \
sys.exit(f"not pinned by requirements.lock: {bad}" if bad else 0)'

# The product only: .dockerignore keeps the tests, the benchmarks (loadtest/), the examples and the tests' stack
# tooling (jqstack/testing/) out of the context, and the wheel leaves them out anyway (tests/unit/test_wheel.py).
COPY . .
RUN /opt/jobq/bin/pip install --no-deps --no-build-isolation . && /opt/jobq/bin/pip check


# `jobq history run` (docker-compose.yml's `history` service): the same jobq plus PySpark, a Java runtime
# and Spark's Kafka connector jars, resolved by Maven while the image is built (nothing is fetched when
# the history runs). Built with `--target history`; the default image (the last stage, below) stays without Spark.
FROM python:3.11-slim AS history-build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore JOBQ_HOME=/opt/jobq-home
RUN apt-get update && apt-get install -y --no-install-recommends maven openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/jobq /opt/jobq
COPY --from=build /src /src
WORKDIR /src
RUN python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["spark"], sep="\n")' > spark.txt \
 && /opt/jobq/bin/pip install --constraint requirements.lock --requirement spark.txt \
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


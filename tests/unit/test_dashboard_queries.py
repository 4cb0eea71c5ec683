"""The Grafana dashboard (``deploy/grafana/jobq.json``) and the alert rules (``deploy/prometheus/alerts.yml``)
query only metrics jobq exports: every PromQL expression is parsed by Prometheus's own ``promtool`` (as a
recording rule), its metric names are extracted and each must be a series of a metric defined in
``jqcore/metrics.py`` (the one module that declares them, registered in prometheus-client's registry)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

import jqcore.metrics  # noqa: F401  (registers every jobq metric in REGISTRY)
from jqstack.provision import ensure_promtool

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "jobq.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"

GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h", "$queue": ".*"}
"""What Grafana substitutes before Prometheus sees a query (the dashboard's own variables included)."""
KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right", "bool"}
KEYWORDS |= {"offset", "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_NAME = re.compile(r"(?<![\w:.$])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers left once strings, label matchers,
    ranges, grouping label lists, function calls, keywords and numbers are set aside."""
    text = _STRING.sub('""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\$\w+", " ", text)
    text = re.sub(r"\b\d[\w.]*", " ", text)  # numbers and durations (5m, 1e3, 0.95)
    return {n for n in _NAME.findall(text) if n.lower() not in KEYWORDS}


def test_the_extractor_finds_the_selected_metrics_only() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (queue, le) (rate(jobq_job_run_seconds_bucket{queue=~"a|b", '
        'kind!="x"}[$__rate_interval]))) / on (queue) group_left max(jobq_queue_paused offset 5m) > 0.5 '
        "and time() - jobq_worker_silent_seconds > 600 unless absent(jobq_canary_sent_total)"
    )
    assert metric_names(expr) == {
        "jobq_job_run_seconds_bucket",
        "jobq_queue_paused",
        "jobq_worker_silent_seconds",
        "jobq_canary_sent_total",
    }
    assert metric_names("label_values(jobq_queue_depth_jobs, queue)") == {"jobq_queue_depth_jobs", "queue"}


def exported() -> set[str]:
    """Every series name the jobq metrics expose (a counter's ``_total``, a histogram's ``_bucket``, ...)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "gauge": ("",),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("", "_count", "_sum", "_created"),
    }
    return {
        family.name + s
        for family in REGISTRY.collect()
        if family.name.startswith("jobq_")
        for s in suffixes.get(family.type, ("",))
    }


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in panels:
        yield p
        yield from _panels(p.get("panels", []))


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def dashboard_queries(doc: dict[str, Any]) -> dict[str, str]:
    """Where → expression, for every panel target."""
    out = {}
    for panel in _panels(doc["panels"]):
        for target in panel.get("targets", []):
            out[f"{panel['title']} / {target['refId']}"] = target["expr"]
    return out


def rule_queries() -> dict[str, str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {r["alert"]: r["expr"] for g in groups for r in g["rules"]}


def grafana_free(expr: str) -> str:
    for var, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(var, value)
    assert "$" not in expr, f"an unknown Grafana variable in {expr!r}"
    return expr


def test_every_panel_queries_prometheus_through_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    graphs = [p for p in _panels(dashboard["panels"]) if p["type"] != "row"]
    assert graphs
    for panel in graphs:
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel.get("targets"), f"{panel['title']} has no query"
    titles = " ".join(p["title"] for p in _panels(dashboard["panels"]) if p["type"] == "row")
    for section in ("Queues", "Pipeline", "Workers", "Redis"):
        assert section in titles


def test_the_dashboard_shows_what_issue_57_asks_for(dashboard: dict[str, Any]) -> None:
    used = set().union(*(metric_names(e) for e in dashboard_queries(dashboard).values()))
    for wanted in (
        "jobq_queue_depth_jobs",
        "jobq_queue_oldest_pending_age_seconds",
        "jobq_queue_attempts_total",
        "jobq_job_run_seconds_bucket",
        "jobq_gate_requests_total",
        "jobq_gate_request_seconds_bucket",
        "jobq_gate_jobs_produced_total",
        "jobq_relay_lag_records",
        "jobq_relay_records_total",
        "jobq_relay_batch_seconds_bucket",
        "jobq_scheduler_jobs_total",
        "jobq_jobs_in_flight",
        "jobq_worker_claims_total",
        "jobq_worker_silent_seconds",
        "jobq_redis_memory_used_bytes",
        "jobq_redis_memory_max_bytes",
    ):
        assert wanted in used, wanted


@pytest.mark.parametrize("source", ["dashboard", "rules"])
def test_every_query_names_only_metrics_jobq_exports(source: str, dashboard: dict[str, Any]) -> None:
    queries = dashboard_queries(dashboard) if source == "dashboard" else rule_queries()
    names = exported()
    assert queries
    for where, expr in queries.items():
        used = metric_names(grafana_free(expr))
        assert used, f"{where} names no metric"
        unknown = used - names
        assert not unknown, f"{where} uses {sorted(unknown)}, which jqcore/metrics.py does not define"


def test_the_dashboards_variables_name_jobq_metrics(dashboard: dict[str, Any]) -> None:
    names = exported()
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            selected = re.fullmatch(r"label_values\((\w+), *(\w+)\)", query)
            assert selected, query
            assert selected[1] in names, query


def test_every_dashboard_query_is_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """Prometheus's parser decides: each query becomes a recording rule ``promtool check rules`` parses."""
    queries = dashboard_queries(dashboard)
    rules = [
        {"record": f"jobq_dashboard:q{i}", "expr": grafana_free(e)} for i, e in enumerate(queries.values())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        [str(ensure_promtool()), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

"""The alert rules (``deploy/prometheus/alerts.yml``) checked and unit-tested by Prometheus's own
``promtool`` (built from its Go module by ``jqstack.provision.ensure_promtool``; ``./run test`` builds it
before pytest): ``check rules`` parses every expression and template, ``test rules`` feeds the series of
``tests/alerts/alerts_test.yml`` and compares the alerts that fire."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from jqstack.provision import ensure_promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
TESTS = ROOT / "tests" / "alerts" / "alerts_test.yml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return ensure_promtool()


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120, check=False)


def test_rules_are_valid(promtool: Path) -> None:
    done = _run(promtool, "check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr


def test_rules_fire_as_the_tests_expect(promtool: Path) -> None:
    done = _run(promtool, "test", "rules", TESTS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_has_a_test_that_makes_it_fire() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    fired = {c["alertname"] for t in tests for c in t.get("alert_rule_test", []) if c.get("exp_alerts")}
    assert alerts <= fired, f"no test in {TESTS.name} makes these fire: {sorted(alerts - fired)}"

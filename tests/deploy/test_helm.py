"""The Helm chart (deploy/helm/jobq), rendered and checked without a cluster.

``helm template`` renders the chart with every values file in ``deploy/helm/jobq/ci`` (the defaults, a
production-like install with KEDA, the Prometheus Operator's objects and NetworkPolicies, a minimal one);
every rendered object is validated against the Kubernetes API schemas of the oldest Kubernetes the chart
supports and the newest ``kubernetes-validate`` knows (strict: an unknown field fails), and the custom
resources against the CRD schemas KEDA and the Prometheus Operator publish in their Go modules
(:mod:`jqstack.testing.helm`). ``helm lint --strict`` must be clean, values that break
``values.schema.json`` must be refused, and the chart must keep the promises docs/deploy.md makes
(probes, drains, hooks, secrets only from Secrets, one copy of the alert rules).

Helm is built once from its Go module (``./run test`` does it before pytest, as it builds Consul); after
that the whole file takes a few seconds.
"""

from __future__ import annotations

import functools
import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import kubernetes_validate.utils  # type: ignore[import-untyped]
import pytest
import yaml  # type: ignore[import-untyped]

from jobq.commands.config_file import load
from jqcore.routing import CANARY_PREFIX
from jqstack.testing.helm import crd_schema, ensure_crd_schemas, ensure_helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "jobq"
VALUES = sorted((CHART / "ci").glob("*.yaml"))
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
GRAFANA = ROOT / "deploy" / "grafana" / "jobq.json"
RUNBOOK_BASE = "https://git.example.com/jobq/blob/main"  # ci/production.yaml's prometheusRule.runbookBaseUrl
SETTINGS_DOC = ROOT / "docs" / "settings.md"

OLDEST_KUBE = re.search(r'kubeVersion: ">=([0-9.]+)', (CHART / "Chart.yaml").read_text())
assert OLDEST_KUBE is not None, "Chart.yaml must say the oldest Kubernetes it supports (kubeVersion)"
KUBE_VERSIONS = (OLDEST_KUBE.group(1), str(kubernetes_validate.latest_version()))
NEWEST_KUBE = KUBE_VERSIONS[-1]

CRD_GROUPS = ("keda.sh/", "monitoring.coreos.com/")

CONTRACT_SETTINGS = {
    # issue 34's settings that other parts of the issue add; the chart sets them already
    "JOBQ_KAFKA_CREATE_TOPICS",
    "JOBQ_KAFKA_REPLICATION",
    "JOBQ_KAFKA_SSL_CERTIFICATE_LOCATION",
    "JOBQ_KAFKA_SSL_KEY_LOCATION",
    "JOBQ_REDIS_TLS_CERT_FILE",
    "JOBQ_REDIS_TLS_KEY_FILE",
    "JOBQ_CONSUL_CA_FILE",
    "JOBQ_CONSUL_CERT_FILE",
    "JOBQ_CONSUL_KEY_FILE",
    "JOBQ_CONSUL_VERIFY",
    "JOBQ_CANARY_METRICS_PORT",
}
"""Settings of the shared contracts (relay/scheduler/worker/canary health ports, secured servers, topic
handling) that may not be in docs/settings.md yet on a branch of its own."""
CLIENT_SETTINGS = {"JOBQ_URL", "JOBQ_TOKEN_FILE"}
"""What the client and the CLI read (``jobq.Client.from_env``, ``jobq.commands.remote``; no settings class,
so not in docs/settings.md): the configuration hook calls the gateways with them."""

SECRET_NAME = re.compile(r"(PASSWORD|TOKENS?|SECRET)$")


def helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(ensure_helm()), *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )
    if check and done.returncode != 0:
        pytest.fail(f"helm {' '.join(map(str, args))} exited {done.returncode}:\n{done.stderr}")
    return done


@functools.cache
def _rendered(values: Path, kube: str) -> str:
    return helm("template", "jobq", CHART, "--namespace", "jobq", "-f", values, "--kube-version", kube).stdout


def render(values: Path, kube: str = NEWEST_KUBE) -> list[dict[str, Any]]:
    """The objects the chart renders with ``values`` (rendered once per file and version, parsed anew)."""
    return [doc for doc in yaml.load_all(_rendered(values, kube), Loader=yaml.CSafeLoader) if doc]


@pytest.fixture(scope="module", autouse=True)
def schemas_read_once() -> Iterator[None]:
    """kubernetes-validate reads and parses its schema files (1.8 MB of definitions) on every call:
    read each once for this module (a tenth of the time)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            kubernetes_validate.utils,
            "schema_contents",
            functools.cache(kubernetes_validate.utils.schema_contents),
        )
        yield


@pytest.fixture(scope="module")
def crd_validators() -> Callable[[str, str], Any]:
    """A JSON Schema validator of a custom resource (apiVersion, kind) from its project's CRD, or None."""
    folder = ensure_crd_schemas()

    @functools.cache
    def validator(api_version: str, kind: str) -> Any:
        schema = crd_schema(folder, api_version, kind)
        return None if schema is None else jsonschema.Draft7Validator(schema)

    return validator


@pytest.fixture(scope="module", params=VALUES, ids=[v.stem for v in VALUES])
def values(request: pytest.FixtureRequest) -> Path:
    path: Path = request.param
    return path


@pytest.fixture(scope="module")
def production() -> list[dict[str, Any]]:
    return render(CHART / "ci" / "production.yaml")


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The pod spec of a workload (a Deployment's or Job's template, a bare Pod's: `helm test`)."""
    if doc["kind"] in ("Deployment", "Job"):
        spec: dict[str, Any] = doc["spec"]["template"]["spec"]
        return spec
    return doc["spec"] if doc["kind"] == "Pod" else None


def containers(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for d in docs:
        for c in (pod_spec(d) or {}).get("containers", []):
            yield d["metadata"]["name"], c


def plain_env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}


def test_values_files_exist() -> None:
    assert {v.stem for v in VALUES} >= {"defaults", "production", "minimal"}


@pytest.mark.parametrize("kube", KUBE_VERSIONS)
def test_every_object_matches_its_schema(
    values: Path, kube: str, crd_validators: Callable[[str, str], Any]
) -> None:
    docs = render(values, kube)
    assert docs
    for doc in docs:
        what = f"{values.name} @ {kube}: {doc.get('kind')} {doc.get('metadata', {}).get('name')}"
        if doc["apiVersion"].startswith(CRD_GROUPS):
            validator = crd_validators(doc["apiVersion"], doc["kind"])
            assert validator is not None, f"{what}: no fetched CRD defines {doc['apiVersion']} {doc['kind']}"
            try:
                validator.validate(doc)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{what}: {exc.message} at {list(exc.absolute_path)}")
        else:
            try:
                kubernetes_validate.validate(doc, kube, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{what}: {exc.message} at {list(exc.path)}")


def test_lint_is_clean(values: Path) -> None:
    done = helm("lint", "--strict", CHART, "-f", values, "--kube-version", NEWEST_KUBE, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "[WARNING]" not in done.stdout, done.stdout
    assert "[ERROR]" not in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("args", "refusal"),
    [
        (["--set", "kafka.securityProtocol=SASL"], "securityProtocol"),
        (["--set", "redis.url=http://redis:6379"], "/redis/url"),
        (["--set", "gateway.replicas=-1"], "/gateway/replicas"),
        (["--set", "gatewy.enabled=true"], "gatewy"),
        (["--set", "worker.queues=null"], "queues"),
        (["--set", "worker.queues={}"], "/worker/queues"),
        (["--set-string", "worker.env.JOBQ_REDIS_PASSWORD=hunter2"], "JOBQ_REDIS_PASSWORD"),
        (["--set-string", "extraEnv.JOBQ_GATE_TOKENS=t"], "JOBQ_GATE_TOKENS"),
        (["--set", "worker.app="], "worker.app is required"),
        (["--set", "history.persistence.readers=true"], "needs accessModes [ReadWriteMany]"),
        (["--set", "gateway.enabled=false"], "canary.enabled needs gateway.enabled"),
        (["--set", "tokens.envLists=false"], "tokens.existingSecret (a tokens file) or tokens.envLists"),
        (["--set", "tokens.existingSecret=Not_A_Name"], "existingSecret"),
        (["--set", "history.query.slots=0"], "/history/query/slots"),
        (["--set", "prometheusRule.runbookBaseUrl=https://docs.example.com/"], "runbookBaseUrl"),
        (["--set", "upgrade.schedulersFirst.timeoutSeconds=5"], "timeoutSeconds"),
        (["--set", "configAsCode.enabled=true"], "configAsCode.enabled needs configAsCode.file"),
        (["--set", "configAsCode.prune=yes"], "/configAsCode/prune"),
    ],
    ids=lambda a: a[-1] if isinstance(a, list) else None,
)
def test_bad_values_are_refused(args: list[str], refusal: str) -> None:
    defaults = CHART / "ci" / "defaults.yaml"
    done = helm("template", "jobq", CHART, "-f", defaults, *args, "--kube-version", NEWEST_KUBE, check=False)
    assert done.returncode != 0, f"helm rendered {args}"
    assert refusal in done.stderr, done.stderr


def test_settings_are_real(values: Path) -> None:
    """Every JOBQ_* name the chart sets is a setting (docs/settings.md is generated from the classes)."""
    documented = set(re.findall(r"`(JOBQ_[A-Z0-9_]+)`", SETTINGS_DOC.read_text())) | CONTRACT_SETTINGS
    documented |= CLIENT_SETTINGS
    for name, container in containers(render(values)):
        for env in container.get("env", []):
            assert env["name"] in documented, f"{name} sets {env['name']}, which no jobq setting reads"


def pods(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for d in docs:
        spec = pod_spec(d)
        if spec is not None:
            yield d["metadata"]["name"], spec


def mounted_files(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each file a container sees from a Secret volume that lists its items: path -> (Secret, key); only
    read-only mounts count."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    files: dict[str, tuple[str, str]] = {}
    for mount in container.get("volumeMounts", []):
        secret = volumes[mount["name"]].get("secret")
        if secret is None or not mount.get("readOnly"):
            continue
        for item in secret.get("items", []):
            files[f"{mount['mountPath']}/{item['path']}"] = (secret["secretName"], item["key"])
    return files


CREDENTIAL_FILES = re.compile(r"^JOBQ_.*(PASSWORD|TOKENS?|SECRET|USERNAME)_FILE$")


def test_secrets_come_only_from_secrets(values: Path) -> None:
    for name, container in containers(render(values)):
        assert "envFrom" not in container
        for env in container.get("env", []):
            if SECRET_NAME.search(env["name"]):
                assert "secretKeyRef" in env.get("valueFrom", {}), (
                    f"{name}: {env['name']} is not from a Secret"
                )
    assert not [d for d in render(values) if d["kind"] == "Secret"]
    maps = {d["metadata"]["name"]: d for d in render(values) if d["kind"] == "ConfigMap"}
    assert set(maps) <= {"jobq-grafana", "jobq-config"}, "a ConfigMap but the dashboard or the jobq.toml"
    assert set(maps.get("jobq-config", {"data": {"jobq.toml": ""}})["data"]) == {"jobq.toml"}


def test_no_credential_is_in_the_environment_each_is_a_mounted_file(values: Path) -> None:
    """Security review M9: Redis, Kafka SASL and Consul credentials, the callback secret and every token
    reach a process as a file of its role's Secret, mounted read-only (the *_FILE settings), never as an
    environment variable (which handler code, a child process or a crash dump would see)."""
    seen: set[str] = set()
    for name, pod in pods(render(values)):
        for container in pod["containers"]:
            files = mounted_files(pod, container)
            for env in container.get("env", []):
                assert "secretKeyRef" not in env.get("valueFrom", {}), f"{name}: {env['name']} from the env"
                assert not SECRET_NAME.search(env["name"]), f"{name}: {env['name']} holds a credential"
                if CREDENTIAL_FILES.match(env["name"]) or env["name"] == "JOBQ_TOKENS_FILE":
                    assert env["value"] in files, f"{name}: {env['name']} names no mounted Secret file"
                    seen.add(env["name"])
    if values.stem == "production":
        assert seen >= {
            "JOBQ_REDIS_USERNAME_FILE",
            "JOBQ_REDIS_PASSWORD_FILE",
            "JOBQ_KAFKA_SASL_USERNAME_FILE",
            "JOBQ_KAFKA_SASL_PASSWORD_FILE",
            "JOBQ_CONSUL_TOKEN_FILE",
            "JOBQ_CALLBACK_SECRET_FILE",
            "JOBQ_CANARY_TOKEN_FILE",
            "JOBQ_TOKENS_FILE",
        }


def _env_files(docs: list[dict[str, Any]], deployment: str) -> dict[str, tuple[str, str]]:
    """setting -> (Secret, key) of the files a deployment's container is pointed at."""
    pod = of_kind(docs, "Deployment")[deployment]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    files = mounted_files(pod, container)
    return {e["name"]: files[e["value"]] for e in container.get("env", []) if e.get("value") in files}


def test_each_role_mounts_its_own_secret_and_only_what_it_uses(production: list[dict[str, Any]]) -> None:
    gateway = _env_files(production, "jobq-gateway")
    assert gateway["JOBQ_REDIS_PASSWORD_FILE"] == ("jobq-gateway", "redis-password")
    assert gateway["JOBQ_CALLBACK_SECRET_FILE"] == ("jobq-gateway", "callback-secret")
    assert gateway["JOBQ_TOKENS_FILE"] == ("jobq-tokens", "tokens.toml")
    assert "JOBQ_GATE_TOKENS_FILE" not in gateway, "tokens.envLists is off: no all-queue token list"
    web = _env_files(production, "jobq-web")
    assert web["JOBQ_TOKENS_FILE"] == ("jobq-tokens", "tokens.toml")
    assert not {"JOBQ_WEB_ADMIN_TOKENS_FILE", "JOBQ_WEB_READ_TOKENS_FILE"} & set(web)
    dispatcher = _env_files(production, "jobq-dispatcher")
    assert dispatcher["JOBQ_CALLBACK_SECRET_FILE"] == ("jobq-worker", "callback-secret")
    worker = _env_files(production, "jobq-worker")
    assert worker["JOBQ_REDIS_USERNAME_FILE"] == ("jobq-worker", "redis-username")
    assert "JOBQ_CALLBACK_SECRET_FILE" not in worker, "handler code never sees the callback secret"
    assert _env_files(production, "jobq-canary")["JOBQ_CANARY_TOKEN_FILE"] == ("jobq-canary", "canary-token")
    assert "JOBQ_TOKENS_FILE" not in _env_files(production, "jobq-relay")


def test_the_older_token_lists_are_files_too_and_optional() -> None:
    docs = render(CHART / "ci" / "defaults.yaml")
    assert _env_files(docs, "jobq-gateway")["JOBQ_GATE_TOKENS_FILE"] == ("jobq-gateway", "gate-tokens")
    assert "JOBQ_TOKENS_FILE" not in _env_files(docs, "jobq-gateway")
    web = _env_files(docs, "jobq-web")
    assert web["JOBQ_WEB_ADMIN_TOKENS_FILE"] == ("jobq-web", "web-admin-tokens")
    minimal = _env_files(render(CHART / "ci" / "minimal.yaml"), "jobq-relay")
    assert minimal == {}, "plaintext servers without ACLs: no credential, no credentials volume"


def test_the_queues_a_shared_deployment_serves_reach_every_role(production: list[dict[str, Any]]) -> None:
    """``routing.queuesAllowed``: the names a token's glob may create and the relays accept (security
    review: unbounded queue names), in every container that routes."""
    routed = {name: plain_env(c) for name, c in containers(production) if "JOBQ_ROUTES" in plain_env(c)}
    assert len(routed) >= 5, sorted(routed)
    assert {env["JOBQ_QUEUES_ALLOWED"] for env in routed.values()} == {"emails*,clicks,default,canary.*"}


def test_services_never_create_topics_and_a_hook_does(production: list[dict[str, Any]]) -> None:
    for name, container in containers(production):
        if name == "jobq-schedulers-first":  # speaks to the Kubernetes API only
            assert "env" not in container
            continue
        assert plain_env(container)["JOBQ_KAFKA_CREATE_TOPICS"] == "false", name
    job = of_kind(production, "Job")["jobq-topics"]
    hooks = job["metadata"]["annotations"]["helm.sh/hook"].split(",")
    assert set(hooks) == {"pre-install", "pre-upgrade"}
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["topics", "create"]
    assert "serviceAccountName" not in job["spec"]["template"]["spec"], (
        "a hook runs before the chart's SA exists"
    )


def test_probes_pdbs_and_drains(production: list[dict[str, Any]]) -> None:
    deployments = of_kind(production, "Deployment")
    pdbs = {
        p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
        for p in of_kind(production, "PodDisruptionBudget").values()
    }
    for name, d in deployments.items():
        component = d["metadata"]["labels"]["app.kubernetes.io/component"]
        (c,) = d["spec"]["template"]["spec"]["containers"]
        if component == "history":  # a Spark query without an HTTP endpoint; one replica, Recreate
            assert d["spec"]["replicas"] == 1
            assert d["spec"]["strategy"]["type"] == "Recreate"
            continue
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", name
        assert component in pdbs, f"{name} has no PodDisruptionBudget"
    worker = deployments["jobq-worker"]["spec"]["template"]["spec"]
    timeout = float(plain_env(worker["containers"][0])["JOBQ_WORKER_GRACE_S"])
    assert timeout == 900  # ci/production.yaml's longestJobTimeoutSeconds
    assert worker["terminationGracePeriodSeconds"] > timeout
    gateway = deployments["jobq-gateway"]["spec"]["template"]["spec"]
    assert gateway["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    dispatcher = deployments["jobq-dispatcher"]["spec"]["template"]["spec"]
    assert dispatcher["containers"][0]["args"] == ["dispatcher", "--queues", "hooks,webhooks"]
    assert dispatcher["terminationGracePeriodSeconds"] > float(
        plain_env(dispatcher["containers"][0])["JOBQ_DISPATCHER_GRACE_S"]
    )
    secrets = {  # the dispatcher signs callback tokens with the secret the gateways check them with
        name: _env_files(production, f"jobq-{name}")["JOBQ_CALLBACK_SECRET_FILE"][1]
        for name in ("gateway", "dispatcher")
    }
    assert secrets == {"gateway": "callback-secret", "dispatcher": "callback-secret"}


def test_workers_scale_on_the_depth_of_every_queue_they_serve(production: list[dict[str, Any]]) -> None:
    (scaled,) = of_kind(production, "ScaledObject").values()
    worker = of_kind(production, "Deployment")["jobq-worker"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == "jobq-worker"
    assert scaled["spec"]["minReplicaCount"] == 0
    assert "replicas" not in worker["spec"], "KEDA owns the replica count"
    queues = plain_env(worker["spec"]["template"]["spec"]["containers"][0])["JOBQ_WORKER_QUEUES"].split(",")
    assert {f"{CANARY_PREFIX}jobs.default", f"{CANARY_PREFIX}jobs.emails"} <= set(queues)
    watched = {t["metadata"]["listName"] for t in scaled["spec"]["triggers"]}
    assert watched == {f"jobq:{{{q}}}:{s}" for q in queues for s in ("ready", "running")}
    (hpa,) = of_kind(production, "HorizontalPodAutoscaler").values()
    assert hpa["spec"]["scaleTargetRef"]["name"] == "jobq-gateway"


def test_alert_rules_are_the_one_copy(production: list[dict[str, Any]]) -> None:
    (rule,) = of_kind(production, "PrometheusRule").values()
    rules = yaml.safe_load(ALERTS.read_text())
    for group in rules["groups"]:  # production.yaml sets prometheusRule.runbookBaseUrl
        for r in group["rules"]:
            r["annotations"]["runbook_url"] = f"{RUNBOOK_BASE}/{r['annotations']['runbook_url']}"
    assert rule["spec"] == rules
    assert (CHART / "files" / "alerts.yml").resolve() == ALERTS.resolve()
    plain = of_kind(render(CHART / "ci" / "defaults.yaml", NEWEST_KUBE), "PrometheusRule")
    assert not plain, "the defaults render no PrometheusRule"


def test_the_grafana_dashboard_is_the_one_copy(production: list[dict[str, Any]]) -> None:
    dashboard = of_kind(production, "ConfigMap")["jobq-grafana"]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["jobq.json"]) == json.loads(GRAFANA.read_text())
    assert (CHART / "files" / "jobq-dashboard.json").resolve() == GRAFANA.resolve()


def test_schedulers_roll_first_on_an_upgrade(production: list[dict[str, Any]]) -> None:
    """docs/deploy.md "Upgrading": a pre-upgrade hook, after the topics hook, rolls the scheduler Deployment
    to the very template Helm applies next and waits; it alone holds an API token, allowed get and patch
    on that one Deployment."""
    job = of_kind(production, "Job")["jobq-schedulers-first"]
    topics = of_kind(production, "Job")["jobq-topics"]
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-upgrade"
    assert int(annotations["helm.sh/hook-weight"]) > int(
        topics["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["args"][:2] == ["rollout", "/etc/jobq/rollout/deployment.json"]
    rendered = json.loads(pod["metadata"]["annotations"]["jobq.io/deployment"])
    scheduler = of_kind(production, "Deployment")["jobq-scheduler"]
    assert rendered == scheduler, "the hook must apply exactly what Helm applies after it"
    (volume,) = pod["spec"]["volumes"]
    (item,) = volume["downwardAPI"]["items"]
    assert item["fieldRef"]["fieldPath"] == "metadata.annotations['jobq.io/deployment']"
    (role,) = of_kind(production, "Role").values()
    assert role["rules"] == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["jobq-scheduler"],
            "verbs": ["get", "patch"],
        }
    ]
    (binding,) = of_kind(production, "RoleBinding").values()
    assert binding["subjects"][0]["name"] == pod["spec"]["serviceAccountName"] == "jobq-schedulers-first"
    for obj in (role, binding, *of_kind(production, "ServiceAccount").values()):
        if obj["metadata"]["name"] == "jobq-schedulers-first":
            assert obj["metadata"]["annotations"]["helm.sh/hook"] == "pre-upgrade"
            assert int(obj["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
                annotations["helm.sh/hook-weight"]
            )
    tokens = [
        name for name, spec in pods(production) if spec.get("automountServiceAccountToken") is not False
    ]
    assert tokens == ["jobq-schedulers-first"], "only the hook calls the Kubernetes API"
    minimal = render(CHART / "ci" / "minimal.yaml")
    assert "jobq-schedulers-first" in of_kind(minimal, "Job")
    off = helm(
        "template",
        "jobq",
        CHART,
        "-f",
        CHART / "ci" / "defaults.yaml",
        "--set",
        "upgrade.schedulersFirst.enabled=false",
        "--kube-version",
        NEWEST_KUBE,
    ).stdout
    assert "schedulers-first" not in off


def test_helm_test_runs_a_canary_round(production: list[dict[str, Any]]) -> None:
    (pod,) = of_kind(production, "Pod").values()
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert pod["spec"]["restartPolicy"] == "Never"
    (container,) = pod["spec"]["containers"]
    assert container["args"] == ["canary", "--once"]
    env = plain_env(container)
    assert env["JOBQ_CANARY_GATEWAYS"] == "http://jobq-gateway:28080"
    files = mounted_files(pod["spec"], container)
    assert files[env["JOBQ_CANARY_TOKEN_FILE"]] == ("jobq-canary", "canary-token"), "the canary's own token"
    policy = of_kind(production, "NetworkPolicy")["jobq-gateway"]
    admitted = [
        p["podSelector"]["matchLabels"]
        for r in policy["spec"]["ingress"]
        for p in r.get("from", [])
        if "podSelector" in p
    ]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] in {
        m["app.kubernetes.io/component"] for m in admitted
    }
    minimal = render(CHART / "ci" / "minimal.yaml")
    assert not of_kind(minimal, "Pod"), "no canary: no canary round to test with"


def notes(values: Path, tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` prints it (`helm template` renders no NOTES: a copy of the chart wraps
    it in a ConfigMap and renders that)."""
    chart = tmp_path / "jobq"
    shutil.copytree(CHART, chart, symlinks=False)
    (chart / "files" / "NOTES.txt").write_text((chart / "templates" / "NOTES.txt").read_text())
    wrapper = '{{ tpl (.Files.Get "files/NOTES.txt") . | quote }}'
    (chart / "templates" / "zz-notes.yaml").write_text(
        f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: notes}}\ndata:\n  notes: {wrapper}\n"
    )
    out = helm(
        "template", "jobq", chart, "-n", "jobq", "-f", values, *args, "--show-only", "templates/zz-notes.yaml"
    ).stdout
    text: str = yaml.safe_load(out)["data"]["notes"]
    return text


def test_notes_say_how_to_reach_the_dashboard_and_sign_in(tmp_path: Path) -> None:
    text = notes(CHART / "ci" / "defaults.yaml", tmp_path)
    assert "kubectl --namespace jobq port-forward service/jobq-web 28090:28090" in text
    assert "http://127.0.0.1:28090/" in text
    assert "get secret jobq-web -o jsonpath='{.data.web-admin-tokens}' | base64 -d" in text
    assert "helm test jobq --namespace jobq" in text
    assert "docs/deploy.md" in text
    production = notes(CHART / "ci" / "production.yaml", tmp_path / "p")
    assert "tokens file in Secret jobq-tokens" in production
    minimal = notes(CHART / "ci" / "minimal.yaml", tmp_path / "m")
    assert "port-forward" not in minimal, "no dashboard in the minimal install"
    assert "helm test" not in minimal


def test_network_policies_admit_only_what_is_asked(production: list[dict[str, Any]]) -> None:
    policies = {
        p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"]: p
        for p in of_kind(production, "NetworkPolicy").values()
    }
    assert set(policies) == {
        "gateway",
        "web",
        "relay",
        "scheduler",
        "worker",
        "dispatcher",
        "canary",
        "history",
    }
    assert policies["history"]["spec"]["ingress"] == []
    for component in ("relay", "scheduler", "worker", "dispatcher", "canary"):
        (rule,) = policies[component]["spec"]["ingress"]
        assert rule["ports"] == [{"port": "metrics"}], component


def test_configuration_as_code_is_applied_through_the_gateways_after_install_and_upgrade(
    production: list[dict[str, Any]],
) -> None:
    values = yaml.safe_load((CHART / "ci" / "production.yaml").read_text())
    config_map = of_kind(production, "ConfigMap")["jobq-config"]
    text = config_map["data"]["jobq.toml"]
    assert text == values["configAsCode"]["file"]
    load(text, "production.yaml configAsCode.file")  # the example is a valid file
    job = of_kind(production, "Job")["jobq-config"]
    assert set(job["metadata"]["annotations"]["helm.sh/hook"].split(",")) == {"post-install", "post-upgrade"}
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["apply", "--file", "/etc/jobq/config/jobq.toml", "--prune", "--yes"]
    env = plain_env(container)
    assert env["JOBQ_URL"] == "http://jobq-gateway:28080", (
        "this release's gateways: the door's policy applies"
    )
    files = mounted_files(pod, container)
    assert files[env["JOBQ_TOKEN_FILE"]] == ("jobq-admin", "gateway-token"), "the admin role's token, a file"
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/etc/jobq/config", True)
    assert volumes["config"]["configMap"]["name"] == "jobq-config"
    assert job["spec"]["template"]["metadata"]["annotations"]["jobq.io/config-sha256"]
    gateway = next(
        p
        for p in of_kind(production, "NetworkPolicy").values()
        if p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    )
    peers = [f.get("podSelector", {}).get("matchLabels", {}) for f in gateway["spec"]["ingress"][0]["from"]]
    assert {"app.kubernetes.io/component": "config"}.items() <= next(
        p for p in peers if p.get("app.kubernetes.io/component") == "config"
    ).items(), "the hook may reach the gateways"
    defaults = render(CHART / "ci" / "defaults.yaml")
    assert "jobq-config" not in of_kind(defaults, "Job"), "off unless asked for"
    assert not of_kind(defaults, "ConfigMap")

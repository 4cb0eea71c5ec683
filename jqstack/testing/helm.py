"""The tools that check the Helm chart (``deploy/helm/jobq``): Helm itself, and the schemas of the
custom resources the chart renders (KEDA's, the Prometheus Operator's).

Both come from the Go module proxy, pinned by a checked-in ``go.sum`` and fetched with ``-mod=readonly``
(a module not in the ``go.sum`` fails instead of being resolved anew):

- **Helm** is built once from its Go module through the wrapper in ``deploy/helm-tool`` (as Consul is
  through ``deploy/consul``), its version stamped in, cached as ``<JOBQ_HOME>/bin/helm-<version>``.
- **The CRD schemas**: ``go mod download -json`` of the modules ``deploy/helm-crds/go.mod`` requires
  gives the folder of each module's source, which holds the project's own CRD manifests
  (``config/crd/bases/keda.sh_*.yaml``, ``example/prometheus-operator-crd/monitoring.coreos.com_*.yaml``).
  Each served version's ``openAPIV3Schema`` is written once to ``<JOBQ_HOME>/crd-schemas-<versions>/``
  as ``<group>_<version>_<kind>.json`` (a JSON Schema the tests validate objects with).

Test tooling only (not in the wheel).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from jqstack.errors import StackError
from jqstack.paths import deploy_dir, home
from jqstack.procs import run_step
from jqstack.provision import build_go_tool, require_tool

__all__ = ["HELM_VERSION", "crd_schema", "ensure_crd_schemas", "ensure_helm"]

HELM_VERSION = "3.22.0"
HELM_MODULE = "helm.sh/helm/v3"

CRD_FILES = {
    "github.com/kedacore/keda/v2": [
        "config/crd/bases/keda.sh_scaledobjects.yaml",
        "config/crd/bases/keda.sh_triggerauthentications.yaml",
    ],
    "github.com/prometheus-operator/prometheus-operator": [
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml",
    ],
}
"""The CRD manifests the chart's custom resources are checked against, by the module that ships them."""


def _go_env() -> dict[str, str]:
    # -mod=readonly: every module must already be pinned by the wrapper's go.mod and go.sum
    return {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}


def _pinned(wrapper: Path, module: str) -> str:
    """The version of ``module`` the wrapper's go.mod requires (the one place a version is written)."""
    gomod = wrapper / "go.mod"
    text = gomod.read_text() if gomod.is_file() else ""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if found is None:
        raise StackError(f"{gomod} must require {module}: it pins the version jobq uses.")
    return found.group(1)


def ensure_helm() -> Path:
    """The ``helm`` binary, built once from its Go module through ``deploy/helm-tool``."""
    wrapper = deploy_dir() / "helm-tool"
    pinned = _pinned(wrapper, HELM_MODULE)
    if pinned != f"v{HELM_VERSION}":
        raise StackError(f"{wrapper / 'go.mod'} pins {HELM_MODULE} {pinned}, jobq expects v{HELM_VERSION}.")
    # Helm's own Makefile stamps the Kubernetes version its client libraries speak (k8s.io/client-go
    # v0.N is Kubernetes 1.N): `helm template` and `helm lint` assume it when not given --kube-version.
    kube_minor = _pinned(wrapper, "k8s.io/client-go").split(".")[1]
    stamps = [f"{HELM_MODULE}/internal/version.version=v{HELM_VERSION}"] + [
        f"{HELM_MODULE}/pkg/{pkg}.k8sVersion{part}={value}"
        for pkg in ("chartutil", "lint/rules")
        for part, value in (("Major", "1"), ("Minor", kube_minor))
    ]
    return build_go_tool(
        "helm",
        HELM_VERSION,
        HELM_MODULE,
        f"{HELM_MODULE}/cmd/helm",
        ldflags=" ".join(["-s", "-w", *(f"-X {stamp}" for stamp in stamps)]),
        wrapper_dir="helm-tool",
        note="first run only, ~2-5 min",
        timeout_s=1800,
    )


def ensure_crd_schemas() -> Path:
    """The folder of JSON Schemas of KEDA's and the Prometheus Operator's CRDs (see the module doc)."""
    wrapper = deploy_dir() / "helm-crds"
    versions = {module: _pinned(wrapper, module) for module in CRD_FILES}
    out = home() / ("crd-schemas-" + "-".join(v.lstrip("v") for v in versions.values()))
    if (out / ".complete").exists():
        return out
    require_tool("go", "Install Go >= 1.26 (the machine image ships one in /usr/local/go/bin).")
    listing = run_step(
        "fetching KEDA's and the Prometheus Operator's CRDs (their Go modules)",
        ["go", "mod", "download", "-json", *CRD_FILES],
        note="first run only, ~10-30 s",
        cwd=wrapper,
        env=_go_env(),
        timeout_s=900,
        hint="The Go module proxy must be reachable; deploy/helm-crds/go.sum pins both modules.",
    )
    dirs = {info["Path"]: Path(info["Dir"]) for info in _json_stream(listing) if "Dir" in info}
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for module, files in CRD_FILES.items():
        if module not in dirs:
            raise StackError(f"`go mod download` gave no folder for {module}: {listing[-500:]}")
        for name in files:
            for key, schema in _schemas(dirs[module] / name).items():
                (tmp / f"{key}.json").write_text(json.dumps(schema))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    (out / ".complete").touch()
    return out


def crd_schema(folder: Path, api_version: str, kind: str) -> dict[str, Any] | None:
    """The schema of ``kind`` at ``api_version`` (``keda.sh/v1alpha1``) from :func:`ensure_crd_schemas`'s
    folder, or None when no fetched CRD defines it."""
    path = folder / f"{_key(api_version, kind)}.json"
    if not path.is_file():
        return None
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def _key(api_version: str, kind: str) -> str:
    return f"{api_version.replace('/', '_')}_{kind}"


def _schemas(manifest: Path) -> dict[str, dict[str, Any]]:
    """``openAPIV3Schema`` of every served version of the CRD in ``manifest``, by ``_key``."""
    crd = yaml.safe_load(manifest.read_text())
    spec = crd["spec"]
    found = {
        _key(f"{spec['group']}/{version['name']}", spec["names"]["kind"]): version["schema"][
            "openAPIV3Schema"
        ]
        for version in spec["versions"]
        if version.get("served", True)
    }
    if not found:
        raise StackError(f"{manifest} defines no served version with a schema")
    return {key: _python_patterns(schema) for key, schema in found.items()}


def _python_patterns(node: Any) -> Any:
    """The schema with Go's regular expressions made Python's: Go accepts a flag group such as ``(?i)``
    anywhere, Python only at the start (``^(?i)(abort|warn)?$`` becomes ``(?i)^(abort|warn)?$``)."""
    if isinstance(node, dict):
        out = {k: _python_patterns(v) for k, v in node.items()}
        pattern = out.get("pattern")
        if isinstance(pattern, str):
            flags = "".join(re.findall(r"\(\?[a-zA-Z]+\)", pattern))
            out["pattern"] = flags + re.sub(r"\(\?[a-zA-Z]+\)", "", pattern)
        return out
    if isinstance(node, list):
        return [_python_patterns(v) for v in node]
    return node


def _json_stream(text: str) -> list[dict[str, Any]]:
    """``go mod download -json`` prints one JSON object per module, one after another."""
    decoder = json.JSONDecoder()
    objects: list[dict[str, Any]] = []
    pos = 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        value, pos = decoder.raw_decode(text, pos)
        objects.append(value)
    return objects

"""What the stack builds and fetches is pinned in the checkout: each Go tool by its wrapper's go.mod and
go.sum (built with -mod=readonly), each pom's jars by their sha256 list. No Go, Maven or network here: the
refusals under test happen before either runs."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from jqstack import provision
from jqstack.errors import StackError
from jqstack.paths import CONSUL_VERSION, TOXIPROXY_VERSION, deploy_dir

GO_TOOLS = {
    "consul": ("github.com/hashicorp/consul", CONSUL_VERSION),
    "toxiproxy": ("github.com/Shopify/toxiproxy/v2", TOXIPROXY_VERSION),
}


@pytest.mark.parametrize("tool", sorted(GO_TOOLS))
def test_each_go_wrapper_pins_its_tool_and_has_a_go_sum(tool: str) -> None:
    module, version = GO_TOOLS[tool]
    wrapper = deploy_dir() / tool
    assert f"{module} v{version}" in (wrapper / "go.mod").read_text()
    go_sum = (wrapper / "go.sum").read_text()
    assert re.search(rf"^{re.escape(module)} v{re.escape(version)} h1:", go_sum, re.M), (
        "go.sum lacks the tool"
    )


def _wrapper(tmp_path: Path, go_mod: str, go_sum: str | None) -> None:
    (tmp_path / "tool").mkdir()
    (tmp_path / "tool" / "go.mod").write_text(go_mod)
    if go_sum is not None:
        (tmp_path / "tool" / "go.sum").write_text(go_sum)


def test_a_go_tool_is_refused_without_its_pin_or_its_go_sum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOBQ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("JOBQ_DEPLOY_DIR", str(tmp_path))
    _wrapper(tmp_path, "module x\n\nrequire example.com/tool v1.0.0\n", None)
    with pytest.raises(StackError, match=r"go\.mod must require example\.com/tool v2\.0\.0"):
        provision.build_go_tool("tool", "2.0.0", "example.com/tool")
    with pytest.raises(StackError, match=r"go\.sum is missing"):
        provision.build_go_tool("tool", "1.0.0", "example.com/tool")


@pytest.mark.parametrize("pom", ["kafka", "spark"])
def test_each_pom_has_a_well_formed_jar_list(pom: str) -> None:
    jars = provision.read_jars_list(deploy_dir() / pom / provision.JARS_LIST)
    assert jars
    for name, digest in jars.items():
        assert name.endswith(".jar"), name
        assert re.fullmatch(r"[0-9a-f]{64}", digest), name


def test_jars_that_differ_from_the_list_are_named(tmp_path: Path) -> None:
    (tmp_path / "a.jar").write_bytes(b"a")
    (tmp_path / "b.jar").write_bytes(b"tampered")
    (tmp_path / "extra.jar").write_bytes(b"x")
    sha = {n: hashlib.sha256(n.encode()).hexdigest() for n in ("a", "b")}
    expected = {"a.jar": sha["a"], "b.jar": sha["b"], "gone.jar": sha["a"]}
    assert provision._jar_problems(tmp_path, expected) == [
        "  missing: gone.jar",
        "  not in the list: extra.jar",
        f"  b.jar: sha256 {hashlib.sha256(b'tampered').hexdigest()}, recorded {sha['b']}",
    ]
    assert provision._jar_problems(
        tmp_path, {**expected, "b.jar": hashlib.sha256(b"tampered").hexdigest()}
    ) == [
        "  missing: gone.jar",
        "  not in the list: extra.jar",
    ]

"""docs/designs.md, the five designs' capability tables, stays true: every test it names exists (a test
function of that file, a parametrized one for ``name[id]``), every row names one, no row is a plan, every
link points at a real section, and its summary counts each table's rows. No servers: it reads the files."""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "designs.md"
DESIGNS = ("Slack", "Dynein", "Timestone", "Chapman", "Rickover")
HEADER = "| capability | how jobq does it | test |"
REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(\[[^\]`]+\])?`")
LINK = re.compile(r"\]\(([\w.-]+\.md)(?:#([\w-]+))?\)")
PLANNED = re.compile(r"\b(planned|todo|tbd|not built|coming)\b", re.IGNORECASE)


def tables() -> dict[str, list[list[str]]]:
    """Design (the word its section's title starts with) → its table's rows, as lists of cells (the rows
    under a :data:`HEADER`; the summary table at the top is another)."""
    found: dict[str, list[list[str]]] = {}
    design, in_table = "", False
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            design, in_table = line[3:].split(":")[0].split()[0], False
        elif line == HEADER:
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        elif in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            found.setdefault(design, []).append(cells)
    return found


@cache
def module(path: str) -> ast.Module:
    return ast.parse((ROOT / path).read_text())


def fixtures_with_params(path: str) -> set[str]:
    """Fixtures declared with ``params=`` in the test's module and the conftest.py files above it."""
    trees = [module(path)]
    folder = (ROOT / path).parent
    while folder != ROOT.parent and (folder == ROOT or ROOT in folder.parents):
        if (folder / "conftest.py").exists():
            trees.append(module(str((folder / "conftest.py").relative_to(ROOT))))
        folder = folder.parent
    names = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for dec in node.decorator_list:
                    if isinstance(dec, ast.Call) and any(k.arg == "params" for k in dec.keywords):
                        names.add(node.name)
    return names


def find_test(path: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    for node in ast.walk(module(path)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name:
            return node
    return None


def parametrized(path: str, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    direct = any("parametrize" in ast.unparse(d) for d in fn.decorator_list)
    return direct or bool({a.arg for a in fn.args.args} & fixtures_with_params(path))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    out, fenced = set(), False
    for line in doc.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def test_each_design_has_a_table_of_a_dozen_capabilities_or_more() -> None:
    found = tables()
    assert sorted(found) == sorted(DESIGNS)
    for design, rows in found.items():
        assert len(rows) >= 12, f"{design}: {len(rows)} rows"
        assert all(len(cells) == 3 for cells in rows), f"{design}: a row without three cells"


def test_every_row_names_tests_that_exist() -> None:
    problems = []
    for design, rows in tables().items():
        for capability, _how, tests in rows:
            refs = REF.findall(tests)
            if not refs or len(refs) != tests.count("`") // 2:
                problems.append(f"{design} / {capability}: the test cell must hold only test references")
            for path, name, case in refs:
                fn = find_test(path, name) if (ROOT / path).exists() else None
                if fn is None:
                    problems.append(f"{design} / {capability}: {path}::{name} does not exist")
                elif case and not parametrized(path, fn):
                    problems.append(f"{design} / {capability}: {path}::{name} is not parametrized")
    assert problems == []


def test_no_row_is_a_plan() -> None:
    plans = [" | ".join(c) for rows in tables().values() for c in rows if PLANNED.search(" ".join(c))]
    assert plans == []


def test_every_link_points_at_a_section() -> None:
    bad = []
    for target, anchor in LINK.findall(DOC.read_text()):
        doc = DOC.parent / target
        if not doc.exists() or (anchor and anchor not in anchors(doc)):
            bad.append(f"{target}#{anchor}")
    assert bad == []


def test_the_summary_counts_the_tables_rows_and_the_readme_links_it() -> None:
    assert "`docs/designs.md`" in (ROOT / "README.md").read_text()
    counts = re.findall(r"^\| (\w+) \([^)]*\) \| (\d+) \|", DOC.read_text(), re.MULTILINE)
    assert {d: int(n) for d, n in counts} == {d: len(rows) for d, rows in tables().items()}

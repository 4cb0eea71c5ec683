"""What the everyday commands share (``jobq.commands.remote``): durations, refs, the token from a file, the
confirmation rule — without a stack (the commands themselves are tested against one in ``tests/cli``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from jobq.commands import remote


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("30s", 30_000),
        ("5m", 300_000),
        ("2h", 7_200_000),
        ("1d", 86_400_000),
        ("500ms", 500),
        ("1.5h", 5_400_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert remote.parse_duration(text) == ms
    assert remote.parse_duration(remote.format_duration(ms)) == ms


@pytest.mark.parametrize("text", ["", "30", "s", "2 weeks", "-1h", "1y"])
def test_a_bad_duration_names_the_option(text: str) -> None:
    with pytest.raises(typer.BadParameter, match=r"e\.g\. 30s, 5m, 2h, 1d"):
        remote.parse_duration(text, "--since")


def test_format_duration_picks_the_largest_whole_unit() -> None:
    assert [remote.format_duration(ms) for ms in (0, 1500, 90_000, 3_600_000, 604_800_000)] == [
        "0s",
        "1500ms",
        "90s",
        "1h",
        "7d",
    ]


def test_refs() -> None:
    assert remote.parse_ref("billing.invoices/01J0") == ("billing.invoices", "01J0")
    for bad in ("01J0", "/01J0", "q/"):
        with pytest.raises(typer.BadParameter, match="<queue>/<id>"):
            remote.parse_ref(bad)


def test_the_token_may_come_from_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "token"
    path.write_text("secret-0123456789\n")
    client = remote.gateway({"JOBQ_URL": "http://a:1, http://b:2", "JOBQ_TOKEN_FILE": str(path)})
    assert [g.url for g in client.gateways] == ["http://a:1", "http://b:2"]
    assert client._headers["Authorization"] == "Bearer secret-0123456789"
    with pytest.raises(typer.Exit) as done:
        remote.gateway({"JOBQ_URL": "http://a:1", "JOBQ_TOKEN": "x", "JOBQ_TOKEN_FILE": str(path)})
    assert done.value.exit_code == 2
    assert capsys.readouterr().err.startswith("error (client_unconfigured): JOBQ_TOKEN and JOBQ_TOKEN_FILE")


def test_a_destructive_action_without_a_terminal_needs_yes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(remote, "_interactive", lambda: False)
    remote.confirm("purge 3 jobs?", yes=True, count=3)  # --yes: no question
    remote.confirm("purge 0 jobs?", yes=False, count=0)  # nothing to do: nothing to ask
    with pytest.raises(typer.Exit) as done:
        remote.confirm("purge 3 jobs?", yes=False, count=3)
    assert done.value.exit_code == 2
    err = capsys.readouterr().err
    assert err.startswith("error (confirmation_required): purge 3 jobs? — no terminal to ask on: pass --yes")
    assert err.count("\n") == 1

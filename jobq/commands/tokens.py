"""``jobq tokens hash``: the ``sha256 = "..."`` line of a tokens file (``JOBQ_TOKENS_FILE``) for a secret."""

from __future__ import annotations

import sys

import typer

from jqruntime.tokens import MIN_SECRET_CHARS, hash_line

__all__ = ["app"]

app = typer.Typer(
    help="Named, scoped tokens of the gateway and the dashboard (JOBQ_TOKENS_FILE, docs/security.md).",
    no_args_is_help=True,
)

MIN_SECRET = MIN_SECRET_CHARS
"""Shortest secret accepted, the servers' own minimum off loopback (``openssl rand -hex 24`` gives 48
characters)."""


@app.command("hash")
def hash_secret() -> None:
    """Print the sha256 line of a [[token]] table for a secret read from stdin (one line) or, on a
    terminal, from a hidden prompt. The secret itself is never printed; send SIGHUP to the gateway and
    the dashboard to load the changed file. Rotating a token (a new sha256 under the same name) ends every
    dashboard session signed in with its old secret at its next request."""
    if sys.stdin.isatty():
        secret = typer.prompt("secret", hide_input=True, confirmation_prompt=True, err=True)
    else:
        secret = sys.stdin.readline().rstrip("\r\n")
    if len(secret.strip()) < MIN_SECRET:
        typer.echo(
            f"jobq tokens hash: the secret must have at least {MIN_SECRET} characters "
            "(make one with `openssl rand -hex 24`)",
            err=True,
        )
        raise typer.Exit(2)
    typer.echo(hash_line(secret.strip()))

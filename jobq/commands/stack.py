"""``jobq stack up | down | status | logs | env``: the real local servers, on loopback."""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

from jqstack.manager import Endpoints, Stack, StackSpec
from jqstack.paths import stack_dir
from jqstack.procs import log_tail
from jqstack.secure import ROLES
from kafkagate.settings import GateSettings

__all__ = [
    "DEV_TOKEN",
    "DEV_WEB_ADMIN",
    "DEV_WEB_READ",
    "StackTokens",
    "app",
    "dev_exports",
    "existing_stack",
    "history_of",
    "local_gateway_url",
    "open_stack",
    "print_status",
    "secure_exports",
    "stack_tokens",
]

DEV_TOKEN = "jobq-dev-token"
"""The development bearer token, for loopback only: ``jobq stack env`` exports it to a local gateway
(``JOBQ_GATE_TOKENS``), the canary and clients (``JOBQ_TOKEN``); ``jobq demo``'s gateways accept it too."""

DEV_WEB_ADMIN = "jobq-dev-admin"
"""The development dashboard tokens (``jobq stack env``, ``jobq demo``): admin may act, viewer may look."""
DEV_WEB_READ = "jobq-dev-read"

app = typer.Typer(
    help="Provision, start, inspect and stop the local Kafka + Consul + Redis stack. The default stack "
    "uses the documented ports; each other --name runs beside it on ports of its own; --secure makes a "
    "stack of secured servers (TLS, SASL/ACL users, tokens per role)."
)
console = Console()

NameOpt = Annotated[str, typer.Option("--name", help="Stack name (folder under JOBQ_HOME/stacks).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for machines.")]


def open_stack(name: str, brokers: int = 1, redis_cluster: bool = False, secure: bool | None = None) -> Stack:
    """The named stack, keeping the shape it already has when it exists (``up`` may change it);
    ``secure=None`` keeps a secure stack secure."""
    if secure is None:
        state = stack_dir(name) / "state.json"
        secure = state.exists() and bool(json.loads(state.read_text())["spec"].get("secure"))
    if secure and redis_cluster:
        raise typer.BadParameter("a secure stack runs one Redis, not a Redis Cluster", param_hint="--secure")
    mode: Literal["single", "cluster"] = "cluster" if redis_cluster else "single"
    return Stack(StackSpec(name=name, brokers=brokers, redis_mode=mode, secure=secure))


def existing_stack(name: str) -> Stack:
    state = stack_dir(name) / "state.json"
    if not state.exists():
        raise typer.BadParameter(
            f"no stack named {name!r}; start it with `jobq stack up`", param_hint="--name"
        )
    spec = json.loads(state.read_text())["spec"]
    return Stack(StackSpec(**spec))


def local_gateway_url() -> str:
    """Where ``jobq gate`` listens when no ``JOBQ_GATE_HOST`` / ``JOBQ_GATE_PORT`` is set."""
    fields = GateSettings.model_fields
    return f"http://{fields['host'].default}:{fields['port'].default}"


def history_of(root: Path) -> Path:
    """Where a local stack's history tables live (``JOBQ_HISTORY_PATH`` for that stack)."""
    return root / "history"


def dev_exports(endpoints: Endpoints, root: Path) -> dict[str, str]:
    """Everything a local gateway, relay, worker, canary and client need: the stack's endpoints, the
    local gateway's URL, the development token (accepted by that gateway, sent by the canary) and the
    history of the stack's events (in the stack's folder ``root``: `stack down --purge` removes it with
    the Kafka data it indexes)."""
    url = local_gateway_url()
    return {
        **endpoints.exports(),
        "JOBQ_HISTORY_PATH": str(history_of(root)),
        "JOBQ_GATE_TOKENS": DEV_TOKEN,
        "JOBQ_CANARY_GATEWAYS": url,
        "JOBQ_CANARY_TOKEN": DEV_TOKEN,
        "JOBQ_URL": url,
        "JOBQ_TOKEN": DEV_TOKEN,
        "JOBQ_WEB_ADMIN_TOKENS": f"admin:{DEV_WEB_ADMIN}",
        "JOBQ_WEB_READ_TOKENS": f"viewer:{DEV_WEB_READ}",
    }


@dataclass(frozen=True)
class StackTokens:
    """The bearer tokens local processes use on a stack: the gateways' (sent by the canary and clients)
    and the dashboard's admin and viewer tokens."""

    gate: str
    web_admin: str
    web_read: str
    secret: bool
    """The secure stack's own (``<stack>/secrets``): never printed but by ``jobq stack env``; else the
    development tokens."""

    def web_settings(self) -> dict[str, str]:
        return {
            "JOBQ_WEB_ADMIN_TOKENS": f"admin:{self.web_admin}",
            "JOBQ_WEB_READ_TOKENS": f"viewer:{self.web_read}",
        }


def stack_tokens(stack: Stack) -> StackTokens:
    """The development tokens on a plain stack, the stack's own on a secure one."""
    if (files := stack.secure) is None:
        return StackTokens(DEV_TOKEN, DEV_WEB_ADMIN, DEV_WEB_READ, secret=False)
    return StackTokens(files.secret("gate"), files.secret("web-admin"), files.secret("web-read"), secret=True)


def secure_exports(stack: Stack, role: str) -> dict[str, str]:
    """What a process of ``role`` needs on the secure stack: its credentials for the three servers
    (:meth:`Stack.client_env`), the history folder, and the stack's own gateway and dashboard tokens for
    the roles that serve or use them."""
    url = local_gateway_url()
    env = stack.client_env(role)
    env["JOBQ_HISTORY_PATH"] = str(history_of(stack.root))
    tokens = stack_tokens(stack)
    gate, web = tokens.gate, tokens.web_settings()
    if role == "gateway":  # `jobq gate --web` serves the dashboard too
        env |= {"JOBQ_GATE_TOKENS": gate, **web}
    elif role == "web":
        env |= web
    elif role == "canary":
        env |= {"JOBQ_CANARY_GATEWAYS": url, "JOBQ_CANARY_TOKEN": gate}
    elif role == "admin":
        env |= {"JOBQ_URL": url, "JOBQ_TOKEN": gate}
    return env


@app.command()
def up(
    name: NameOpt = "default",
    brokers: Annotated[int, typer.Option(min=1, max=5, help="Kafka brokers (3 for a real cluster).")] = 1,
    redis_cluster: Annotated[
        bool, typer.Option("--redis-cluster", help="A 3-master Redis Cluster instead of one Redis.")
    ] = False,
    secure: Annotated[
        bool | None,
        typer.Option(
            "--secure/--plain",
            help="Secured servers: SASL_SSL Kafka (SCRAM-SHA-512, ACLs), TLS-only Redis with ACL users, "
            "HTTPS Consul with ACLs (default deny); a local CA and per-role secrets in the stack's folder. "
            "Default: the shape the stack already has (plain for a new one).",
        ),
    ] = None,
) -> None:
    """Fetch/build what is missing (cached), start every stopped server, wait until each answers.

    The default stack listens on its documented ports; any other --name gets a block of ports of its
    own (kept in its state.json), so it runs beside the default one."""
    started = time.monotonic()
    stack = open_stack(name, brokers, redis_cluster, secure)
    stack.provision()  # cached; on the first run each fetch and build says what it does, and how far
    with console.status("starting Kafka, Consul and Redis..."):
        stack.up()
    console.print(f"stack [bold]{name}[/] up in {time.monotonic() - started:.1f}s")
    print_status(stack)


@app.command()
def down(
    name: NameOpt = "default",
    purge: Annotated[
        bool, typer.Option("--purge", help="Also delete the stack's data and logs (servers killed at once).")
    ] = False,
) -> None:
    """Stop every server of the stack (TERM, then KILL after a grace period; no grace with --purge)."""
    existing_stack(name).down(purge=purge)
    console.print(f"stack [bold]{name}[/] stopped" + (" and purged" if purge else ""))


def print_status(stack: Stack) -> bool:
    rows = stack.status()
    table = Table("server", "port", "pid", "health", "log")
    for row in rows:
        health = (
            "[green]healthy[/]"
            if row["healthy"]
            else ("[yellow]starting[/]" if row["running"] else "[red]down[/]")
        )
        table.add_row(row["name"], str(row["port"]), str(row["pid"] or "-"), health, row["log"])
    console.print(table)
    return all(r["healthy"] for r in rows)


@app.command()
def status(name: NameOpt = "default", as_json: JsonOpt = False) -> None:
    """Each server with its port, pid and health (exit 1 when any is unhealthy)."""
    stack = existing_stack(name)
    if as_json:
        rows = stack.status()
        typer.echo(json.dumps({"stack": name, "servers": rows}, indent=2))
        healthy = all(r["healthy"] for r in rows)
    else:
        healthy = print_status(stack)
    raise typer.Exit(0 if healthy else 1)


@app.command()
def logs(
    server: Annotated[str | None, typer.Argument(help="One server (e.g. kafka-1); all when omitted.")] = None,
    name: NameOpt = "default",
    lines: Annotated[int, typer.Option("-n", help="Lines per log.")] = 40,
) -> None:
    """The tail of each server's log."""
    stack = existing_stack(name)
    chosen = [s for s in stack.servers if server in (None, s.name)]
    if not chosen:
        known = ", ".join(s.name for s in stack.servers)
        raise typer.BadParameter(f"no server {server!r}; known: {known}", param_hint="SERVER")
    for s in chosen:
        console.rule(f"{s.name} ({s.log})")
        typer.echo(log_tail(s.log, lines))


@app.command()
def env(
    name: NameOpt = "default",
    role: Annotated[
        str | None,
        typer.Option(
            "--role",
            help=f"Secure stack only: whose credentials ({', '.join(ROLES)}; default admin).",
        ),
    ] = None,
) -> None:
    """Shell export lines for the stack's endpoints, the local gateway (JOBQ_URL) and the development
    token (JOBQ_TOKEN, accepted by `jobq gate` run in that shell): eval "$(jobq stack env)".

    On a secure stack: the settings one --role needs (Kafka SASL_SSL user, Redis ACL user over TLS,
    Consul token over HTTPS, the CA; secrets as *_FILE paths), and the stack's own gateway and
    dashboard tokens for the roles that use them. The only command that shows the secrets."""
    stack = existing_stack(name)
    if stack.secure is None:
        if role is not None:
            raise typer.BadParameter(f"stack {name!r} is not secure: it has no roles", param_hint="--role")
        exports = dev_exports(stack.endpoints, stack.root)
    elif (role := role or "admin") not in ROLES:
        raise typer.BadParameter(f"unknown role {role!r}; roles: {', '.join(ROLES)}", param_hint="--role")
    elif not stack.secure.ca_cert.exists():
        raise typer.BadParameter(
            f"stack {name!r} has no secrets yet; start it: `jobq stack up --name {name}`", param_hint="--name"
        )
    else:
        exports = secure_exports(stack, role)
    for key, value in exports.items():
        typer.echo(f"export {key}={shlex.quote(value)}")

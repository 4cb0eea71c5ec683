"""The authorization matrix: every route of the gateway and of the dashboard, read from their routers,
sent by every token profile, against a real gateway and dashboard (Kafka, Redis, Consul).

The expectations are this file's own, not the code's: :data:`GATE` and :data:`DASH` say for each route
(method and path template) the scope it needs and what each of its variants touches — team B's objects
(``theirs``), team A's own (``mine``, with a kind team A's kind-limited token may not use), every queue
(``every``), or team A's body over team B's stored object (``hijack``: replacing B's switch or schedule by
name). A route the router serves but the table does not name fails the test: a new route must say what it
touches. A request is **refused** when the answer's code is one of the door's (:data:`AUTH_CODES`), and
**let through** otherwise (a 404 or 409 from the handler is a request the door let through)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from aiohttp import web

from jqcore.cron import CronSchedule
from jqcore.envelope import new_envelope
from jqcore.graphs import Graph
from jqcore.routing import Route, RoutingSettings
from jqcore.settings.pipeline import CronSettings
from jqcore.settings.servers import ConsulSettings
from jqengine import Engine, Switch
from jqruntime.authz import AUTH_CODES
from jqruntime.consulconn import close_consul, consul_client
from jqruntime.stores.cron import CronStore
from jqruntime.stores.presence import Presence
from jqruntime.tokens import hash_line
from jqstack.manager import Endpoints
from jqweb.main import WebService
from jqweb.overview import Sources
from jqweb.settings import WebSettings
from kafkagate.main import GateService

ALL = ["enqueue", "read", "work", "admin"]
SECRET = "-secret-0123456789abcdef"
UNTHROTTLED = "1000000/min"
"""The failed-token throttles set out of reach: the "wrong" and "rotated" profiles fail on every route,
and past a throttle every profile from this address would be refused (429 ``auth_throttled``) before the
rules this test reads are applied (the throttles have tests of their own: ``tests/gate/test_tokens.py``,
``tests/web/test_sessions.py``)."""


@dataclass(frozen=True)
class Profile:
    scopes: tuple[str, ...]
    queues: str  # "a" (teama.*), "b" (payments*), "*" (every queue)
    kinds: tuple[str, ...] = ("*",)


PROFILES: dict[str, Profile | None] = {
    "none": None,
    "wrong": None,
    "rotated": None,
    "a-enqueue": Profile(("enqueue",), "a"),
    "a-read": Profile(("read",), "a"),
    "a-work": Profile(("work",), "a"),
    "a-admin": Profile(("read", "admin"), "a"),
    "a-kinds": Profile(tuple(ALL), "a", ("report.*",)),
    "b-admin": Profile(tuple(ALL), "b"),
    "root": Profile(tuple(ALL), "*"),
}
KIND = "refund.issue"
"""The kind the routes name: outside ``a-kinds``' globs."""


def tokens_file(p: str) -> str:
    globs = {"a": f"{p}.teama.*", "b": f"{p}.payments*", "*": "*"}
    out = ""
    for name, prof in PROFILES.items():
        if prof is None:
            continue
        out += (
            f'[[token]]\nname = "{name}"\n{hash_line(name + SECRET)}\nscopes = {list(prof.scopes)}\n'
            f'queues = ["{globs[prof.queues]}"]\nkinds = {list(prof.kinds)}\n\n'
        )
    # "rotated": the secret the token named "rotated" had before it was replaced in this file
    return out + f'[[token]]\nname = "rotated"\n{hash_line("rotated-new" + SECRET)}\nscopes = {ALL}\n'


def secret_of(name: str) -> str | None:
    return {"none": None, "wrong": "no-such" + SECRET, "rotated": "rotated" + SECRET}.get(name, name + SECRET)


# ---- what each route touches ------------------------------------------------------------------------
@dataclass
class Spec:
    scope: str  # open | signed | read | enqueue | work | admin
    variants: Mapping[str, Callable[[W], tuple[str, Any]]] = field(default_factory=dict)
    """variant → (path, body) built from the world: theirs | mine | every | hijack | list."""
    kinds: bool = False
    """The mine variant names :data:`KIND` (or takes any kind: a claim)."""


@dataclass
class W:
    """Team A's and team B's objects (queue, job, switch, schedule, graph), made per route."""

    p: str
    a: str = ""
    b: str = ""

    def __post_init__(self) -> None:
        self.a, self.b = f"{self.p}.teama.x", f"{self.p}.payments"

    def q(self, side: str) -> str:
        return self.a if side == "a" else self.b

    def job(self, side: str) -> str:
        return f"{self.p}-{side}-job"

    def switch(self, side: str) -> str:
        return f"{self.p}-{side}-switch"

    def cron(self, side: str) -> str:
        return f"{self.p}-{side}-cron"

    def graph(self, side: str) -> str:
        return f"{self.p}-{side}-graph"

    def pool(self, side: str) -> str:
        return f"{self.p}-{side}-pool:1:{self.q(side)}"


def per(side_path: Callable[[W, str], str], body: Callable[[W, str], Any] | Any = None) -> dict[str, Any]:
    """theirs (team B's) and mine (team A's) variants of a route whose path names one side's object."""

    def variant(side: str) -> Callable[[W], tuple[str, Any]]:
        return lambda w: (side_path(w, side), body(w, side) if callable(body) else body)

    return {"theirs": variant("b"), "mine": variant("a")}


def listing(path: str) -> dict[str, Any]:
    return {"list": lambda w: (path, None)}


OWNER = {"attempt": 1, "token": "t"}


def gate_specs() -> dict[tuple[str, str], Spec]:
    jobs = "/v1/queues/{queue}/jobs"
    job = "/v1/queues/{queue}/jobs/{id}"

    def q(t: str) -> Callable[[W, str], str]:
        return lambda w, s: t.replace("{queue}", w.q(s)).replace("{id}", w.job(s))

    def graph_body(w: W, s: str) -> Any:
        nodes = [{"name": "a", "kind": KIND}, {"name": "b", "kind": KIND, "parents": ["a"]}]
        return {"id": f"{w.p}-new-{s}", "queue": w.q(s), "nodes": nodes}

    def smuggled(w: W) -> tuple[str, Any]:  # team A's graph with a node in team B's queue (review C1)
        graph = graph_body(w, "a")
        graph["nodes"][1]["queue"] = w.b
        return "/v1/graphs", graph

    def cron_body(queue_side: str) -> Callable[[W, str], Any]:
        return lambda w, _: {"every_s": 3600, "queue": w.q(queue_side), "kind": KIND}

    return {
        ("GET", "/healthz"): Spec("open", listing("/healthz")),
        ("GET", "/readyz"): Spec("open", listing("/readyz")),
        ("GET", "/metrics"): Spec("open", listing("/metrics")),
        ("GET", "/openapi.json"): Spec("open", listing("/openapi.json")),
        ("POST", jobs): Spec("enqueue", per(q(jobs), {"kind": KIND}), kinds=True),
        ("GET", job): Spec("read", per(q(job))),
        ("DELETE", job): Spec("admin", per(q(job))),
        ("POST", job + "/replay"): Spec("admin", per(q(job + "/replay")), kinds=True),
        ("GET", "/v1/queues"): Spec("read", listing("/v1/queues")),
        ("GET", "/v1/queues/{queue}"): Spec("read", per(q("/v1/queues/{queue}"))),
        ("PUT", "/v1/queues/{queue}"): Spec("admin", per(q("/v1/queues/{queue}"), {"mode": "simple"})),
        ("PATCH", "/v1/queues/{queue}"): Spec("admin", per(q("/v1/queues/{queue}"), {"paused": False})),
        ("GET", "/v1/queues/{queue}/dead"): Spec("read", per(q("/v1/queues/{queue}/dead"))),
        ("POST", "/v1/queues/{queue}/dead/retry"): Spec(
            "admin", per(q("/v1/queues/{queue}/dead/retry"), {"ids": []})
        ),
        ("DELETE", "/v1/queues/{queue}/dead"): Spec("admin", per(q("/v1/queues/{queue}/dead"), {"ids": []})),
        ("POST", "/v1/queues/{queue}/purge"): Spec("admin", per(q("/v1/queues/{queue}/purge"), {"limit": 1})),
        ("PUT", "/v1/kinds/{kind}"): Spec(
            "admin",
            {
                **per(lambda w, s: f"/v1/kinds/{KIND}", lambda w, s: {"queues": [w.q(s)]}),
                "every": lambda w: (f"/v1/kinds/{KIND}", {}),
            },
            kinds=True,
        ),
        ("GET", "/v1/kinds"): Spec("read", listing("/v1/kinds")),
        ("GET", "/v1/kinds/{kind}"): Spec("read", listing(f"/v1/kinds/{KIND}")),
        ("POST", "/v1/queues/{queue}/claims"): Spec(
            "work", per(q("/v1/queues/{queue}/claims"), {}), kinds=True
        ),
        **{
            ("POST", job + end): Spec("work", per(q(job + end), body))
            for end, body in {
                "/extend": OWNER,
                "/complete": OWNER,
                "/fail": {**OWNER, "error": "x"},
                "/release": OWNER,
                "/snooze": {**OWNER, "delay_ms": 1000},
                "/cancel": OWNER,
            }.items()
        },
        ("POST", "/v1/queues/{queue}/heartbeat"): Spec(
            "work", per(q("/v1/queues/{queue}/heartbeat"), lambda w, s: {"jobs": [{**OWNER, "id": w.job(s)}]})
        ),
        **{
            ("POST", f"/v1/callbacks/{{queue}}/jobs/{{id}}/{end}"): Spec(
                "signed",
                per(
                    lambda w, s, end=end: f"/v1/callbacks/{w.q(s)}/jobs/{w.job(s)}/{end}",
                    {"callback_token": "v1.1.1.x", **({"error": "x"} if end == "fail" else {})},
                ),
            )
            for end in ("complete", "fail")
        },
        ("GET", "/v1/cron"): Spec("read", listing("/v1/cron")),
        ("GET", "/v1/cron/{name}"): Spec("read", per(lambda w, s: f"/v1/cron/{w.cron(s)}")),
        ("PUT", "/v1/cron/{name}"): Spec(
            "admin",
            {
                **per(lambda w, s: f"/v1/cron/{w.cron(s)}", lambda w, s: cron_body(s)(w, s)),
                "hijack": lambda w: (f"/v1/cron/{w.cron('b')}", cron_body("a")(w, "a")),
            },
            kinds=True,
        ),
        **{
            (m, f"/v1/cron/{{name}}{end}"): Spec(
                "admin", per(lambda w, s, end=end: f"/v1/cron/{w.cron(s)}{end}")
            )
            for m, end in (("DELETE", ""), ("POST", "/pause"), ("POST", "/resume"), ("POST", "/trigger"))
        },
        ("GET", "/v1/jobs"): Spec(
            "read",
            {**per(lambda w, s: f"/v1/jobs?queue={w.q(s)}"), "every": lambda w: ("/v1/jobs", None)},
        ),
        ("POST", "/v1/graphs"): Spec(
            "enqueue", {**per(lambda w, s: "/v1/graphs", graph_body), "both": smuggled}, kinds=True
        ),
        ("GET", "/v1/graphs/{graph}"): Spec("read", per(lambda w, s: f"/v1/graphs/{w.graph(s)}")),
        ("POST", "/v1/graphs/{graph}/cancel"): Spec(
            "admin", per(lambda w, s: f"/v1/graphs/{w.graph(s)}/cancel", {})
        ),
        ("POST", "/v1/graphs/{graph}/retry"): Spec(
            "admin", per(lambda w, s: f"/v1/graphs/{w.graph(s)}/retry", {})
        ),
        ("GET", "/v1/switches"): Spec("read", listing("/v1/switches")),
        ("PUT", "/v1/switches/{name}"): Spec(
            "admin",
            {
                **per(lambda w, s: f"/v1/switches/{w.switch(s)}", lambda w, s: {"queue": w.q(s)}),
                "hijack": lambda w: (f"/v1/switches/{w.switch('b')}", {"queue": w.a}),
            },
        ),
        ("DELETE", "/v1/switches/{name}"): Spec("admin", per(lambda w, s: f"/v1/switches/{w.switch(s)}")),
    }


def dash_specs() -> dict[tuple[str, str], Spec]:
    def q(t: str) -> Callable[[W, str], str]:
        return lambda w, s: t.replace("{queue}", w.q(s)).replace("{id}", w.job(s))

    reads = ["/", "/overview/live", "/topics", "/queues", "/graphs", "/workers", "/audit", "/schedules"]
    specs: dict[tuple[str, str], Spec] = {("GET", path): Spec("read", listing(path)) for path in reads}
    specs |= {
        ("GET", "/healthz"): Spec("open", listing("/healthz")),
        ("GET", "/readyz"): Spec("open", listing("/readyz")),
        ("GET", "/metrics"): Spec("open", listing("/metrics")),
        ("GET", "/login"): Spec("open", listing("/login")),
        ("POST", "/login"): Spec("open", {"list": lambda w: ("/login", {"token": "root" + SECRET})}),
        ("POST", "/logout"): Spec("open", listing("/logout")),
        ("GET", "/dead"): Spec("read", {**per(lambda w, s: f"/dead?queue={w.q(s)}"), **listing("/dead")}),
        ("GET", "/jobs"): Spec(
            "read", {**per(lambda w, s: f"/jobs?queue={w.q(s)}"), "every": lambda w: ("/jobs", None)}
        ),
        ("POST", "/jobs/bulk"): Spec(
            "admin",
            {
                **per(
                    lambda w, s: "/jobs/bulk", lambda w, s: {"action": "cancel", "id": f"{w.q(s)}/{w.job(s)}"}
                ),
                "every": lambda w: ("/jobs/bulk", {"action": "cancel", "all": "1", "state": "pending"}),
            },
        ),
        ("GET", "/queues/{queue}"): Spec("read", per(q("/queues/{queue}"))),
        ("GET", "/jobs/{queue}/{id}"): Spec("read", per(q("/jobs/{queue}/{id}"))),
        ("GET", "/jobs/{queue}/{id}/timeline"): Spec("read", per(q("/jobs/{queue}/{id}/timeline"))),
        ("POST", "/jobs/{queue}/{id}/replay"): Spec(
            "admin", per(q("/jobs/{queue}/{id}/replay"), {}), kinds=True
        ),
        ("POST", "/topics/{topic}/rate"): Spec(
            "admin", {"every": lambda w: (f"/topics/{w.p}-topic/rate", {"rate": ""})}
        ),
        ("GET", "/graphs/{graph}"): Spec("read", per(lambda w, s: f"/graphs/{w.graph(s)}")),
    }
    for end in ("block", "unblock", "pause", "resume", "settings", "rate"):
        specs["POST", f"/queues/{{queue}}/{end}"] = Spec("admin", per(q(f"/queues/{{queue}}/{end}"), {}))
    for end in ("cancel", "retry"):
        specs["POST", f"/jobs/{{queue}}/{{id}}/{end}"] = Spec(
            "admin", per(q(f"/jobs/{{queue}}/{{id}}/{end}"), {})
        )
        specs["POST", f"/graphs/{{graph}}/{end}"] = Spec(
            "admin", per(lambda w, s, end=end: f"/graphs/{w.graph(s)}/{end}", {})
        )
    for end in ("retry", "purge"):
        specs["POST", f"/dead/{{queue}}/{end}"] = Spec("admin", per(q(f"/dead/{{queue}}/{end}"), {}))
    for end in ("quiet", "resume", "stop"):
        specs["POST", f"/workers/{{name}}/{end}"] = Spec(
            "admin", per(lambda w, s, end=end: f"/workers/{quote(w.pool(s), safe='')}/{end}", {})
        )
    for end in ("pause", "resume", "trigger"):
        specs["POST", f"/schedules/{{name}}/{end}"] = Spec(
            "admin", per(lambda w, s, end=end: f"/schedules/{w.cron(s)}/{end}", {})
        )
    return specs


GATE, DASH = gate_specs(), dash_specs()


# ---- the expectation ----------------------------------------------------------------------------------
SIDES = {
    "theirs": {"b"},
    "mine": {"a"},
    "both": {"a", "b"},
    "hijack": {"a", "b"},
    "every": {"*"},
    "list": set(),
}
"""What each variant touches: team B's objects, team A's, both (A's body over B's stored object, or A's
graph with a node in B's queue), every queue at once, nothing (a list, narrowed by the page)."""


def expected(name: str, spec: Spec, variant: str, dashboard: bool) -> set[str]:
    """``{"ok"}`` (let through), or the refusals the door may answer (``401`` or codes; a request that
    breaks two rules may be refused for either)."""
    if spec.scope in ("open", "signed"):
        return {"ok"}
    prof = PROFILES[name]
    if prof is None:
        return {"401"}
    if dashboard and "read" not in prof.scopes:
        return {"scope_missing"}
    if spec.scope not in prof.scopes:
        return {"admin_required" if dashboard else "scope_missing"}
    reached = {"a": {"a"}, "b": {"b"}, "*": {"a", "b", "*"}}[prof.queues]
    refusals = set()
    if not SIDES[variant] <= reached:
        refusals.add("queue_forbidden")
    if spec.kinds and variant != "list" and prof.kinds != ("*",):
        refusals.add("kind_forbidden")
    return refusals or {"ok"}


def observed(status: int, body: bytes) -> str:
    if status == 401:
        return "401"
    try:
        code = orjson.loads(body)["error"]["code"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return "ok"
    return str(code) if code in AUTH_CODES else "ok"


def served(app: web.Application) -> set[tuple[str, str]]:
    """Every (method, path template) the app's router serves (its own: not the static files)."""
    out = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource is not None else {}
        path = info.get("formatter") or info.get("path")
        if path and route.method != "HEAD" and route.name != "static":
            out.add((route.method, path))
    return out


# ---- the world and the runs ------------------------------------------------------------------------------
@pytest.fixture
def tokens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(tokens_file(prefix))
    monkeypatch.setenv("JOBQ_TOKENS_FILE", str(path))


async def make_world(w: W, engine: Engine, crons: CronStore, redis: Any) -> None:
    """Each side's queue (with a job), switch, cron schedule, graph and worker pool serving the queue, made
    again before each route (an action let through may have removed them)."""
    for side in ("a", "b"):
        queue = w.q(side)
        await Presence(redis, "worker", w.pool(side), facts=lambda q=queue: {"queues": [q]}).beat()
        await engine.enqueue_batch([new_envelope(queue, KIND, {}, id=w.job(side))])
        switch = Switch(name=w.switch(side), action="park", queue=queue, kind="never", meta={}, set_at_ms=1)
        await engine.admin.set_switch(switch)
        await crons.put(CronSchedule(name=w.cron(side), every_s=3600, queue=queue, kind=KIND), 1)
        graph = Graph(w.graph(side), queue=queue)
        graph.add("n", KIND)
        await engine.graphs.create(graph.spec())


async def run_matrix(
    url: str, specs: dict[tuple[str, str], Spec], w: W, world: Callable[[], Any], dashboard: bool
) -> list[str]:
    wrong: list[str] = []
    headers = {"Accept": "application/json"}
    async with aiohttp.ClientSession() as http:
        for (method, template), spec in sorted(specs.items()):
            for variant, build in sorted(spec.variants.items()):
                await world()  # made again: a request let through may have changed what the next finds
                path, body = build(w)
                order = sorted(PROFILES, key=lambda n: expected(n, spec, variant, dashboard) == {"ok"})
                for name in order:
                    secret = secret_of(name)
                    auth = {"Authorization": f"Bearer {secret}"} if secret else {}
                    kw: dict[str, Any] = {}
                    if body is not None:
                        kw = {"data": body} if dashboard else {"json": body}
                    async with http.request(method, url + path, headers={**headers, **auth}, **kw) as r:
                        got = observed(r.status, await r.read())
                    want = expected(name, spec, variant, dashboard)
                    if got not in want:
                        wanted = " or ".join(sorted(want))
                        wrong.append(f"{method} {template} [{variant}] as {name}: want {wanted}, got {got}")
    return wrong


@pytest.fixture
async def world(
    prefix: str, engine: Engine, endpoints: Endpoints, cron_settings: CronSettings, redis: Any
) -> AsyncIterator[Any]:
    """Team A's and team B's objects, and the call that makes them again (before each route)."""
    w = W(prefix)
    consul = consul_client(ConsulSettings(addr=endpoints.consul_addr))
    crons = CronStore(consul, cron_settings.kv_prefix)
    try:
        yield w, lambda: make_world(w, engine, crons, redis)
    finally:
        await close_consul(consul)


def app_of(service: Any) -> web.Application:
    runner = service._runner
    assert runner is not None
    app: web.Application = runner.app
    return app


async def test_every_gateway_route_refuses_what_a_token_may_not_do(
    tokens: None,
    world: Any,
    prefix: str,
    make_gate: Callable[..., GateService],
    make_topic: Callable[..., str],
) -> None:
    w, remake = world
    routing = RoutingSettings(routes=[Route(queues=f"{prefix}*", topic=make_topic("jobs"))], default_topic="")
    async with make_gate(routing, tokens=[], auth_failures=UNTHROTTLED) as gate:
        routes = served(app_of(gate))
        assert routes == set(GATE), f"say what these routes touch: {sorted(routes ^ set(GATE))}"
        wrong = await run_matrix(gate.url, GATE, w, remake, dashboard=False)
    assert not wrong, "\n".join(wrong)


async def test_every_dashboard_page_and_action_refuses_what_a_token_may_not_do(
    tokens: None, world: Any, web_sources: Sources, redis: Any
) -> None:
    w, remake = world
    settings = WebSettings(port=0, login_failures=1000, login_failures_all=1_000_000)  # (see UNTHROTTLED)
    try:
        async with WebService(settings, web_sources) as dash:
            routes = served(app_of(dash))
            assert routes == set(DASH), f"say what these routes touch: {sorted(routes ^ set(DASH))}"
            wrong = await run_matrix(dash.url, DASH, w, remake, dashboard=True)
    finally:  # the "wrong" and "rotated" guesses counted in the shared Redis: not the next tests' budget
        keys = [k async for k in redis.scan_iter(match="jobq:web:login-failures*", count=1000)]
        if keys:
            await redis.delete(*keys)
    assert not wrong, "\n".join(wrong)

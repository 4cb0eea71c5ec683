"""One authorization policy for every route of the gateway and the dashboard (``docs/security.md``).

Every route declares a :class:`Policy`: the scope it needs and what it touches — the queue of its path,
the queues and kinds its body names (each job of a batch, each node of a graph), the stored object it
names (a kill switch, a cron schedule, a graph: their **owner**, the queue or glob they were made for),
every queue at once. One door (:func:`authorize`, called by the gateway's and the dashboard's middleware
before any handler) finds those touches and refuses the request unless the token may do the route's
scope on each of them. A route table refuses a route declared without a policy, so a new route cannot be
served unchecked; ``tests/gate/test_authz_matrix.py`` sends every route of both servers every token
profile and compares the answers with its own table.

The rules, one per touch:

* a **queue**: one of the token's queue globs matches it (403 ``queue_forbidden``);
* a **glob** (a switch on ``billing.*``): the token holds every queue, or that very glob
  (403 ``queue_forbidden``) — a glob is never allowed because it happens to match a queue of the token's;
* a **kind**: one of the token's kind globs matches it (403 ``kind_forbidden``); **every kind**: the
  token's kinds are ``*`` (a claim takes whatever kind is next);
* **every queue**: the token's queues are ``*`` (an action on all queues at once, a global setting).

Lists are narrowed by their handlers (``visible``), never refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from aiohttp import web

from jqruntime.http import HttpError
from jqruntime.tokens import Token

__all__ = [
    "AUTH_CODES",
    "EVERY_KIND",
    "EVERY_QUEUE",
    "OPEN",
    "POLICIES",
    "SIGNED",
    "TOUCHED",
    "Find",
    "Policy",
    "Scope",
    "Touch",
    "any_kind",
    "auth_throttled",
    "authorize",
    "glob",
    "kind",
    "owner",
    "path_queue",
    "policy_of",
    "queue",
    "queues_of",
    "require_scope",
]

Scope = Literal["open", "signed", "read", "enqueue", "work", "admin"]
"""``open``: no token (probes, metrics, the API document, sign-in); ``signed``: the request carries its
own proof (a dispatch callback's signed token); the others are token scopes."""

AUTH_CODES = frozenset(
    {
        "unauthenticated",
        "token_invalid",
        "session_invalid",
        "scope_missing",
        "admin_required",
        "queue_forbidden",
        "kind_forbidden",
        "auth_throttled",
    }
)
"""The codes of a refusal by the door (what the authorization matrix test reads as "refused")."""


@dataclass(frozen=True, slots=True)
class Touch:
    """One thing a request acts on."""

    what: Literal["queue", "glob", "kind", "every_queue", "every_kind"]
    name: str = ""
    where: str = ""
    """Where the request names it (``jobs[3]``, ``nodes.load``, ``switch 'x'``), for the message."""
    stored: bool = False
    """The owner of a stored object, not a name the request gave: a refusal does not repeat it (another
    tenant's queue name is theirs)."""


EVERY_QUEUE = Touch("every_queue")
EVERY_KIND = Touch("every_kind")


def queue(name: str, where: str = "") -> Touch:
    return Touch("queue", name, where)


def glob(pattern: str, where: str = "", *, stored: bool = False) -> Touch:
    """A queue name or glob: a plain name is a queue, anything with ``*?[`` a glob."""
    return Touch("glob" if any(c in pattern for c in "*?[") else "queue", pattern, where, stored)


def owner(pattern: str, what: str) -> Touch:
    """The queue (or glob) a stored object belongs to: ``what`` names the object (``switch 'x'``)."""
    return glob(pattern, what, stored=True)


def kind(name: str, where: str = "") -> Touch:
    return Touch("kind", name, where)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Find = Callable[[web.Request, Token], Awaitable[Iterable[Touch]]]
"""What a request touches, read from its path, body or the objects it names (the token is given so a find
can skip work whose answer cannot matter, e.g. the kinds of a batch for a token of every kind)."""


async def path_queue(request: web.Request, _: Token) -> Iterable[Touch]:
    """The ``{queue}`` of the route's path."""
    return [queue(request.match_info["queue"], "path")]


async def any_kind(_: web.Request, __: Token) -> Iterable[Touch]:
    """A job of whatever kind is next (a claim: a token held to some kinds cannot be held to them)."""
    return [EVERY_KIND]


@dataclass(frozen=True, slots=True)
class Policy:
    """A route's scope and what it touches (each :data:`Find` is awaited by :func:`authorize`)."""

    scope: Scope
    finds: tuple[Find, ...] = ()

    @property
    def checked(self) -> bool:
        """Whether a token is needed at all."""
        return self.scope not in ("open", "signed")


OPEN = Policy("open")
SIGNED = Policy("signed")
POLICIES = web.AppKey("jobq.policies", dict[Handler, Policy])
"""Each route's policy by its handler (filled by the route tables when the app is made)."""


TOUCHED = web.RequestKey("jobq.touched", list[Touch])
"""What the door checked for a request (the audit trail names its queues: :func:`queues_of`)."""


def queues_of(touches: Iterable[Touch]) -> str:
    """The queues and globs ``touches`` name, space-separated (``*``: every queue), for an audit entry."""
    names = {"*" if t.what == "every_queue" else t.name for t in touches if t.what in _QUEUEISH}
    return " ".join(sorted(names))


_QUEUEISH = frozenset({"queue", "glob", "every_queue"})


_POLICY: web.RequestKey[tuple[web.Application, Policy | None]] = web.RequestKey("jobq.policy")


def policy_of(request: web.Request) -> Policy | None:
    """The matched route's policy (None: no route matched, or a handler no table declared) as the
    application whose middleware asks declares it (a mounted dashboard's own, not the gateway's); looked
    up once per request and application (each middleware of the door asks)."""
    app = request.match_info.current_app
    memo: tuple[web.Application, Policy | None] | None = request.get(_POLICY)
    if memo is not None and memo[0] is app:
        return memo[1]
    found = request.config_dict.get(POLICIES, {}).get(request.match_info.handler)
    request[_POLICY] = (app, found)
    return found


def _refuse(code: str, token: Token, message: str, **details: str) -> HttpError:
    return HttpError(403, code, message, details={"token": token.name, **details})


def _covers(token: Token, pattern: str) -> bool:
    return token.every_queue or pattern in token.queues


def check(token: Token, touch: Touch) -> None:
    """Raise the 403 for a touch ``token`` may not make (see the module's rules); the refusal's words are
    made only for a refusal (this runs for every touch of every request)."""
    if touch.what == "queue":
        allowed = token.allows_queue(touch.name)
    elif touch.what == "glob":
        allowed = _covers(token, touch.name)
    elif touch.what == "kind":
        allowed = token.allows_kind(touch.name)
    elif touch.what == "every_queue":
        allowed = token.every_queue
    else:
        allowed = touch.what != "every_kind" or token.every_kind
    if not allowed:
        _refuse_touch(token, touch)


def _refuse_touch(token: Token, touch: Touch) -> None:
    at = f" ({touch.where})" if touch.where else ""
    limited = f"its queues: {', '.join(token.queues)}"
    if touch.what in ("queue", "glob"):
        if touch.stored:
            message = f"token {token.name!r} may not act on {touch.where}: it belongs to another queue"
            raise _refuse("queue_forbidden", token, f"{message} ({limited})")
        rule = ": a glob needs a token of every queue or of that very glob" if touch.what == "glob" else ""
        raise _refuse(
            "queue_forbidden",
            token,
            f"token {token.name!r} may not use queue {touch.name!r}{at}{rule} ({limited})",
            queue=touch.name,
        )
    if touch.what == "every_queue":
        raise _refuse(
            "queue_forbidden",
            token,
            f"token {token.name!r} is limited to some queues ({limited}); this acts on every queue{at}",
            queue="*",
        )
    if touch.what == "kind":
        raise _refuse(
            "kind_forbidden",
            token,
            f"token {token.name!r} may not use kind {touch.name!r}{at} (its kinds: {', '.join(token.kinds)})",
            kind=touch.name,
        )
    if touch.what == "every_kind":
        raise _refuse(
            "kind_forbidden",
            token,
            f"token {token.name!r} is limited to kinds {', '.join(token.kinds)}; this takes any kind{at}",
            kind="*",
        )


def auth_throttled(retry_after_s: int) -> HttpError:
    """429 ``auth_throttled`` with ``Retry-After``: too many tokens not accepted lately (from this client,
    or from everyone); refused before any token is compared, so even a valid one waits."""
    return HttpError(
        429,
        "auth_throttled",
        f"too many tokens were not accepted lately: try again in {retry_after_s} s",
        (),
        details={"retry_after_s": retry_after_s},
        **{"Retry-After": str(retry_after_s)},
    )


def require_scope(token: Token, policy: Policy, route: str) -> None:
    """403 ``scope_missing`` unless the token has the route's scope (checked before the body is read)."""
    if policy.checked and not token.has(policy.scope):
        raise _refuse(
            "scope_missing",
            token,
            f"token {token.name!r} lacks the {policy.scope!r} scope for {route}",
            scope=policy.scope,
        )


async def authorize(request: web.Request, token: Token, policy: Policy) -> list[Touch]:
    """Check every touch of the request against ``token``; the touches checked (for the audit trail)."""
    touches: list[Touch] = []
    for find in policy.finds:
        for touch in await find(request, token):
            check(token, touch)
            touches.append(touch)
    return touches

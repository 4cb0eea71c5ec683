"""Named, scoped tokens: one model for the gateway and the dashboard (``docs/security.md``).

A token has a **name** (on every log line, metric and audit record of what it did), **scopes** (of
:data:`SCOPES`), **queue** and **kind** globs (:func:`fnmatch.fnmatchcase`, default ``*``) and an optional
**rate** (``"200/s"``, ``"10/min"``). Tokens come from

* the file ``JOBQ_TOKENS_FILE`` (TOML, one ``[[token]]`` table each; the secret stored as its ``sha256``,
  ``secret = "..."`` only for development: see :class:`TokenSettings`; a token naming no ``rate`` gets
  ``JOBQ_TOKENS_DEFAULT_RATE``), served by the gateway **and** the dashboard;
* the older environment lists, mapped into the same model and kept for their own server:
  ``JOBQ_GATE_TOKENS`` (``secret``, ``secret:scope+scope``, ``secret:scope+scope@200/s`` or ``secret:@200/s``,
  named ``gate-<digest>``) for the gateway,
  ``JOBQ_WEB_READ_TOKENS`` (scope ``read``) and ``JOBQ_WEB_ADMIN_TOKENS`` (``read`` and ``admin``;
  ``name:secret`` or a bare secret named ``token-<digest>``) for the dashboard.

A server listening off loopback refuses, at start and on a reload, a secret it can measure (the environment
lists', a plaintext ``secret`` of the file) shorter than :data:`MIN_SECRET_CHARS`.

A presented secret is hashed (SHA-256) and compared in constant time with **every** token's digest, so the
time taken does not say which token (or how much of one) matched. Secrets are never kept in a
:class:`Token`, a ``repr``, a log line or an error message; errors about the file name the file, the token
and the field. :class:`TokenSource` holds the current :class:`TokenSet` of a server and swaps it whole on
:meth:`TokenSource.reload` (SIGHUP): a bad file keeps the old set.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
import time
import tomllib
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from pathlib import Path

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.buckets import Bucket, Rate, retry_after
from jqcore.errors import ConfigError
from jqcore.log import get_logger
from jqruntime.http import HttpError

__all__ = [
    "ALIASES",
    "MIN_SECRET_CHARS",
    "SCOPES",
    "Bucket",
    "Rate",
    "Token",
    "TokenSet",
    "TokenSettings",
    "TokenSource",
    "digest",
    "generation",
    "hash_line",
    "is_loopback",
    "load_tokens",
    "queue_forbidden",
    "reload_all",
    "retry_after",
]

log = get_logger("jqruntime.tokens")

SCOPES = ("enqueue", "read", "work", "admin")
"""``enqueue``: POST jobs and graphs; ``read``: GET anything (the dashboard's pages); ``work``: claims,
extend, complete, fail; ``admin``: cancel, replay, queue and job-type configuration, dead letters, cron
(the dashboard's actions)."""
ALIASES = {"worker": "work"}
"""Older scope names still accepted."""
NAME_RE = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$"
"""A token's name: it becomes a log field and a metric label."""
MIN_SECRET_CHARS = 20
"""The shortest secret a server listening off loopback accepts (``jobq doctor`` flags shorter ones, ``jobq
tokens hash`` refuses them): a short secret can be guessed online, throttled or not."""
UNLIMITED = ("off", "none")
"""A rate's text meaning "no rate" (a file token's ``rate``, ``JOBQ_TOKENS_DEFAULT_RATE``)."""


def _rate_of(text: str | None) -> Rate | None:
    """``text`` as a rate; None for none given or :data:`UNLIMITED` (ValueError: not a rate)."""
    if text is None or text.strip().lower() in UNLIMITED:
        return None
    return Rate.parse(text)


def digest(secret: str) -> bytes:
    """The SHA-256 of a secret (what the tokens file stores, in hex)."""
    return hashlib.sha256(secret.encode()).digest()


def generation(stored: bytes) -> str:
    """A short one-way tag of a token's stored digest: what a dashboard session keeps to notice that the
    secret of its token (by name) was replaced (``jqweb.sessions``). Derived, not the digest itself, so a
    session store holds no value a tokens file holds; 64 bits, so a rotation is told apart but for a chance
    of 2**-64."""
    return hashlib.sha256(b"jobq.token-generation\0" + stored).hexdigest()[:16]


def hash_line(secret: str) -> str:
    """The ``sha256 = "..."`` line of a tokens file for ``secret`` (``jobq tokens hash``)."""
    return f'sha256 = "{digest(secret).hex()}"'


@lru_cache(maxsize=4096)
def _glob_ok(value: str, globs: tuple[str, ...]) -> bool:
    """Whether ``value`` matches one of ``globs`` (remembered: asked on every request of a token)."""
    return any(fnmatchcase(value, g) for g in globs)


@dataclass(frozen=True)
class Token:
    """What a secret grants (the secret itself is not here)."""

    name: str
    scopes: frozenset[str]
    queues: tuple[str, ...] = ("*",)
    """Globs of the queues it may touch."""
    kinds: tuple[str, ...] = ("*",)
    """Globs of the job kinds it may enqueue."""
    rate: Rate | None = None

    def has(self, scope: str) -> bool:
        return ALIASES.get(scope, scope) in self.scopes

    def allows_queue(self, queue: str) -> bool:
        return _glob_ok(queue, self.queues)

    def allows_kind(self, kind: str) -> bool:
        return _glob_ok(kind, self.kinds)

    @property
    def every_queue(self) -> bool:
        """Whether its globs hold every queue name (``*``)."""
        return "*" in self.queues

    @property
    def every_kind(self) -> bool:
        return "*" in self.kinds


@dataclass(frozen=True)
class TokenSet:
    """The tokens a server accepts, each with the SHA-256 of its secret."""

    entries: tuple[tuple[bytes, Token], ...] = ()

    def __repr__(self) -> str:
        return f"TokenSet(names={self.names()!r})"

    def match(self, secret: str) -> Token | None:
        """The token whose secret this is, or None; compares against every token (constant time)."""
        given = digest(secret.strip())
        found: Token | None = None
        for stored, token in self.entries:
            if hmac.compare_digest(given, stored) and found is None:
                found = token
        return found

    def by_name(self, name: str) -> Token | None:
        return next((t for _, t in self.entries if t.name == name), None)

    def generation_of(self, name: str) -> str | None:
        """The :func:`generation` of the token named ``name`` now (None: no such token): it changes when
        the token's secret does (its ``sha256`` replaced in the file, the environment list changed)."""
        return next((generation(stored) for stored, t in self.entries if t.name == name), None)

    def names(self) -> list[str]:
        return [t.name for _, t in self.entries]

    def __len__(self) -> int:
        return len(self.entries)


class TokenSettings(BaseSettings):
    """Named, scoped tokens for the gateway and the dashboard (``JOBQ_TOKENS_*``, ``docs/security.md``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_TOKENS_", extra="ignore", populate_by_name=True)

    file: Path | None = None
    """A TOML file of ``[[token]]`` tables (``name``, ``sha256``, ``scopes``, ``queues``, ``kinds``,
    ``rate``), read at start and again on SIGHUP; its tokens serve the gateway and the dashboard, beside
    the environment's lists (``JOBQ_GATE_TOKENS``, ``JOBQ_WEB_*_TOKENS``)."""
    allow_plaintext: bool = False
    """Accept ``secret = "..."`` in the tokens file (development). Without it only a server listening on
    loopback accepts one; any other refuses to start (store ``sha256``: ``jobq tokens hash``)."""
    default_rate: str = "1000/s"
    """The rate of each token of the file that names no ``rate`` (``COUNT/s``, ``/min``, ``/h``, ``/Ns``; per
    gateway process, a burst of COUNT at most; 429 ``rate_limited`` beyond); ``off``: such tokens are
    unlimited. A token's own ``rate = "off"`` makes it unlimited. The environment lists' tokens have only the
    rate they name (``JOBQ_GATE_TOKENS``: ``secret:scopes@200/s``). Lower it to bound what a token without a
    rate of its own may cost a gateway."""

    @field_validator("default_rate")
    @classmethod
    def _default_rate(cls, v: str) -> str:
        _rate_of(v)
        return v


class _FileToken(BaseModel):
    """One ``[[token]]`` table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=NAME_RE)
    sha256: str | None = None
    secret: SecretStr | None = Field(None, min_length=1)
    scopes: list[str] = Field(min_length=1)
    queues: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    kinds: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    rate: str | None = None

    @field_validator("sha256")
    @classmethod
    def _hex(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", v):
            raise ValueError("must be 64 hex characters (the SHA-256 of the secret: `jobq tokens hash`)")
        return v

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, v: list[str]) -> list[str]:
        return _scope_names(v)

    @field_validator("queues", "kinds")
    @classmethod
    def _globs(cls, v: list[str]) -> list[str]:
        if any(not g or len(g) > 255 for g in v):
            raise ValueError("each glob must be 1-255 characters")
        return v

    @field_validator("rate")
    @classmethod
    def _rate(cls, v: str | None) -> str | None:
        _rate_of(v)
        return v

    @model_validator(mode="after")
    def _one_secret(self) -> _FileToken:
        if (self.sha256 is None) == (self.secret is None):
            raise ValueError("give exactly one of sha256 (the hex SHA-256 of the secret) and secret")
        return self

    def token(self, default_rate: Rate | None = None) -> Token:
        rate = _rate_of(self.rate) if self.rate is not None else default_rate
        return Token(self.name, frozenset(self.scopes), tuple(self.queues), tuple(self.kinds), rate)

    def stored(self) -> bytes:
        if self.sha256 is not None:
            return bytes.fromhex(self.sha256)
        assert self.secret is not None
        return digest(self.secret.get_secret_value())


def _scope_names(given: Iterable[str]) -> list[str]:
    out = [ALIASES.get(s, s) for s in given]
    unknown = sorted(set(out) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown scope(s) {unknown}; known: {', '.join(SCOPES)}")
    return out


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback."""
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_TOO_SHORT = (
    f"shorter than {MIN_SECRET_CHARS} characters, refused by a server listening off loopback (make one with "
    "`python -c 'import secrets; print(secrets.token_urlsafe(24))'`)"
)


def _short(secret: str) -> bool:
    return len(secret.strip()) < MIN_SECRET_CHARS


def _read_file(
    path: Path, *, plaintext_ok: bool, default_rate: Rate | None, measured: bool
) -> list[tuple[bytes, Token]]:
    where = f"JOBQ_TOKENS_FILE {path}"
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{where}: cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not TOML ({exc})") from None
    extra = sorted(set(doc) - {"token"})
    if extra:
        raise ConfigError(f"{where}: unknown table(s) {extra}; tokens are [[token]] tables")
    tables = doc.get("token", [])
    if not isinstance(tables, list):
        raise ConfigError(f"{where}: write each token as a [[token]] table")
    out = []
    for i, table in enumerate(tables, start=1):
        name = table.get("name") if isinstance(table, dict) else None
        which = f"token {name!r}" if isinstance(name, str) else f"token #{i}"
        try:
            entry = _FileToken.model_validate(table)
        except ValidationError as exc:  # loc and msg only: the input (a secret, maybe) is never shown
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'table'}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()
            )
            raise ConfigError(f"{where}: {which}: {problems}") from None
        if entry.secret is not None and not plaintext_ok:
            raise ConfigError(
                f"{where}: {which}: a plaintext secret is for development only (a server on loopback, or "
                "JOBQ_TOKENS_ALLOW_PLAINTEXT=true); store sha256 instead (`jobq tokens hash`)"
            )
        if measured and entry.secret is not None and _short(entry.secret.get_secret_value()):
            raise ConfigError(f"{where}: {which}: secret: {_TOO_SHORT}")
        out.append((entry.stored(), entry.token(default_rate)))
    return out


def _named(prefix: str, secret: str) -> str:
    return f"{prefix}-{hashlib.sha256(secret.encode()).hexdigest()[:8]}"


def _gate_env(tokens: Sequence[SecretStr], *, measured: bool = False) -> list[tuple[bytes, Token]]:
    """``JOBQ_GATE_TOKENS``: ``secret`` (every scope), ``secret:scope+scope``, and either with a rate after
    ``@`` (``secret:enqueue+read@200/s``; every scope: ``secret:@200/s``). A bad entry is named by its
    position only: what follows its ``:`` may be part of a secret that holds a colon, so it is never echoed
    (nor is the secret)."""
    out = []
    for i, t in enumerate(tokens, start=1):
        secret, _, rest = t.get_secret_value().partition(":")
        scopes, at, rate_text = rest.partition("@")
        entry = f"entry #{i} of {len(tokens)}"
        try:
            granted = _scope_names(scopes.split("+")) if scopes else list(SCOPES)
        except ValueError:
            raise ConfigError(
                f"JOBQ_GATE_TOKENS: unknown scope(s) in {entry} (not shown: what follows its ':' may be part "
                f"of the secret); known: {', '.join(SCOPES)}, joined by '+'"
            ) from None
        try:
            rate = _rate_of(rate_text) if at else None
        except ValueError:
            raise ConfigError(
                f"JOBQ_GATE_TOKENS: {entry}: the text after '@' is no rate (not shown); write COUNT/UNIT, "
                "e.g. secret:enqueue+read@200/s"
            ) from None
        if measured and _short(secret):
            raise ConfigError(f"JOBQ_GATE_TOKENS: {entry}: {_TOO_SHORT}")
        out.append((digest(secret), Token(_named("gate", secret), frozenset(granted), rate=rate)))
    return out


def _web_env(
    read: Sequence[SecretStr], admin: Sequence[SecretStr], *, measured: bool = False
) -> list[tuple[bytes, Token]]:
    """``JOBQ_WEB_READ_TOKENS`` / ``JOBQ_WEB_ADMIN_TOKENS``: ``name:secret``, or a bare secret."""
    out = []
    for setting, tokens, scopes in (
        ("JOBQ_WEB_READ_TOKENS", read, {"read"}),
        ("JOBQ_WEB_ADMIN_TOKENS", admin, {"read", "admin"}),
    ):
        for i, t in enumerate(tokens, start=1):
            raw = t.get_secret_value()
            name, sep, secret = raw.partition(":")
            if not sep:
                name, secret = _named("token", raw), raw
            if measured and _short(secret):
                which = f"token {name!r}" if sep else f"entry #{i} of {len(tokens)}"
                raise ConfigError(f"{setting}: {which}: {_TOO_SHORT}")
            out.append((digest(secret), Token(name, frozenset(scopes))))
    return out


def _merge(entries: Iterable[tuple[bytes, Token]]) -> TokenSet:
    """One entry per secret and per name: the same secret listed twice in the environment (a read and an
    admin list) is one token with both scopes; two different tokens may not share a name or a secret."""
    by_digest: dict[bytes, Token] = {}
    for stored, token in entries:
        seen = by_digest.get(stored)
        if seen is None:
            by_digest[stored] = token
        elif seen.name == token.name and seen.queues == token.queues and seen.kinds == token.kinds:
            by_digest[stored] = Token(
                seen.name, seen.scopes | token.scopes, seen.queues, seen.kinds, seen.rate
            )
        else:
            raise ConfigError(f"tokens {seen.name!r} and {token.name!r} have the same secret")
    names: set[str] = set()
    for token in by_digest.values():
        if token.name in names:
            raise ConfigError(f"two tokens are named {token.name!r}: names must be unique")
        names.add(token.name)
    return TokenSet(tuple(by_digest.items()))


def load_tokens(
    settings: TokenSettings | None = None,
    *,
    gate: Sequence[SecretStr] = (),
    web_read: Sequence[SecretStr] = (),
    web_admin: Sequence[SecretStr] = (),
    host: str | None = None,
) -> TokenSet:
    """The tokens a server accepts: the file's (``settings.file``) and the environment lists it is given
    (the gateway passes ``gate``, the dashboard ``web_read``/``web_admin``). ``host`` is the address the
    server listens on: a loopback one accepts plaintext secrets in the file; any other refuses every secret
    shorter than :data:`MIN_SECRET_CHARS` it can measure (the lists', a plaintext one; none given: a tool,
    not a server, nothing measured). A bad file or list is a :class:`~jqcore.errors.ConfigError` naming the
    file, the token and the field, never a secret."""
    settings = settings if settings is not None else TokenSettings()
    measured = host is not None and not is_loopback(host)
    entries: list[tuple[bytes, Token]] = []
    if settings.file is not None:
        entries += _read_file(
            settings.file,
            plaintext_ok=settings.allow_plaintext or is_loopback(host),
            default_rate=_rate_of(settings.default_rate),
            measured=measured,
        )
    entries += _gate_env(gate, measured=measured)
    entries += _web_env(web_read, web_admin, measured=measured)
    return _merge(entries)


@dataclass(eq=False)  # compared by identity: the process keeps a weak set of them (reload_all)
class TokenSource:
    """A server's current :class:`TokenSet` and its tokens' rate buckets. :meth:`reload` (the SIGHUP
    handler) builds a new set and swaps it in whole; requests in flight keep the token they matched."""

    settings: TokenSettings
    gate: Sequence[SecretStr] = ()
    web_read: Sequence[SecretStr] = ()
    web_admin: Sequence[SecretStr] = ()
    host: str | None = None
    current: TokenSet = field(init=False)
    _buckets: dict[str, Bucket] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.current = self._load()
        _SOURCES.add(self)

    def _load(self) -> TokenSet:
        return load_tokens(
            self.settings, gate=self.gate, web_read=self.web_read, web_admin=self.web_admin, host=self.host
        )

    def reload(self) -> bool:
        """Read the tokens again; True when the new set is in force. A bad file keeps the old set and
        logs one error line naming the problem."""
        try:
            fresh = self._load()
        except ConfigError as exc:
            log.error("tokens not reloaded; the previous ones stay in force", error=exc.message)
            return False
        self.current = fresh
        log.info("tokens reloaded", tokens=len(fresh), names=fresh.names())
        return True

    def throttle(self, token: Token, now: float | None = None) -> float:
        """Spend one request of ``token``'s rate: 0.0 when allowed, else the seconds to wait."""
        if token.rate is None:
            return 0.0
        bucket = self._buckets.get(token.name)
        if bucket is None or bucket.rate != token.rate:  # new, or its rate changed on a reload
            bucket = self._buckets[token.name] = Bucket(token.rate)
        return bucket.take(time.monotonic() if now is None else now)


_SOURCES: weakref.WeakSet[TokenSource] = weakref.WeakSet()


def reload_all() -> bool:
    """Reload every token source of this process (the SIGHUP handler of the gateway, of the dashboard,
    and of a gateway serving the dashboard under ``/ui``); True when each one reloaded."""
    return all([source.reload() for source in list(_SOURCES)])


def queue_forbidden(name: str, queue: str, queues: Sequence[str] = ()) -> HttpError:
    """The 403 ``queue_forbidden`` for token ``name`` on ``queue`` (``queues``: the ones it may use)."""
    theirs = f" (its queues: {', '.join(queues)})" if queues else ""
    return HttpError(
        403,
        "queue_forbidden",
        f"token {name!r} may not use queue {queue!r}{theirs}",
        details={"token": name, "queue": queue},
    )

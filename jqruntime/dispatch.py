"""Push dispatch (Rickover's dispatcher): a job type whose jobs jobq POSTs to a downstream URL instead of
running them in a worker pool, and the signed callback tokens with which the downstream reports later.

* A :class:`DispatchConfig` (``PUT /v1/kinds/{kind}`` ``{"queues": [...], "dispatch": {...}}``) is kept in
  Redis beside the queues (:mod:`jqruntime.stores.dispatch`), one JSON document per **(queue, kind)**; a
  PUT without ``queues`` stores it under the queue :data:`EVERY_QUEUE` (``*``). A job of queue Q and kind
  K is dispatched with (Q, K)'s configuration, else (``*``, K)'s (:func:`pick`).
* Its ``auth`` is a header value (stored, shown masked, never logged), a reference to an environment
  variable of the dispatcher's process (``env``: only names starting with :data:`AUTH_ENV_PREFIX`, so no
  credential of the dispatcher itself can be named) or a file of the dispatcher's secrets folder
  (``file``: a plain name in ``JOBQ_DISPATCHER_SECRETS_DIR``). The header may not be one that changes how
  the request is framed or routed (:func:`header_problem`). The rules are checked when a configuration is
  PUT and again when the dispatcher resolves it (:meth:`DispatchAuth.resolve`), which refuses to send.
* A **callback token** proves that the holder was sent attempt N of job J of queue Q under one claim (one
  lease token) and may report it until the token expires:
  ``v2.<attempt>.<expires_ms>.<nonce>.<HMAC-SHA256(secret, Q J N expires nonce)>``, ``nonce`` being the
  first 16 hex characters of SHA-256(the claim's lease token) (:func:`lease_nonce`). The dispatcher signs
  it (:func:`sign_callback`), the gateway checks it (:func:`verify_callback`) with the same
  ``JOBQ_CALLBACK_SECRET`` before touching Redis, then compares the nonce with the job's lease
  (:meth:`CallbackClaim.holds`): a released or re-claimed attempt's token is dead even under the same
  attempt number.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from jqcore.backoff import Backoff
from jqcore.log import get_logger
from jqruntime.http import HttpError

__all__ = [
    "AUTH_ENV_PREFIX",
    "CALLBACK_GRACE_MS",
    "EVERY_QUEUE",
    "STORED",
    "CallbackClaim",
    "DispatchAuth",
    "DispatchAuthError",
    "DispatchBackoff",
    "DispatchConfig",
    "header_problem",
    "lease_nonce",
    "load_configs",
    "masked_url",
    "pick",
    "sign_callback",
    "verify_callback",
]

log = get_logger("jqruntime.dispatch")

CALLBACK_GRACE_MS = 300_000
"""A callback token stays valid this long past its attempt's callback deadline: a late callback is then
answered 409 ``callback_stale`` (the attempt was failed meanwhile), not a bare 403."""
MASK = "********"
EVERY_QUEUE = "*"
"""The queue a configuration PUT without ``queues`` is stored under: it serves every queue that has no
configuration of its own for the kind (never a queue name: queue names are ``[a-z0-9._-]``)."""
AUTH_ENV_PREFIX = "JOBQ_DISPATCH_AUTH_"
"""The only environment variables ``auth.env`` may name: the operator puts the downstreams' credentials
there on purpose, and no other variable (the dispatcher's Redis password, the callback secret) can be sent."""
STORED: Mapping[str, Any] = {"stored": True}
"""The validation context of a configuration read back from Redis: the auth rules are not checked when it
is loaded (a kind stays a dispatch kind) but when it is resolved, which fails the attempt instead."""

_FORBIDDEN_HEADERS = frozenset(
    {"host", "transfer-encoding", "connection", "keep-alive", "upgrade", "te", "trailer", "cookie"}
)
_FORBIDDEN_HEADER_PREFIXES = ("content-", "proxy-")
_ENV_NAME = re.compile(rf"{AUTH_ENV_PREFIX}[A-Za-z0-9_]{{1,100}}")
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")
MAX_AUTH_VALUE = 4096


class DispatchAuthError(Exception):
    """The auth of a dispatch configuration cannot be sent: the attempt fails with this message (no secret
    in it) and nothing is POSTed."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def header_problem(name: str) -> str | None:
    """Why ``name`` may not be the auth header (None: it may). Refused: ``Host`` (it would reach another
    virtual host behind the URL's address), the headers that frame the body or the connection, proxy
    credentials and cookies."""
    lower = name.lower()
    if lower in _FORBIDDEN_HEADERS or lower.startswith(_FORBIDDEN_HEADER_PREFIXES):
        return (
            "may not be Host, Content-*, Transfer-Encoding, Connection, Keep-Alive, Upgrade, TE, Trailer,"
            " Proxy-* or Cookie"
        )
    return None


def env_problem(name: str) -> str | None:
    """Why ``auth.env`` may not name ``name`` (None: it may)."""
    if _ENV_NAME.fullmatch(name) is None:
        return (
            f"must name a variable starting with {AUTH_ENV_PREFIX} (1-100 of A-Z a-z 0-9 _ after it): the"
            " dispatcher sends no other variable of its environment"
        )
    return None


def file_problem(name: str) -> str | None:
    """Why ``auth.file`` may not name ``name`` (None: it may): a plain file name, no folder."""
    if _FILE_NAME.fullmatch(name) is None or ".." in name:
        return (
            "must be a plain file name in the dispatcher's JOBQ_DISPATCHER_SECRETS_DIR (1-255 of A-Z a-z 0-9"
            " . _ -, not starting with a dot, no / and no ..)"
        )
    return None


def _auth_shorthand(value: object) -> object:
    """``"Bearer x"`` → the header value; ``"env:NAME"`` → a reference to the dispatcher's ``$NAME``;
    ``"file:NAME"`` → a file of its secrets folder."""
    if isinstance(value, str):
        for source in ("env", "file"):
            if value.startswith(f"{source}:"):
                return {source: value[len(source) + 1 :]}
        return {"value": value}
    return value


def _checked(problem: str | None, info: ValidationInfo) -> None:
    if problem is not None and not (info.context or {}).get("stored"):
        raise ValueError(problem)


class DispatchAuth(BaseModel):
    """What the dispatcher sends as the ``header`` of each POST: a ``value`` stored with the kind, the value
    of the environment variable ``env`` of the dispatcher's process (only ``JOBQ_DISPATCH_AUTH_*``), or the
    content of ``file`` in the dispatcher's ``JOBQ_DISPATCHER_SECRETS_DIR``. Only a reference is stored
    for ``env`` and ``file``. Never logged; shown masked."""

    model_config = ConfigDict(extra="forbid")

    header: str = Field("Authorization", pattern=r"^[A-Za-z0-9-]{1,64}$")
    value: SecretStr | None = Field(None, min_length=1, max_length=MAX_AUTH_VALUE)
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
    file: str | None = Field(None, min_length=1, max_length=255)

    @field_validator("header")
    @classmethod
    def _header_allowed(cls, header: str, info: ValidationInfo) -> str:
        _checked(header_problem(header), info)
        return header

    @field_validator("env")
    @classmethod
    def _env_allowed(cls, env: str | None, info: ValidationInfo) -> str | None:
        if env is not None:
            _checked(env_problem(env), info)
        return env

    @field_validator("file")
    @classmethod
    def _file_allowed(cls, file: str | None, info: ValidationInfo) -> str | None:
        if file is not None:
            _checked(file_problem(file), info)
        return file

    @model_validator(mode="after")
    def _one_source(self) -> DispatchAuth:
        if sum(source is not None for source in (self.value, self.env, self.file)) != 1:
            raise ValueError(
                "auth takes exactly one of value (the header's value), env (a JOBQ_DISPATCH_AUTH_* variable)"
                " or file (a file of the dispatcher's secrets folder)"
            )
        if self.value is not None and any(c in self.value.get_secret_value() for c in "\r\n"):
            raise ValueError("auth value may not contain a line break")
        return self

    def resolve(self, environ: Mapping[str, str] | None = None, secrets_dir: Path | None = None) -> str:
        """The header's value, read now; :class:`DispatchAuthError` when it cannot be sent (the rules of
        the header, ``env`` and ``file`` are checked again here: a stored configuration is not trusted)."""
        problem = header_problem(self.header)
        if problem is not None:
            raise DispatchAuthError(f"auth.header {self.header!r} {problem}")
        if self.value is not None:
            return self.value.get_secret_value()
        if self.env is not None:
            return _value_of_env(self.env, os.environ if environ is None else environ)
        return _value_of_file(self.file or "", secrets_dir)

    def reference(self) -> str:
        """Where the value comes from, for an error or a log line (never the value)."""
        if self.env is not None:
            return f"${self.env}"
        if self.file is not None:
            return f"secrets file {self.file!r}"
        return "the stored value"


def _value_of_env(name: str, environ: Mapping[str, str]) -> str:
    problem = env_problem(name)
    if problem is not None:
        raise DispatchAuthError(f"auth.env {name!r} refused: it {problem}")
    value = environ.get(name)
    if value is None:
        raise DispatchAuthError(f"auth.env: ${name} is not set in the dispatcher's environment")
    return _header_value(value, f"${name}")


def _value_of_file(name: str, secrets_dir: Path | None) -> str:
    problem = file_problem(name)
    if problem is not None:
        raise DispatchAuthError(f"auth.file {name!r} refused: it {problem}")
    if secrets_dir is None:
        raise DispatchAuthError(
            f"auth.file {name!r}: the dispatcher has no secrets folder (set JOBQ_DISPATCHER_SECRETS_DIR)"
        )
    folder = secrets_dir.resolve()
    path = (folder / name).resolve()  # a Kubernetes Secret's files are links into the same folder
    if folder not in path.parents:
        raise DispatchAuthError(f"auth.file {name!r} leads out of JOBQ_DISPATCHER_SECRETS_DIR")
    try:
        with path.open("rb") as f:
            text = f.read(MAX_AUTH_VALUE + 3).decode()
    except (OSError, UnicodeDecodeError) as exc:
        what = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise DispatchAuthError(
            f"auth.file {name!r} cannot be read in JOBQ_DISPATCHER_SECRETS_DIR: {what}"
        ) from None
    return _header_value(text.removesuffix("\n").removesuffix("\r"), f"secrets file {name!r}")


def _header_value(value: str, where: str) -> str:
    if not value:
        raise DispatchAuthError(f"auth: {where} is empty")
    if len(value) > MAX_AUTH_VALUE or any(c in value for c in "\r\n\0"):
        raise DispatchAuthError(
            f"auth: {where} is no header value (a line break, a NUL or over {MAX_AUTH_VALUE} characters)"
        )
    return value


class DispatchBackoff(BaseModel):
    """The kind's retry delays (:class:`jqcore.backoff.Backoff`, full jitter)."""

    model_config = ConfigDict(extra="forbid")

    base_s: float = Field(1.0, ge=0, le=3600)
    factor: float = Field(2.0, ge=1, le=10)
    cap_s: float = Field(3600.0, ge=0, le=7 * 86_400)

    def policy(self) -> Backoff:
        return Backoff(base_s=self.base_s, factor=self.factor, cap_s=self.cap_s)


class DispatchConfig(BaseModel):
    """A dispatch kind: each job is POSTed to ``url``; the downstream answers within ``timeout_s`` (2xx:
    done; 202: it calls back within ``callback_timeout_s``; anything else, or no answer: a failed attempt,
    retried after ``backoff``)."""

    model_config = ConfigDict(extra="forbid")

    url: HttpUrl = Field(description="http or https URL the jobs are POSTed to")
    timeout_s: float = Field(30.0, gt=0, le=300)
    callback_timeout_s: float = Field(3600.0, gt=0, le=7 * 86_400)
    auth: Annotated[DispatchAuth | None, BeforeValidator(_auth_shorthand)] = None
    backoff: DispatchBackoff = Field(default_factory=lambda: DispatchBackoff.model_validate({}))

    @model_validator(mode="after")
    def _url_shape(self) -> DispatchConfig:
        if len(str(self.url)) > 2048 or self.url.username or self.url.password:
            raise ValueError("url: at most 2048 characters and no user:password (use auth)")
        return self

    def stored(self) -> str:
        """The JSON kept in Redis (the auth value in clear: Redis is the store of secrets of the kind)."""
        doc = self.model_dump(mode="json", exclude_none=True)
        if self.auth is not None and self.auth.value is not None:
            doc["auth"]["value"] = self.auth.value.get_secret_value()
        return orjson.dumps(doc).decode()

    def auth_source(self) -> str:
        """Where the auth value comes from, secret-free (``env:NAME``, ``file:NAME``, ``value``, ``none``):
        what the audit trail records of a dispatch configuration."""
        if self.auth is None:
            return "none"
        if self.auth.env is not None:
            return f"env:{self.auth.env}"
        return f"file:{self.auth.file}" if self.auth.file is not None else "value"

    def public(self, *, full_url: bool = True) -> dict[str, Any]:
        """What the API shows: the auth value masked (an ``env`` or ``file`` reference is only a name);
        without ``full_url`` (a token without ``admin``) the URL's path and query masked as well
        (:func:`masked_url`: a webhook's secret is often in them)."""
        doc = self.model_dump(mode="json", exclude_none=True)
        if self.auth is not None and self.auth.value is not None:
            doc["auth"]["value"] = MASK
        if not full_url:
            doc["url"] = masked_url(self.url)
        return doc


def masked_url(url: HttpUrl) -> str:
    """``https://host[:port]/…``: the scheme, host and a port other than the scheme's, nothing more."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    port = "" if url.port is None or url.port == default else f":{url.port}"
    return f"{url.scheme}://{url.host or ''}{port}/…"


C = TypeVar("C")


def pick(configs: Mapping[tuple[str, str], C], queue: str, kind: str) -> C | None:
    """The configuration a job of ``queue`` and ``kind`` is dispatched with: the queue's own, else the one
    for every queue (:data:`EVERY_QUEUE`); None: the kind is not pushed from that queue."""
    own = configs.get((queue, kind))
    return own if own is not None else configs.get((EVERY_QUEUE, kind))


def load_config(text: str | bytes) -> DispatchConfig:
    """A stored configuration (:data:`STORED`: its auth rules are checked when it is resolved)."""
    return DispatchConfig.model_validate_json(text, context=STORED)


def load_configs(raw: Mapping[tuple[str, str], str]) -> dict[tuple[str, str], DispatchConfig]:
    """The stored configurations by (queue, kind); an unreadable one is logged (by queue and kind only)
    and skipped."""
    out: dict[tuple[str, str], DispatchConfig] = {}
    for (queue, kind), text in raw.items():
        try:
            out[queue, kind] = load_config(text)
        except ValidationError as exc:
            log.warning("dispatch configuration unreadable", queue=queue, kind=kind, errors=exc.error_count())
    return out


# ---- callback tokens ------------------------------------------------------------------------------------
TOKEN_VERSION = "v2"
NONCE_CHARS = 16
_NONCE = re.compile(rf"[0-9a-f]{{{NONCE_CHARS}}}")


def lease_nonce(lease_token: str) -> str:
    """The claim a callback token is bound to: the first 16 hex characters of SHA-256(its lease token).
    The lease token itself never leaves the dispatcher; a new claim (after a release, under the same
    attempt number too) has another."""
    return hashlib.sha256(lease_token.encode()).hexdigest()[:NONCE_CHARS]


@dataclass(frozen=True, slots=True)
class CallbackClaim:
    """What a valid callback token says: the attempt, its expiry and the claim's nonce."""

    attempt: int
    expires_ms: int
    nonce: str

    def holds(self, lease_token: str) -> bool:
        """Whether the token was made for the claim whose lease token this is ('' — none — never)."""
        return bool(lease_token) and hmac.compare_digest(self.nonce, lease_nonce(lease_token))


def _mac(secret: str, queue: str, job_id: str, attempt: int, expires_ms: int, nonce: str) -> str:
    message = f"{TOKEN_VERSION}\n{queue}\n{job_id}\n{attempt}\n{expires_ms}\n{nonce}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign_callback(secret: str, queue: str, job_id: str, attempt: int, expires_ms: int, nonce: str) -> str:
    """The callback token of this attempt under this claim (``nonce``: :func:`lease_nonce` of its lease
    token; see the module's docstring)."""
    mac = _mac(secret, queue, job_id, attempt, expires_ms, nonce)
    return f"{TOKEN_VERSION}.{attempt}.{expires_ms}.{nonce}.{mac}"


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) <= 16


def verify_callback(secret: str, token: str, queue: str, job_id: str, now_ms: int) -> CallbackClaim:
    """What a valid token says, checked without any I/O (expiry by the caller's clock ``now_ms``). Raises
    :class:`HttpError`: 403 ``callbacks_off`` (no secret), 401 ``callback_token_invalid`` (not a token of
    this version), 403 ``callback_signature_invalid`` (not signed for this job with this secret), 403
    ``callback_expired``."""
    if not secret:
        raise HttpError(
            403, "callbacks_off", "this gateway takes no callbacks (JOBQ_CALLBACK_SECRET is unset)"
        )
    parts = token.split(".")
    if len(parts) != 5 or parts[0] != TOKEN_VERSION:
        raise HttpError(
            401, "callback_token_invalid", f"callback_token is not a jobq callback token ({TOKEN_VERSION})"
        )
    _, attempt_s, expires_s, nonce, mac = parts
    if not (_digits(attempt_s) and _digits(expires_s) and _NONCE.fullmatch(nonce) and mac):
        raise HttpError(401, "callback_token_invalid", "callback_token is not a jobq callback token")
    claim = CallbackClaim(int(attempt_s), int(expires_s), nonce)
    expected = _mac(secret, queue, job_id, claim.attempt, claim.expires_ms, nonce)
    if not hmac.compare_digest(mac.encode(), expected.encode()):
        raise HttpError(
            403, "callback_signature_invalid", f"callback_token is not signed for job {job_id!r} of {queue!r}"
        )
    if claim.expires_ms < now_ms:
        raise HttpError(403, "callback_expired", f"the callback token of attempt {claim.attempt} has expired")
    return claim

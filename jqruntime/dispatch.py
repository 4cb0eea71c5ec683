"""Push dispatch (Rickover's dispatcher): a job type whose jobs jobq POSTs to a downstream URL instead of
running them in a worker pool, and the signed callback tokens with which the downstream reports later.

* A kind's :class:`DispatchConfig` (``PUT /v1/kinds/{kind}`` ``{"dispatch": {...}}``) is kept in Redis
  beside the queues (:mod:`jqruntime.stores.dispatch`), one JSON document per kind. Its ``auth``
  is a header value (stored, shown masked, never logged) or a reference to an environment variable of the
  dispatcher's process (``env``: the secret never leaves that process).
* A **callback token** proves that the holder was sent attempt N of job J of queue Q and may report it
  until the token expires: ``v1.<attempt>.<expires_ms>.<HMAC-SHA256(secret, Q J N expires)>``. The
  dispatcher signs it (:func:`sign_callback`), the gateway checks it (:func:`verify_callback`) with the
  same ``JOBQ_CALLBACK_SECRET``; the attempt it names is then fenced against the job's current one.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Annotated, Any

import orjson
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    HttpUrl,
    SecretStr,
    ValidationError,
    model_validator,
)

from jqcore.backoff import Backoff
from jqcore.log import get_logger
from jqruntime.http import HttpError

__all__ = [
    "CALLBACK_GRACE_MS",
    "DispatchAuth",
    "DispatchBackoff",
    "DispatchConfig",
    "load_configs",
    "sign_callback",
    "verify_callback",
]

log = get_logger("jqruntime.dispatch")

CALLBACK_GRACE_MS = 300_000
"""A callback token stays valid this long past its attempt's callback deadline: a late callback is then
answered 409 ``callback_stale`` (the attempt was failed meanwhile), not a bare 403."""
MASK = "********"


def _auth_shorthand(value: object) -> object:
    """``"Bearer x"`` → the header value; ``"env:NAME"`` → a reference to the dispatcher's ``$NAME``."""
    if isinstance(value, str):
        return {"env": value[4:]} if value.startswith("env:") else {"value": value}
    return value


class DispatchAuth(BaseModel):
    """What the dispatcher sends as the ``header`` of each POST: a ``value`` stored with the kind, or the
    value of the environment variable ``env`` of the dispatcher's process (a reference: only the name is
    stored). Never logged; shown masked."""

    model_config = ConfigDict(extra="forbid")

    header: str = Field("Authorization", pattern=r"^[A-Za-z0-9-]{1,64}$")
    value: SecretStr | None = Field(None, min_length=1, max_length=4096)
    env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

    @model_validator(mode="after")
    def _one_source(self) -> DispatchAuth:
        if (self.value is None) == (self.env is None):
            raise ValueError("auth takes exactly one of value (the header's value) or env (a variable name)")
        if self.value is not None and any(c in self.value.get_secret_value() for c in "\r\n"):
            raise ValueError("auth value may not contain a line break")
        return self

    def resolve(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The header's value (None: the referenced variable is not set in this process)."""
        if self.value is not None:
            return self.value.get_secret_value()
        return (environ if environ is not None else os.environ).get(self.env or "")


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

    def public(self) -> dict[str, Any]:
        """What the API shows: the auth value masked (an ``env`` reference is only a name)."""
        doc = self.model_dump(mode="json", exclude_none=True)
        if self.auth is not None and self.auth.value is not None:
            doc["auth"]["value"] = MASK
        return doc


def load_configs(raw: Mapping[str, str]) -> dict[str, DispatchConfig]:
    """The stored configurations by kind; an unreadable one is logged (by kind only) and skipped."""
    out: dict[str, DispatchConfig] = {}
    for kind, text in raw.items():
        try:
            out[kind] = DispatchConfig.model_validate_json(text)
        except ValidationError as exc:
            log.warning("dispatch configuration unreadable", kind=kind, errors=exc.error_count())
    return out


def _mac(secret: str, queue: str, job_id: str, attempt: int, expires_ms: int) -> str:
    message = f"{queue}\n{job_id}\n{attempt}\n{expires_ms}".encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def sign_callback(secret: str, queue: str, job_id: str, attempt: int, expires_ms: int) -> str:
    """The callback token of this attempt (see the module's docstring)."""
    return f"v1.{attempt}.{expires_ms}.{_mac(secret, queue, job_id, attempt, expires_ms)}"


def verify_callback(secret: str, token: str, queue: str, job_id: str, now_ms: int) -> int:
    """The attempt a valid token names. Raises :class:`HttpError`: 403 ``callbacks_off`` (no secret), 401
    ``callback_token_invalid`` (not a token), 403 ``callback_signature_invalid`` (not signed for this job
    with this secret), 403 ``callback_expired``."""
    if not secret:
        raise HttpError(
            403, "callbacks_off", "this gateway takes no callbacks (JOBQ_CALLBACK_SECRET is unset)"
        )
    version, _, rest = token.partition(".")
    attempt_s, _, rest = rest.partition(".")
    expires_s, _, mac = rest.partition(".")
    numbers = (attempt_s, expires_s)
    if version != "v1" or not mac or not all(n.isascii() and n.isdigit() and len(n) <= 16 for n in numbers):
        raise HttpError(401, "callback_token_invalid", "callback_token is not a jobq callback token")
    attempt, expires = int(attempt_s), int(expires_s)
    if not hmac.compare_digest(mac.encode(), _mac(secret, queue, job_id, attempt, expires).encode()):
        raise HttpError(
            403, "callback_signature_invalid", f"callback_token is not signed for job {job_id!r} of {queue!r}"
        )
    if expires < now_ms:
        raise HttpError(403, "callback_expired", f"the callback token of attempt {attempt} has expired")
    return attempt

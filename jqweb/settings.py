"""The dashboard's settings (``JOBQ_WEB_*``)."""

from __future__ import annotations

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings.common import CommaList, CommaSecrets, _blank_is_unset, _read_secret_file
from jqruntime.clientaddr import Networks, parse_networks

__all__ = ["WebSettings"]


class WebSettings(BaseSettings):
    """The dashboard (``jqweb``, ``jobq web``, ``docs/dashboard.md``)."""

    model_config = SettingsConfigDict(env_prefix="JOBQ_WEB_", extra="ignore", populate_by_name=True)

    host: str = "127.0.0.1"
    """The address the dashboard listens on. Set ``0.0.0.0`` (or the pod's address) to serve other hosts."""
    port: int = Field(28090, ge=0, lt=65536)
    """The port the dashboard listens on (0: a free one)."""
    read_tokens: CommaSecrets = Field(default_factory=list)
    """Tokens that may see every page (comma-separated; ``name:secret`` names the person in the audit log,
    a bare ``secret`` is logged as ``token-<digest>``). Off loopback each secret must have at least 20
    characters (the dashboard refuses to start)."""
    admin_tokens: CommaSecrets = Field(default_factory=list)
    """Tokens that may also act (pause, retry, cancel, delete, purge, rate limits, cron, graphs). With no
    token at all every page is refused: never an open dashboard by accident."""
    read_tokens_file: str | None = None
    """A file holding ``JOBQ_WEB_READ_TOKENS``' list instead (entries separated by commas or lines): a
    mounted Secret's key, so no token is in the environment."""
    admin_tokens_file: str | None = None
    """A file holding ``JOBQ_WEB_ADMIN_TOKENS``' list instead (entries separated by commas or lines)."""

    _blank = field_validator("read_tokens_file", "admin_tokens_file", mode="before")(_blank_is_unset)

    @model_validator(mode="after")
    def _token_files(self) -> WebSettings:
        _read_secret_file(self, "read_tokens", kind="secrets")
        _read_secret_file(self, "admin_tokens", kind="secrets")
        return self

    secure_cookie: bool = False
    """Always name the session cookie ``__Host-jobq_session`` and mark it ``Secure`` (set it when the
    dashboard is served over HTTPS). Without it, that is done for every request not addressed to a
    loopback host; plain ``http://127.0.0.1`` gets a plain ``jobq_session`` cookie."""
    session_idle_s: int = Field(3600, ge=60, le=7 * 86_400)
    """A dashboard session not used for this long ends (``docs/security.md``). Set it to your sign-in
    policy."""
    session_max_s: int = Field(43_200, ge=60, le=30 * 86_400)
    """A dashboard session ends this long after its sign-in, however busy (sign in again). Set it to your
    sign-in policy."""
    login_failures: int = Field(5, ge=1, le=1000)
    """Failed token matches (sign-ins and ``Authorization: Bearer``) one client address may make with tokens
    of one prefix (their first 4 characters) per ``login_window_s``; past it that address's sign-ins and
    Bearer requests with such a token answer 429 (``login_throttled``, ``auth_throttled``) with
    ``Retry-After``, before any token is compared. Keyed by the prefix too, so one client guessing behind a
    shared address (a NAT, an untrusted proxy) does not lock out everyone else there. Raise it when many
    people sign in from behind one address."""
    login_failures_all: int = Field(100, ge=1, le=1_000_000)
    """Failed token matches of every client together per ``login_window_s``; past it every sign-in and Bearer
    request waits out the window (429): guesses spread over many addresses or prefixes slow everyone instead
    of going on (sessions already signed in are not affected). Raise it for a dashboard many people sign in to
    at once."""
    login_window_s: int = Field(60, ge=1, le=86_400)
    """The window failed token matches are counted in. With the two counts it sets how fast tokens may be
    guessed."""
    trusted_proxies: CommaList = Field(default_factory=list)
    """Addresses or CIDRs of the reverse proxies in front of the dashboard (comma-separated, e.g.
    ``10.0.0.0/8``). A request from one of them is counted against the client its ``X-Forwarded-For``
    names (the nearest hop that is not a trusted proxy) by the sign-in throttle and the audit trail; from
    any other peer that header is ignored. Empty: the direct peer is the client (behind a proxy: every
    client is the proxy)."""
    bulk_limit: int = Field(100_000, ge=1)
    """Most jobs one bulk action changes (a larger match is refused with the count: narrow the filter). Raise
    it when repairs must change larger sets at once; lower it to bound one click's Redis work."""

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, v: list[str]) -> list[str]:
        parse_networks(v)
        return v

    def proxy_networks(self) -> Networks:
        """:attr:`trusted_proxies`, parsed."""
        return parse_networks(self.trusted_proxies)

"""The dashboard's settings (``JOBQ_WEB_*``)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from jqcore.settings import CommaSecrets

__all__ = ["WebSettings"]


class WebSettings(BaseSettings):
    """The dashboard (``jqweb``, ``jobq web``, ``docs/dashboard.md``)."""

    model_config = SettingsConfigDict(
        env_prefix="JOBQ_WEB_", extra="ignore", use_attribute_docstrings=True, populate_by_name=True
    )

    host: str = "127.0.0.1"
    """The address the dashboard listens on."""
    port: int = Field(28090, ge=0, lt=65536)
    """The port the dashboard listens on (0: a free one)."""
    read_tokens: CommaSecrets = Field(default_factory=list)
    """Tokens that may see every page (comma-separated; ``name:secret`` names the person in the audit log,
    a bare ``secret`` is logged as ``token-<digest>``). Off loopback each secret must have at least 20
    characters (the dashboard refuses to start)."""
    admin_tokens: CommaSecrets = Field(default_factory=list)
    """Tokens that may also act (pause, retry, cancel, delete, purge, rate limits, cron, graphs). With no
    token at all every page is refused: never an open dashboard by accident."""
    secure_cookie: bool = False
    """Always name the session cookie ``__Host-jobq_session`` and mark it ``Secure`` (set it when the
    dashboard is served over HTTPS). Without it, that is done for every request not addressed to a
    loopback host; plain ``http://127.0.0.1`` gets a plain ``jobq_session`` cookie."""
    session_idle_s: int = Field(3600, ge=60, le=7 * 86_400)
    """A dashboard session not used for this long ends (``docs/security.md``)."""
    session_max_s: int = Field(43_200, ge=60, le=30 * 86_400)
    """A dashboard session ends this long after its sign-in, however busy (sign in again)."""
    login_failures: int = Field(5, ge=1, le=1000)
    """Failed sign-ins one client address may make per ``login_window_s``; past it the sign-in answers 429
    with ``Retry-After``."""
    login_window_s: int = Field(60, ge=1, le=86_400)
    """The window failed sign-ins are counted in."""
    refresh_s: float = Field(5.0, ge=1, le=300)
    """How often the live parts of a page reload."""
    page_size: int = Field(50, ge=10, le=500)
    """Rows per page of job lists."""
    scan_limit: int = Field(5000, ge=100, le=1_000_000)
    """Most live jobs one search request examines (a page of matches may need several requests on a
    sparse filter: the page says where it stopped and links the next)."""
    bulk_limit: int = Field(100_000, ge=1)
    """Most jobs one bulk action changes (a larger match is refused with the count: narrow the filter)."""

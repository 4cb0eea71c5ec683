"""Where the dashboard may send a browser after signing in or acting (``next=``): only a path of its own.

A ``Location`` a browser reads differently from this code is an open redirect: browsers strip tab and
newline characters (``/\\t/evil.example/`` becomes ``//evil.example/``), read ``\\`` as ``/``, and take
``https:evil`` or ``//evil`` as another site. So a target is accepted only when it is a plain absolute path
under the dashboard's base — no scheme, no host, no backslash, no control or whitespace character, not
starting with ``//`` — and stays so when percent-decoded (a proxy or a second redirect may decode it).
"""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

__all__ = ["safe_next"]

DECODE_ROUNDS = 3
"""How many times a target is percent-decoded and checked again (``%25`` nests)."""


def _plain_path(value: str, *, raw: bool) -> bool:
    """A path with no scheme, host, backslash or control character (and, as sent, no whitespace at all;
    a decoded ``%20`` is a space in a path, which no browser strips)."""
    if not value.startswith("/") or value.startswith("//") or "\\" in value:
        return False
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or (raw and c.isspace()) for c in value):
        return False
    parts = urlsplit(value)
    return not parts.scheme and not parts.netloc


def safe_next(base: str, value: str | None, default: str) -> str:
    """``value`` when it is a same-site path under ``base`` (``""`` or e.g. ``/ui``) other than the sign-in
    page itself, else ``default``."""
    if not value or not _plain_path(value, raw=True):
        return default
    decoded = value
    for _ in range(DECODE_ROUNDS):
        decoded, before = unquote(decoded), decoded
        if decoded == before:
            break
        if not _plain_path(decoded, raw=False):
            return default
    else:
        return default
    if not value.startswith(f"{base}/") or urlsplit(value).path == f"{base}/login":
        return default
    return value

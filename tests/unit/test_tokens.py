"""Named, scoped tokens (``jqruntime.tokens``): the file's model and its errors, the environment lists, globs,
matching, rate buckets and reload."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from pydantic import SecretStr

from jqcore.buckets import Buckets
from jqcore.errors import ConfigError
from jqruntime.tokens import (
    MIN_SECRET_CHARS,
    SCOPES,
    Bucket,
    Rate,
    Token,
    TokenSettings,
    TokenSource,
    digest,
    generation,
    hash_line,
    load_tokens,
    retry_after,
)

SECRET = "s3cret-billing-0123456789"


def write(tmp_path: Path, text: str) -> TokenSettings:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    return TokenSettings(file=path)


def billing(extra: str = "") -> str:
    return f"""
[[token]]
name = "billing-app"
sha256 = "{digest(SECRET).hex()}"
scopes = ["enqueue", "read"]
queues = ["billing.*"]
{extra}
"""


def test_the_file_gives_named_scoped_tokens_matched_by_secret(tmp_path: Path) -> None:
    tokens = load_tokens(write(tmp_path, billing('kinds = ["invoice.*"]\nrate = "200/s"')))
    token = tokens.match(SECRET)
    assert token == Token(
        "billing-app", frozenset({"enqueue", "read"}), ("billing.*",), ("invoice.*",), Rate(200, 1.0)
    )
    assert tokens.match(" " + SECRET + "\n") == token, "surrounding blanks of a header are ignored"
    assert tokens.match("nope") is None
    assert tokens.match("") is None
    assert tokens.match(SECRET[:-1]) is None
    assert tokens.by_name("billing-app") == token
    assert tokens.by_name("other") is None
    assert tokens.names() == ["billing-app"]
    assert token.has("enqueue")
    assert token.has("read")
    assert not token.has("admin")
    assert not token.has("work")


def test_globs_for_queues_and_kinds() -> None:
    t = Token("t", frozenset({"read"}), ("billing.*", "ledger"), ("invoice.*",))
    assert t.allows_queue("billing.x")
    assert t.allows_queue("ledger")
    assert not t.allows_queue("payments")
    assert not t.allows_queue("ledger.x")
    assert not t.allows_queue("Billing.x"), "globs are case-sensitive, like queue names"
    assert t.allows_kind("invoice.send")
    assert not t.allows_kind("refund")
    assert not t.every_queue
    assert Token("u", frozenset()).every_queue


def test_worker_is_an_alias_of_work(tmp_path: Path) -> None:
    text = billing().replace('["enqueue", "read"]', '["worker"]')
    token = load_tokens(write(tmp_path, text)).match(SECRET)
    assert token is not None
    assert token.scopes == {"work"}
    assert token.has("worker")
    assert token.has("work")


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (('sha256 = "', 'sha256 = "zz'), ["token 'billing-app'", "sha256", "64 hex"]),
        (('scopes = ["enqueue", "read"]', 'scopes = ["enqueue", "root"]'), ["scopes", "root", "known:"]),
        (('scopes = ["enqueue", "read"]', "scopes = []"), ["scopes"]),
        (('queues = ["billing.*"]', 'queues = ["billing.*"]\nrate = "fast"'), ["rate", "COUNT/UNIT"]),
        (('queues = ["billing.*"]', 'queues = ["billing.*"]\ncolour = "red"'), ["colour", "not permitted"]),
        (('name = "billing-app"', 'name = "billing app!"'), ["token 'billing app!'", "name"]),
        (('name = "billing-app"\n', ""), ["token #1", "name", "required"]),
    ],
)
def test_a_bad_token_names_the_file_the_token_and_the_field(
    tmp_path: Path, change: tuple[str, str], names: list[str]
) -> None:
    settings = write(tmp_path, billing().replace(*change))
    with pytest.raises(ConfigError) as err:
        load_tokens(settings)
    message = err.value.message
    assert f"JOBQ_TOKENS_FILE {settings.file}" in message
    for name in names:
        assert name in message
    assert digest(SECRET).hex()[8:] not in message, "not even the hash is repeated"


def test_sha256_and_secret_exactly_one(tmp_path: Path) -> None:
    both = billing(f'secret = "{SECRET}"')
    with pytest.raises(ConfigError, match="exactly one of sha256") as err:
        load_tokens(write(tmp_path, both), host="127.0.0.1")
    assert SECRET not in err.value.message
    with pytest.raises(ConfigError, match="exactly one of sha256"):
        load_tokens(write(tmp_path, billing().replace("sha256", "# sha256")))


def test_plaintext_secrets_only_on_loopback_or_when_allowed(tmp_path: Path) -> None:
    text = billing().replace(f'sha256 = "{digest(SECRET).hex()}"', f'secret = "{SECRET}"')
    settings = write(tmp_path, text)
    for loopback in ("127.0.0.1", "::1", "localhost"):
        assert load_tokens(settings, host=loopback).match(SECRET) is not None
    for host in ("0.0.0.0", "10.0.0.7", None):
        with pytest.raises(ConfigError, match="development only") as err:
            load_tokens(settings, host=host)
        assert SECRET not in err.value.message
    allowed = TokenSettings(file=settings.file, allow_plaintext=True)
    assert load_tokens(allowed, host="0.0.0.0").match(SECRET) is not None
    assert SECRET not in repr(load_tokens(allowed)), "a TokenSet shows names only"


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot be read"):
        load_tokens(TokenSettings(file=tmp_path / "missing.toml"))
    with pytest.raises(ConfigError, match="not TOML"):
        load_tokens(write(tmp_path, "[[token]\nname ="))
    with pytest.raises(ConfigError, match=r"unknown table\(s\) \['tokens'\]"):
        load_tokens(write(tmp_path, "[[tokens]]\nname = 'x'"))
    with pytest.raises(ConfigError, match="two tokens are named 'billing-app'"):
        load_tokens(write(tmp_path, billing() + billing().replace(digest(SECRET).hex(), digest("b").hex())))
    with pytest.raises(ConfigError, match="have the same secret"):
        load_tokens(write(tmp_path, billing() + billing().replace("billing-app", "other")))
    assert len(load_tokens(write(tmp_path, ""))) == 0, "an empty file: no token"


def test_the_environment_lists_map_into_the_same_model() -> None:
    tokens = load_tokens(
        gate=[SecretStr("all-of-it"), SecretStr("w0rk:worker+read")],
        web_read=[SecretStr("viewer:v1ew"), SecretStr("bare-read")],
        web_admin=[SecretStr("admin:adm1n")],
    )
    everything = tokens.match("all-of-it")
    assert everything is not None
    assert everything.scopes == {"enqueue", "read", "work", "admin"}
    assert everything.name.startswith("gate-")
    assert everything.queues == ("*",)
    assert everything.rate is None
    w0rk = tokens.match("w0rk")
    assert w0rk is not None
    assert w0rk.scopes == {"work", "read"}
    assert tokens.match("v1ew") == Token("viewer", frozenset({"read"}))
    assert tokens.match("adm1n") == Token("admin", frozenset({"read", "admin"}))
    bare = tokens.match("bare-read")
    assert bare is not None
    assert bare.name.startswith("token-")
    assert "bare" not in bare.name
    with pytest.raises(ConfigError, match="JOBQ_GATE_TOKENS: unknown scope") as err:
        load_tokens(gate=[SecretStr("t0p:enqueue+everything")])
    assert "t0p" not in err.value.message


def test_the_gateway_list_takes_a_rate_after_at_and_never_echoes_a_bad_one() -> None:
    """Review M7: a rate is expressible in JOBQ_GATE_TOKENS (and so in an environment-only install)."""
    tokens = load_tokens(
        gate=[
            SecretStr("app-0123456789abcdefghij:enqueue+read@200/s"),
            SecretStr("all-0123456789abcdefghij:@10/min"),
            SecretStr("free-0123456789abcdefghi:read"),
        ]
    )
    app, every, free = (
        tokens.match(s)
        for s in ("app-0123456789abcdefghij", "all-0123456789abcdefghij", "free-0123456789abcdefghi")
    )
    assert app is not None
    assert (app.scopes, app.rate) == ({"enqueue", "read"}, Rate(200, 1.0))
    assert every is not None
    assert (every.scopes, every.rate) == (set(SCOPES), Rate(10, 60.0))
    assert free is not None
    assert free.rate is None, "an environment token has only the rate it names"
    with pytest.raises(ConfigError, match="entry #2 of 2: the text after '@' is no rate") as err:
        load_tokens(gate=[SecretStr("a:read"), SecretStr("t0p-secret:read@s3cr/et")])
    assert "t0p" not in err.value.message
    assert "s3cr" not in err.value.message


def test_a_file_token_without_a_rate_gets_the_default_rate(tmp_path: Path) -> None:
    """Review M7: file tokens are rate-limited unless told otherwise (JOBQ_TOKENS_DEFAULT_RATE)."""
    settings = write(tmp_path, billing())
    token = load_tokens(settings).match(SECRET)
    assert token is not None
    assert token.rate == Rate(1000, 1.0)
    assert settings.file is not None
    slow = TokenSettings(file=settings.file, default_rate="50/min")
    assert load_tokens(slow).match(SECRET) == dataclasses.replace(token, rate=Rate(50, 60.0))
    off = TokenSettings(file=settings.file, default_rate="off")
    unlimited = load_tokens(off).match(SECRET)
    assert unlimited is not None
    assert unlimited.rate is None
    own = load_tokens(write(tmp_path, billing('rate = "off"'))).match(SECRET)
    assert own is not None
    assert own.rate is None, "a token's own rate = 'off' wins over the default"
    with pytest.raises(ValueError, match="no rate"):
        TokenSettings(default_rate="fast")


def test_a_server_off_loopback_refuses_short_secrets_it_can_measure(tmp_path: Path) -> None:
    """Review M8 re-check: the servers accepted any length; now one listening off loopback refuses a secret
    under MIN_SECRET_CHARS in the environment lists or as a plaintext secret of the file (naming the list and
    the entry, never the secret); loopback and tools (no host) still take them."""
    short = "x" * (MIN_SECRET_CHARS - 1)
    cases = [
        ({"gate": [SecretStr(f"{short}:read")]}, "JOBQ_GATE_TOKENS: entry #1 of 1"),
        ({"web_read": [SecretStr(f"viewer:{short}")]}, "JOBQ_WEB_READ_TOKENS: token 'viewer'"),
        ({"web_admin": [SecretStr("a" * 30), SecretStr(short)]}, "JOBQ_WEB_ADMIN_TOKENS: entry #2 of 2"),
    ]
    for lists, named in cases:
        for host in ("0.0.0.0", "10.0.0.7"):
            with pytest.raises(ConfigError, match=f"{named}: shorter than {MIN_SECRET_CHARS}") as err:
                load_tokens(**lists, host=host)
            assert short not in err.value.message
        assert len(load_tokens(**lists, host="127.0.0.1")) >= 1
        assert len(load_tokens(**lists)) >= 1
    assert load_tokens(gate=[SecretStr("y" * MIN_SECRET_CHARS)], host="0.0.0.0").match("y" * 20) is not None
    text = billing().replace(f'sha256 = "{digest(SECRET).hex()}"', f'secret = "{short}"')
    plain = TokenSettings(file=write(tmp_path, text).file, allow_plaintext=True)
    with pytest.raises(ConfigError, match="token 'billing-app': secret: shorter than") as err:
        load_tokens(plain, host="0.0.0.0")
    assert short not in err.value.message
    assert load_tokens(plain, host="127.0.0.1").match(short) is not None


def test_a_bad_gate_token_entry_is_named_by_position_never_by_its_text() -> None:
    """What follows the ':' of a JOBQ_GATE_TOKENS entry may be the rest of a secret holding a colon
    (security review L4): the error names the entry's position only."""
    with pytest.raises(ConfigError, match=r"entry #2 of 2") as err:
        load_tokens(gate=[SecretStr("fine"), SecretStr("s3cr3t:half-of-the-s3cr3t")])
    assert "s3cr3t" not in err.value.message
    assert "half-of-the" not in err.value.message


def test_one_secret_in_the_read_and_admin_lists_is_one_admin_token() -> None:
    tokens = load_tokens(web_read=[SecretStr("alice:same")], web_admin=[SecretStr("alice:same")])
    assert tokens.match("same") == Token("alice", frozenset({"read", "admin"}))
    assert len(tokens) == 1


def test_rates_parse_and_print() -> None:
    assert Rate.parse("200/s") == Rate(200, 1.0)
    assert str(Rate(200, 1.0)) == "200/s"
    assert Rate.parse("10/min") == Rate(10, 60.0)
    assert str(Rate.parse("10/min")) == "10/min"
    assert Rate.parse("1000/hour") == Rate(1000, 3600.0)
    assert str(Rate.parse("1000/h")) == "1000/h"
    assert Rate.parse("50/10s") == Rate(50, 10.0)
    assert str(Rate(50, 10.0)) == "50/10s"
    for bad in ("0/s", "10", "10/day", "-1/s", "5/0s", "ten/s"):
        with pytest.raises(ValueError, match="no rate"):
            Rate.parse(bad)


def test_a_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    bucket = Bucket(Rate(3, 1.0))
    assert [bucket.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(100.0) == pytest.approx(1 / 3)
    assert bucket.take(100.2) == pytest.approx((1 - 0.6) / 3), "refilled 0.6 of a request in 0.2 s"
    assert bucket.take(100.34) == 0.0
    slow = Bucket(Rate(10, 60.0))
    for _ in range(10):
        assert slow.take(0.0) == 0.0
    assert slow.take(0.0) == pytest.approx(6.0)
    assert retry_after(6.0) == "6"
    assert retry_after(0.01) == "1"
    assert retry_after(5.2) == "6"


def test_buckets_per_key_peek_without_spending_and_forget_the_oldest_key() -> None:
    """The gateway's failed-token throttle (review M6): one bucket per client address, bounded."""
    buckets = Buckets(Rate(2, 10.0), max_keys=3)
    assert buckets.wait_s("a", 0.0) == 0.0
    assert len(buckets) == 0, "asking spends nothing and remembers nothing"
    assert [buckets.take("a", 0.0), buckets.take("a", 0.0)] == [0.0, 0.0]
    assert buckets.wait_s("a", 0.0) == pytest.approx(5.0)
    assert buckets.wait_s("a", 0.0) == pytest.approx(5.0), "still nothing spent"
    assert buckets.wait_s("b", 0.0) == 0.0, "another key has its own"
    assert buckets.wait_s("a", 5.0) == 0.0
    for key in ("b", "c", "d"):
        buckets.take(key, 5.0)
    assert len(buckets) == 3
    assert buckets.wait_s("a", 5.0) == 0.0, "the least recently used key was forgotten (starts full)"
    assert buckets.wait_s("b", 100.0) == 0.0
    assert len(buckets) == 2, "a key whose bucket is full again is forgotten"


def test_the_source_throttles_per_token_and_resets_a_bucket_whose_rate_changed(tmp_path: Path) -> None:
    settings = write(tmp_path, billing('rate = "2/s"'))
    source = TokenSource(settings)
    token = source.current.match(SECRET)
    assert token is not None
    assert [source.throttle(token, now=5.0) for _ in range(3)][:2] == [0.0, 0.0]
    assert source.throttle(token, now=5.0) > 0
    unlimited = Token("free", frozenset({"read"}))
    assert all(source.throttle(unlimited, now=5.0) == 0.0 for _ in range(100))
    assert settings.file is not None
    settings.file.write_text(billing('rate = "5/s"'))
    assert source.reload()
    fresh = source.current.match(SECRET)
    assert fresh is not None
    assert fresh.rate == Rate(5, 1.0)
    assert source.throttle(fresh, now=5.0) == 0.0, "a new rate starts a new bucket"


def test_reload_swaps_the_whole_set_and_keeps_the_old_one_on_a_bad_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = write(tmp_path, billing())
    source = TokenSource(settings, gate=[SecretStr("env-token")])
    before = source.current
    assert settings.file is not None
    settings.file.write_text(billing().replace("billing.*", "ledger.*"))
    assert source.reload()
    assert source.current is not before
    token = source.current.match(SECRET)
    assert token is not None
    assert token.queues == ("ledger.*",)
    assert source.current.match("env-token") is not None, "the environment's tokens stay"
    good = source.current
    settings.file.write_text(billing().replace("sha256 = ", "sha256 = 'x' #"))
    with caplog.at_level(logging.ERROR):
        assert not source.reload()
    assert source.current is good
    settings.file.write_text(billing(f'secret = "{SECRET}"'))
    assert not source.reload()
    assert source.current is good


def test_a_tokens_generation_changes_with_its_secret_and_nothing_else(tmp_path: Path) -> None:
    """What a dashboard session keeps (review M5): a one-way tag of the digest, not the digest."""
    settings = write(tmp_path, billing())
    first = load_tokens(settings).generation_of("billing-app")
    assert first == generation(digest(SECRET))
    assert first is not None
    assert len(first) == 16
    assert first not in digest(SECRET).hex()
    assert load_tokens(settings).generation_of("nobody") is None
    assert settings.file is not None
    settings.file.write_text(billing('kinds = ["invoice.*"]').replace("billing.*", "ledger.*"))
    assert load_tokens(settings).generation_of("billing-app") == first, "same secret, same generation"
    settings.file.write_text(billing().replace(digest(SECRET).hex(), digest("rotated-0123456789").hex()))
    assert load_tokens(settings).generation_of("billing-app") not in (None, first)


def test_hash_line_is_what_the_file_takes(tmp_path: Path) -> None:
    line = hash_line(SECRET)
    assert line == f'sha256 = "{digest(SECRET).hex()}"'
    text = billing().replace(f'sha256 = "{digest(SECRET).hex()}"', line)
    assert load_tokens(write(tmp_path, text)).match(SECRET) is not None


def test_jobq_tokens_hash_prints_the_line_never_the_secret() -> None:
    from typer.testing import CliRunner

    from jobq.cli import app

    result = CliRunner().invoke(app, ["tokens", "hash"], input=SECRET + "\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == hash_line(SECRET)
    assert SECRET not in result.output
    short = CliRunner().invoke(app, ["tokens", "hash"], input="abc\n")
    assert short.exit_code == 2
    assert "at least 20 characters" in short.output

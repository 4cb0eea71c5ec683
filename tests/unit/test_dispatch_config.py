"""Push dispatch's pure parts: the callback token (signed, bound to queue, job, attempt, expiry and the
claim's lease token; every malformed one a 401, never a 500), a kind's dispatch configuration (validated,
its secret kept out of what is shown, its URL masked for non-admins) and what its auth may send (only
``JOBQ_DISPATCH_AUTH_*`` variables and files of the secrets folder, never a framing header), checked when it
is configured and again when it is resolved."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from jqruntime.dispatch import (
    EVERY_QUEUE,
    STORED,
    DispatchAuth,
    DispatchAuthError,
    DispatchConfig,
    lease_nonce,
    load_config,
    load_configs,
    pick,
    sign_callback,
    verify_callback,
)
from jqruntime.http import HttpError

SECRET = "0123456789abcdef0123"
NOW = 1_764_300_000_000
LEASE = "lease-token-of-the-claim"
NONCE = lease_nonce(LEASE)


def refused(token: str, *, secret: str = SECRET, queue: str = "q", job: str = "j", now: int = NOW) -> str:
    with pytest.raises(HttpError) as err:
        verify_callback(secret, token, queue, job, now)
    return f"{err.value.status} {err.value.code}"


def test_a_token_names_its_attempt_and_claim_and_holds_only_for_its_job_and_secret() -> None:
    token = sign_callback(SECRET, "q", "j", 3, NOW + 1000, NONCE)
    claim = verify_callback(SECRET, token, "q", "j", NOW)
    assert (claim.attempt, claim.expires_ms, claim.nonce) == (3, NOW + 1000, NONCE)
    assert refused(token, job="other") == "403 callback_signature_invalid"
    assert refused(token, queue="other") == "403 callback_signature_invalid"
    assert refused(token, secret="another-secret-value") == "403 callback_signature_invalid"
    assert refused(token.replace("v2.3.", "v2.4.")) == "403 callback_signature_invalid"  # attempt changed
    other_claim = lease_nonce("another-lease-token")
    assert refused(token.replace(NONCE, other_claim)) == "403 callback_signature_invalid"  # claim changed
    assert refused(token, now=NOW + 1001) == "403 callback_expired"
    assert refused(token, secret="") == "403 callbacks_off"


def test_a_token_holds_only_for_the_claim_it_was_signed_for() -> None:
    """A released attempt claimed again keeps its number but gets another lease token: the old claim's
    token no longer holds (nor does any token once the attempt ended without a write: no lease token)."""
    claim = verify_callback(SECRET, sign_callback(SECRET, "q", "j", 1, NOW + 1, NONCE), "q", "j", NOW)
    assert claim.holds(LEASE)
    assert not claim.holds("the-lease-token-of-the-next-claim")
    assert not claim.holds("")
    assert len(NONCE) == 16
    assert int(NONCE, 16) >= 0  # hex, and the lease token itself is not in the token
    assert LEASE not in sign_callback(SECRET, "q", "j", 1, NOW, NONCE)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "v2",
        "v1.1.2.abc",  # the token of earlier builds: not bound to a claim
        "v2.1.2.abc",
        f"v2.x.2.{NONCE}.abc",
        f"v2.1.2.{NONCE}.",
        f"v2.1.2.{NONCE.upper()}.abc",
        "v2.1.2.0123.abc",
        f"v2.².2.{NONCE}.abc",
        f"v2.1.٣.{NONCE}.abc",
        f"v2.1.2.{NONCE}.abc.def",
        "v2.1.9" * 9,
    ],
)
def test_a_malformed_token_is_a_401(token: str) -> None:
    assert refused(token) == "401 callback_token_invalid"


def test_a_token_whose_signature_is_not_ascii_is_refused_not_an_error() -> None:
    assert refused(f"v2.1.2.{NONCE}.ünïcode") == "403 callback_signature_invalid"


def test_the_configuration_keeps_its_secret_out_of_what_is_shown() -> None:
    config = DispatchConfig.model_validate({"url": "https://h.example/x", "auth": "Bearer top-secret"})
    assert config.public()["auth"] == {"header": "Authorization", "value": "********"}
    assert "top-secret" not in repr(config)
    stored = config.stored()
    assert "top-secret" in stored  # the dispatcher needs it back
    again = load_configs({("q", "k"): stored})["q", "k"]
    assert again.auth is not None
    assert again.auth.resolve() == "Bearer top-secret"
    reference = DispatchConfig.model_validate({"url": "http://h/", "auth": "env:JOBQ_DISPATCH_AUTH_HOOK"})
    assert reference.auth is not None
    assert reference.auth.resolve({"JOBQ_DISPATCH_AUTH_HOOK": "x"}) == "x"
    with pytest.raises(DispatchAuthError, match=r"\$JOBQ_DISPATCH_AUTH_HOOK is not set"):
        reference.auth.resolve({})
    broken = {("q", "broken"): "{", ("q", "k"): stored}
    assert load_configs(broken).keys() == {("q", "k")}  # one unreadable configuration skips itself


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("https://hooks.slack.example/services/T00/B00/SECRETPATH", "https://hooks.slack.example/…"),
        ("https://h.example/hook?token=SECRETQUERY", "https://h.example/…"),
        ("http://h.example:8080/x", "http://h.example:8080/…"),
        ("https://h.example:443/", "https://h.example/…"),
        ("http://[2001:db8::1]:81/p", "http://[2001:db8::1]:81/…"),
    ],
)
def test_the_url_path_and_query_are_masked_for_tokens_without_admin(url: str, masked: str) -> None:
    config = DispatchConfig.model_validate({"url": url})
    assert config.public(full_url=False)["url"] == masked
    assert config.public()["url"] == str(config.url)  # admins see it whole


def test_a_job_is_dispatched_with_its_queues_configuration_else_the_one_for_every_queue() -> None:
    configs = {("a", "k"): "a's", (EVERY_QUEUE, "k"): "every queue's", ("b", "other"): "b's"}
    assert pick(configs, "a", "k") == "a's"
    assert pick(configs, "c", "k") == "every queue's"
    assert pick(configs, "b", "other") == "b's"
    assert pick(configs, "a", "other") is None


# ---- what the auth may send ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    ["JOBQ_REDIS_PASSWORD", "JOBQ_CALLBACK_SECRET", "CONSUL_HTTP_TOKEN", "HOME", "JOBQ_DISPATCH_AUTH_"],
)
def test_env_may_name_only_the_dispatch_auth_variables(name: str) -> None:
    with pytest.raises(ValidationError) as err:
        DispatchConfig.model_validate({"url": "https://h/", "auth": {"env": name}})
    (problem,) = err.value.errors()
    assert problem["loc"] == ("auth", "env")
    assert "JOBQ_DISPATCH_AUTH_" in problem["msg"]


def test_a_stored_configuration_naming_another_variable_is_refused_when_resolved() -> None:
    """A configuration stored before the rule (or written to Redis around the gateway) still loads — the
    kind stays a dispatch kind — but its auth is refused when the dispatcher resolves it."""
    stored = (
        '{"url": "https://attacker.example/x", "auth": {"header": "X-Leak", "env": "JOBQ_REDIS_PASSWORD"}}'
    )
    config = load_config(stored)
    assert config.auth is not None
    with pytest.raises(DispatchAuthError) as err:
        config.auth.resolve({"JOBQ_REDIS_PASSWORD": "the-redis-password"})
    assert "JOBQ_DISPATCH_AUTH_" in err.value.message
    assert "the-redis-password" not in err.value.message


@pytest.mark.parametrize(
    "header",
    [
        "Host",
        "host",
        "Content-Length",
        "content-type",
        "Content-Encoding",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "Upgrade",
        "TE",
        "Trailer",
        "Proxy-Authorization",
        "proxy-connection",
        "Cookie",
    ],
)
def test_the_auth_header_may_not_frame_route_or_proxy_the_request(header: str) -> None:
    auth = {"header": header, "value": "x"}
    with pytest.raises(ValidationError) as err:
        DispatchConfig.model_validate({"url": "https://h/", "auth": auth})
    assert err.value.errors()[0]["loc"] == ("auth", "header")
    stored = DispatchConfig.model_validate({"url": "https://h/", "auth": auth}, context=STORED)
    assert stored.auth is not None
    with pytest.raises(DispatchAuthError, match="may not be Host"):
        stored.auth.resolve()


@pytest.mark.parametrize("header", ["Authorization", "X-Api-Key", "X-Hook-Token", "Api-Key"])
def test_ordinary_auth_headers_are_accepted(header: str) -> None:
    config = DispatchConfig.model_validate({"url": "https://h/", "auth": {"header": header, "value": "v"}})
    assert config.auth is not None
    assert config.auth.resolve() == "v"


@pytest.mark.parametrize(
    "name", ["../etc/passwd", "a/b", "/abs", "..", "..data", ".hidden", "a..b", "", "x" * 256]
)
def test_a_file_must_be_a_plain_name_in_the_secrets_folder(name: str) -> None:
    with pytest.raises(ValidationError):
        DispatchAuth.model_validate({"file": name})


def test_a_file_is_read_from_the_secrets_folder_at_each_resolve(tmp_path: Path) -> None:
    (tmp_path / "billing-token").write_text("Bearer from-a-file\n")
    auth = DispatchConfig.model_validate({"url": "https://h/", "auth": "file:billing-token"}).auth
    assert auth is not None
    assert auth.resolve(secrets_dir=tmp_path) == "Bearer from-a-file"  # the trailing newline stripped
    (tmp_path / "billing-token").write_text("Bearer rotated")
    assert auth.resolve(secrets_dir=tmp_path) == "Bearer rotated"
    with pytest.raises(DispatchAuthError, match="JOBQ_DISPATCHER_SECRETS_DIR"):
        auth.resolve(secrets_dir=None)
    (tmp_path / "billing-token").unlink()
    with pytest.raises(DispatchAuthError, match="cannot be read"):
        auth.resolve(secrets_dir=tmp_path)


def test_a_kubernetes_secret_volume_is_read_and_links_out_of_the_folder_are_not(tmp_path: Path) -> None:
    """A Secret mounted as a volume: ``key -> ..data/key``, ``..data -> ..2026_12_05...``: links inside the
    folder are followed; one leading out of it is refused."""
    folder = tmp_path / "secrets"
    (folder / "..2026_12_05_10_00_00.1").mkdir(parents=True)
    (folder / "..2026_12_05_10_00_00.1" / "hook").write_text("k8s-value")
    os.symlink("..2026_12_05_10_00_00.1", folder / "..data")
    os.symlink("..data/hook", folder / "hook")
    (tmp_path / "outside").write_text("not yours")
    os.symlink(tmp_path / "outside", folder / "escape")
    assert DispatchAuth.model_validate({"file": "hook"}).resolve(secrets_dir=folder) == "k8s-value"
    with pytest.raises(DispatchAuthError, match="leads out of"):
        DispatchAuth.model_validate({"file": "escape"}).resolve(secrets_dir=folder)


@pytest.mark.parametrize(
    "bad",
    [
        {"url": "ftp://h/"},
        {"url": "http://u:p@h/"},
        {"url": "http://h/" + "x" * 2100},
        {"url": "http://h/", "timeout_s": 0},
        {"url": "http://h/", "callback_timeout_s": 8 * 86_400},
        {"url": "http://h/", "auth": {"header": "X", "value": "a", "env": "JOBQ_DISPATCH_AUTH_B"}},
        {"url": "http://h/", "auth": {"header": "X", "value": "a", "file": "b"}},
        {"url": "http://h/", "auth": {"header": "X"}},
        {"url": "http://h/", "auth": "a\nb"},
        {"url": "http://h/", "auth": 5},
        {"url": "http://h/", "backoff": {"factor": 0.5}},
    ],
)
def test_bad_configurations_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        DispatchConfig.model_validate(bad)

"""Push dispatch's pure parts: the callback token (signed, bound to queue, job, attempt and expiry; every
malformed one a 401, never a 500) and a kind's dispatch configuration (validated, its secret kept out of
what is shown)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from jqruntime.dispatch import DispatchConfig, load_configs, sign_callback, verify_callback
from jqruntime.http import HttpError

SECRET = "0123456789abcdef0123"
NOW = 1_764_300_000_000


def refused(token: str, *, secret: str = SECRET, queue: str = "q", job: str = "j", now: int = NOW) -> str:
    with pytest.raises(HttpError) as err:
        verify_callback(secret, token, queue, job, now)
    return f"{err.value.status} {err.value.code}"


def test_a_token_names_its_attempt_and_holds_only_for_its_job_and_secret() -> None:
    token = sign_callback(SECRET, "q", "j", 3, NOW + 1000)
    assert verify_callback(SECRET, token, "q", "j", NOW) == 3
    assert refused(token, job="other") == "403 callback_signature_invalid"
    assert refused(token, queue="other") == "403 callback_signature_invalid"
    assert refused(token, secret="another-secret-value") == "403 callback_signature_invalid"
    assert refused(token.replace("v1.3.", "v1.4.")) == "403 callback_signature_invalid"  # attempt changed
    assert refused(token, now=NOW + 1001) == "403 callback_expired"
    assert refused(token, secret="") == "403 callbacks_off"


@pytest.mark.parametrize(
    "token", ["", "v1", "v2.1.2.abc", "v1.x.2.abc", "v1.1.2.", "v1.².2.abc", "v1.1.٣.abc", "v1.1.9" * 9]
)
def test_a_malformed_token_is_a_401(token: str) -> None:
    assert refused(token) == "401 callback_token_invalid"


def test_a_token_whose_signature_is_not_ascii_is_refused_not_an_error() -> None:
    assert refused("v1.1.2.ünïcode") == "403 callback_signature_invalid"


def test_the_configuration_keeps_its_secret_out_of_what_is_shown() -> None:
    config = DispatchConfig.model_validate({"url": "https://h.example/x", "auth": "Bearer top-secret"})
    assert config.public()["auth"] == {"header": "Authorization", "value": "********"}
    assert "top-secret" not in repr(config)
    stored = config.stored()
    assert "top-secret" in stored  # the dispatcher needs it back
    again = load_configs({"k": stored})["k"]
    assert again.auth is not None
    assert again.auth.resolve() == "Bearer top-secret"
    reference = DispatchConfig.model_validate({"url": "http://h/", "auth": "env:HOOK_TOKEN"})
    assert reference.auth is not None
    assert reference.auth.resolve({"HOOK_TOKEN": "x"}) == "x"
    assert reference.auth.resolve({}) is None
    assert load_configs({"broken": "{", "k": stored}).keys() == {"k"}  # one unreadable kind skips itself


@pytest.mark.parametrize(
    "bad",
    [
        {"url": "ftp://h/"},
        {"url": "http://u:p@h/"},
        {"url": "http://h/" + "x" * 2100},
        {"url": "http://h/", "timeout_s": 0},
        {"url": "http://h/", "callback_timeout_s": 8 * 86_400},
        {"url": "http://h/", "auth": {"header": "X", "value": "a", "env": "B"}},
        {"url": "http://h/", "auth": {"header": "X"}},
        {"url": "http://h/", "auth": "a\nb"},
        {"url": "http://h/", "auth": 5},
        {"url": "http://h/", "backoff": {"factor": 0.5}},
    ],
)
def test_bad_configurations_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        DispatchConfig.model_validate(bad)

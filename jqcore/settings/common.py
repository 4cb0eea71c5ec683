"""The shared parts of the settings classes: comma-separated and JSON-text settings, :class:`ClientConfig`
and secret masking, ``*_FILE`` secrets, blank-is-unset, environment names, the local stack's default
addresses, and :func:`load`/:func:`load_env` (imported from here: ``jqcore.settings`` re-exports nothing)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import orjson
from pydantic import AfterValidator, AliasChoices, BeforeValidator, SecretStr, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsError

from jqcore.errors import ConfigError

__all__ = [
    "DEFAULT_CONSUL_ADDR",
    "DEFAULT_KAFKA_BOOTSTRAP",
    "DEFAULT_REDIS_URL",
    "MASK",
    "ClientConfig",
    "CommaList",
    "CommaSecrets",
    "JsonText",
    "QueueNames",
    "is_secret_key",
    "load",
    "load_env",
]

_S = TypeVar("_S", bound=BaseSettings)


def _comma_split(v: object) -> object:
    if isinstance(v, str):
        return [t.strip() for t in v.split(",") if t.strip()]
    return v


CommaList = Annotated[list[str], NoDecode, BeforeValidator(_comma_split)]
"""A list setting written ``a,b,c`` in the environment (a Python list is accepted too)."""
CommaSecrets = Annotated[list[SecretStr], NoDecode, BeforeValidator(_comma_split)]
"""The same for secrets (never shown in ``repr`` or logs)."""


def _some_queue(value: list[str]) -> list[str]:
    names = [q.strip() for q in value if q.strip()]
    if not names:
        raise ValueError("names no queue (expected q1,q2,...)")
    return names


QueueNames = Annotated[list[str], NoDecode, BeforeValidator(_comma_split), AfterValidator(_some_queue)]
"""The queues a process works (``q1,q2``): at least one."""


def _json_text(v: object) -> object:
    if isinstance(v, str | bytes):
        return orjson.loads(v)
    return v


JsonText = BeforeValidator(_json_text)
"""Marks a structured setting (``Annotated[dict[str, str], JsonText]``) that may arrive as JSON text
(a constructor argument, a compose file) as well as already parsed."""

DEFAULT_REDIS_URL = "redis://127.0.0.1:26379/0"
DEFAULT_KAFKA_BOOTSTRAP = "127.0.0.1:29092"
DEFAULT_CONSUL_ADDR = "127.0.0.1:28500"

MASK = "**********"
"""What a secret looks like wherever it is shown (pydantic's own mask for ``SecretStr``)."""

_SECRET_KEY = re.compile(
    r"(?i)password|secret|token|jaas|credential|key\.pem|keystore\.key|oauthbearer\.config"
)


def is_secret_key(key: str) -> bool:
    """Whether a client option holds a secret (``sasl.password``, ``kafka.sasl.jaas.config``, ``token``,
    ``ssl.key.pem``...)."""
    return bool(_SECRET_KEY.search(key))


class ClientConfig(dict[str, Any]):
    """What a settings object hands to a client library (librdkafka properties, Spark's Kafka options,
    redis-py or py-consul keyword arguments): a plain ``dict`` to the library, whose ``repr`` and ``str``
    mask the values of secret keys (:func:`is_secret_key`), so printing or logging one shows no secret."""

    def __repr__(self) -> str:
        return repr({k: MASK if v is not None and is_secret_key(k) else v for k, v in self.items()})

    __str__ = __repr__


def _masked_config(v: dict[str, str]) -> ClientConfig:
    return ClientConfig(v)


def _blank_is_unset(v: object) -> object:
    """An optional setting written empty (``JOBQ_REDIS_TLS_CA_FILE=``, a compose ``${VAR:-}``) is unset."""
    return None if v == "" else v


def _env_name(model: BaseSettings, field: str) -> str:
    return f"{model.model_config.get('env_prefix') or ''}{field}".upper()


def _given(value: object) -> bool:
    """Whether a setting holds a value (``None``, an empty secret or text and an empty list do not)."""
    if isinstance(value, SecretStr):
        return bool(value.get_secret_value())
    return value is not None and value != "" and value != []


def _file_text(name: str, path: str) -> str:
    """The text of the file ``<name>_FILE`` names (trailing newlines stripped); a settings error naming the
    variable (never the content) when it cannot be read, is not UTF-8 or is empty."""
    try:
        text = Path(path).expanduser().read_text(encoding="utf-8").rstrip("\r\n")
    except OSError as exc:
        raise ValueError(f"{name}_FILE: cannot read {path} ({exc.strerror or type(exc).__name__})") from None
    except UnicodeDecodeError:
        raise ValueError(f"{name}_FILE: {path} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{name}_FILE: {path} is empty")
    return text


def _read_secret_file(
    model: BaseSettings, field: str, *, name: str | None = None, kind: str = "secret"
) -> None:
    """Fill ``field`` from the file its ``<field>_file`` setting names (trailing newlines stripped: a
    mounted Kubernetes/Docker secret or ``echo x > file``). ``kind``: ``secret`` (a ``SecretStr``),
    ``text`` (a plain string: a user name kept beside the secrets) or ``secrets`` (a list of secrets, one
    per comma or line, as the environment's comma-separated lists). ``name``: the variable, when it is
    not the prefix and the field's. Both set, or a file that cannot be read or is empty, is a settings
    error naming the variable (never the secret)."""
    path = getattr(model, f"{field}_file")
    if not path:
        return
    name = name or _env_name(model, field)
    if _given(getattr(model, field)):
        raise ValueError(f"{name} and {name}_FILE are both set: give the secret once")
    text = _file_text(name, path)
    if kind == "text":
        setattr(model, field, text.strip())
    elif kind == "secrets":
        items = [t.strip() for line in text.splitlines() for t in line.split(",") if t.strip()]
        if not items:
            raise ValueError(f"{name}_FILE: {path} holds no entry")
        setattr(model, field, [SecretStr(t) for t in items])
    else:
        setattr(model, field, SecretStr(text))


def _check_files(model: BaseSettings, fields: Sequence[str]) -> None:
    """Each of ``fields`` that is set must name a readable file (a CA bundle, a certificate, a key, a
    keytab): found at start-up with the variable's name, not at the first TLS handshake."""
    for field in fields:
        path = getattr(model, field)
        if path and not os.access(Path(path).expanduser(), os.R_OK):
            problem = "is not readable" if Path(path).expanduser().is_file() else "does not exist"
            raise ValueError(f"{_env_name(model, field)}: {path} {problem}")


def load(cls: type[_S], **overrides: Any) -> _S:
    """Build a settings object, turning validation failures into one readable ConfigError."""
    try:
        return cls(**overrides)
    except SettingsError as exc:
        raise ConfigError(f"invalid {cls.__name__}: {exc}", code="config_invalid") from exc
    except ValidationError as exc:
        problems = "; ".join(
            f"{name}: {err['msg']}" if (name := _setting_name(cls, err["loc"])) else err["msg"]
            for err in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid {cls.__name__}: {problems}", code="config_invalid") from exc


def load_env(cls: type[_S], env: Mapping[str, str]) -> _S:
    """:func:`load` ``cls`` from the environment ``env`` (a child process's, say) instead of this process's:
    every field is given, from its environment name in ``env`` (the field's aliases, else the prefix and
    its name) or its default, so nothing of ``os.environ`` mixes in."""
    prefix = str(cls.model_config.get("env_prefix") or "")
    given: dict[str, Any] = {}
    for name, info in cls.model_fields.items():
        alias = info.validation_alias
        names = (
            [str(c) for c in alias.choices]
            if isinstance(alias, AliasChoices)
            else [f"{prefix}{name}".upper()]
        )
        found = next((env[n] for n in names if n in env), None)
        given[name] = found if found is not None else info.get_default(call_default_factory=True)
    return load(cls, **given)


def _setting_name(cls: type[BaseSettings], loc: tuple[int | str, ...]) -> str:
    """The environment variable a validation error is about (``JOBQ_WORKER_APP``), when there is one: for a
    field read under several names (``OTEL_SERVICE_NAME``, ``JOBQ_TRACE_SERVICE_NAME``), the ones set."""
    if not loc:
        return ""
    prefix = str(cls.model_config.get("env_prefix") or "")
    field = ".".join(str(p) for p in loc)
    for info in cls.model_fields.values():
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and loc[0] in alias.choices:
            names = [str(c) for c in alias.choices]
            given = [n for n in names if n in os.environ] or names[:1]
            return " / ".join(given) + (f" ({field})" if len(loc) > 1 else "")
    return f"{prefix}{str(loc[0]).upper()} ({field})" if prefix else field

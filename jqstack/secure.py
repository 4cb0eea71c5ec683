"""The secure stack's material and rules (``jobq stack up --name secure --secure``).

A secure stack keeps in ``<stack>/secrets`` (folder 0700, every key and secret 0600):

* a local CA made with ``openssl`` (``ca.pem``, ``ca.key``) and one server certificate for ``127.0.0.1`` /
  ``localhost`` signed by it (``server.pem``, ``server.key``; ``kafka.pem`` = key + certificate, Kafka's PEM
  keystore). Each server uses the same certificate; Kafka's brokers also present it as their client
  certificate on the controller listener (mutual TLS);
* per role (:data:`ROLES`) one Kafka SCRAM-SHA-512 password, one Redis ACL password and one Consul ACL token,
  plus the Kafka brokers' own SCRAM password, Consul's management token and the gateway's and dashboard's
  bearer tokens. Each is generated once per stack (``secrets.token_urlsafe``; Consul's are UUIDs) and kept in
  its own file; only ``jobq stack env`` prints them.

What each role may do is written here once: :data:`KAFKA_ACLS`, :data:`REDIS_RULES`,
:data:`CONSUL_RULES`; :func:`kafka_acls` and :func:`consul_acls` install them after the servers start
(Consul runs in dev mode, in memory: its policies and tokens are made again at every start).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import ssl
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jqstack.errors import StackError
from jqstack.procs import run_step

__all__ = [
    "BROKER_USER",
    "CONSUL_RULES",
    "KAFKA_ACLS",
    "REDIS_RULES",
    "ROLES",
    "SecureFiles",
    "consul_acls",
    "kafka_acls",
    "role_exports",
]

ROLES = ("gateway", "relay", "scheduler", "worker", "canary", "web", "history", "admin")
"""One Kafka SCRAM user, one Redis ACL user and one Consul token each; ``admin`` is the CLI's role."""

BROKER_USER = "broker"
"""The Kafka brokers' own SCRAM user (inter-broker traffic); a super user like ``admin``."""

SERVER_CN = "jobq-server"
"""The servers' certificate subject; ``User:CN=jobq-server`` is the brokers' principal on the
controller listener."""

_TOPIC_WRITE = ("WRITE", "DESCRIBE", "DESCRIBE_CONFIGS", "CREATE")
_TOPIC_READ = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")
_GROUP = ("READ", "DESCRIBE")
_CLUSTER = ("DESCRIBE", "IDEMPOTENT_WRITE")

KAFKA_ACLS: dict[str, dict[str, tuple[str, ...]]] = {
    "gateway": {"topic": (*_TOPIC_WRITE, "READ"), "group": _GROUP, "cluster": _CLUSTER},
    "relay": {"topic": (*_TOPIC_WRITE, "READ"), "group": _GROUP, "cluster": _CLUSTER},
    "scheduler": {"topic": (*_TOPIC_WRITE, "READ"), "group": _GROUP, "cluster": _CLUSTER},
    "worker": {},
    "canary": {"topic": ("DESCRIBE", "DESCRIBE_CONFIGS"), "cluster": ("DESCRIBE",)},
    "web": {"topic": (*_TOPIC_READ, "WRITE"), "group": _GROUP, "cluster": _CLUSTER},
    "history": {"topic": (*_TOPIC_READ, "WRITE"), "group": _GROUP, "cluster": _CLUSTER},
    "admin": {},  # a super user
}
"""Allow rules per role on every topic and group (``*``: jobq's topic names are the deployment's own) and
on the cluster. The gateway, relay and scheduler produce, consume and create missing topics (development
mode); the dashboard and history read and replay or sink jobs; the canary only looks up partitions; the
worker never talks to Kafka; ``admin`` (and the brokers) are super users. Every other principal is denied
(``allow.everyone.if.no.acl.found=false``)."""

_SERVICE_REDIS = "~* &* +@all -@admin -flushall -flushdb +config|get +info"
REDIS_RULES: dict[str, str] = {role: _SERVICE_REDIS for role in ROLES} | {"admin": "~* &* +@all"}
"""Redis ACL rules per user (the ``default`` user is off). Services may run every data, script and
connection command on every key but no server administration (``@admin``: CONFIG SET, ACL, SHUTDOWN,
DEBUG, replication, ...) and no FLUSHALL/FLUSHDB; they may read ``CONFIG GET`` and ``INFO`` (the
eviction-policy and memory checks). ``admin`` (``jobq rebuild``, ``jobq doctor``) may do everything."""

_KV = 'key_prefix "jobq" {{ policy = "{}" }}'
_NODES = 'node_prefix "" { policy = "read" }'
CONSUL_RULES: dict[str, str] = {
    "gateway": "\n".join([_KV.format("write"), 'session_prefix "" { policy = "read" }', _NODES]),
    "relay": "\n".join([_KV.format("write"), 'session_prefix "" { policy = "write" }', _NODES]),
    "scheduler": "\n".join([_KV.format("write"), 'session_prefix "" { policy = "read" }', _NODES]),
    "worker": "\n".join([_KV.format("read"), _NODES]),
    "canary": "\n".join([_KV.format("read"), _NODES]),
    "web": "\n".join([_KV.format("write"), 'session_prefix "" { policy = "read" }', _NODES]),
    "history": "\n".join([_KV.format("read"), _NODES]),
    "admin": "\n".join(
        [
            'key_prefix "" { policy = "write" }',
            'session_prefix "" { policy = "write" }',
            _NODES,
            'operator = "read"',
            'acl = "read"',
        ]
    ),
}
"""Consul policies per role (ACLs default to deny). jobq's KV lives under keys starting with ``jobq``
(``JOBQ_RELAY_KV_PREFIX``, ``JOBQ_CRON_KV_PREFIX``): the relay writes its locks with sessions it creates,
the scheduler, gateway and dashboard write cron state, rates and pauses; the others read."""


def _write_secret(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)


@dataclass(frozen=True)
class SecureFiles:
    """The secure stack's certificates and secrets under ``root`` (``<stack>/secrets``)."""

    root: Path

    @property
    def ca_cert(self) -> Path:
        return self.root / "ca.pem"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.root / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.root / "server.key"

    @property
    def kafka_keystore(self) -> Path:
        """Key and certificate in one PEM file (Kafka's ``ssl.keystore.type=PEM``)."""
        return self.root / "kafka.pem"

    def secret_file(self, kind: str, who: str) -> Path:
        """``kafka-<role>.password``, ``redis-<role>.password``, ``consul-<role>.token``, ``gate.token``..."""
        suffix = "token" if kind in ("consul", "gate", "web-admin", "web-read") else "password"
        return self.root / (f"{kind}-{who}.{suffix}" if who else f"{kind}.{suffix}")

    def secret(self, kind: str, who: str = "") -> str:
        return self.secret_file(kind, who).read_text()

    # ---- creation ------------------------------------------------------------------------------
    def ensure(self) -> SecureFiles:
        """Make what is missing (idempotent): the folder, the CA, the server certificate, every secret."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o700)
        if not self.ca_cert.exists():
            self._make_ca()
        if not self.kafka_keystore.exists():
            self._make_server_cert()
        wanted: list[tuple[str, str, bool]] = [
            (k, r, k == "consul") for k in ("kafka", "redis", "consul") for r in ROLES
        ]
        wanted += [("kafka", BROKER_USER, False), ("consul", "management", True)]
        wanted += [("gate", "", False), ("web-admin", "", False), ("web-read", "", False)]
        for kind, who, is_uuid in wanted:
            path = self.secret_file(kind, who)
            if not path.exists():
                _write_secret(path, str(uuid.uuid4()) if is_uuid else secrets.token_urlsafe(24))
        return self

    def _make_ca(self) -> None:
        self.ca_key.unlink(missing_ok=True)
        _openssl(
            "making the secure stack's CA",
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
            ["-keyout", str(self.ca_key), "-out", str(self.ca_cert), "-days", "3650"],
            ["-subj", "/CN=jobq local CA", "-addext", "basicConstraints=critical,CA:TRUE"],
            ["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
        )
        self.ca_key.chmod(0o600)

    def _make_server_cert(self) -> None:
        csr, ext = self.root / "server.csr", self.root / "server.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n"
        )
        self.server_key.unlink(missing_ok=True)
        _openssl(
            "making the secure stack's server key",
            ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"],
            ["-keyout", str(self.server_key), "-out", str(csr), "-subj", f"/CN={SERVER_CN}"],
        )
        self.server_key.chmod(0o600)
        _openssl(
            "signing the secure stack's server certificate",
            ["x509", "-req", "-in", str(csr), "-CA", str(self.ca_cert), "-CAkey", str(self.ca_key)],
            ["-set_serial", str(secrets.randbits(63)), "-out", str(self.server_cert), "-days", "825"],
            ["-extfile", str(ext)],
        )
        csr.unlink()
        ext.unlink()
        tmp = self.kafka_keystore.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        _write_secret(tmp, self.server_key.read_text() + self.server_cert.read_text())
        tmp.replace(self.kafka_keystore)

    # ---- server side ---------------------------------------------------------------------------
    def scram_users(self) -> list[tuple[str, str]]:
        """(user, password) for every Kafka SCRAM user: the roles and the brokers."""
        return [(u, self.secret("kafka", u)) for u in (*ROLES, BROKER_USER)]

    def redis_acl(self) -> str:
        """Redis's ACL file: ``default`` off, one user per role with its rules and its password's SHA-256
        (the file holds no password)."""
        lines = ["user default off"]
        for role in ROLES:
            digest = hashlib.sha256(self.secret("redis", role).encode()).hexdigest()
            lines.append(f"user {role} on #{digest} {REDIS_RULES[role]}")
        return "\n".join(lines) + "\n"

    # ---- client side -----------------------------------------------------------------------------
    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context that trusts the stack's CA only."""
        return ssl.create_default_context(cafile=str(self.ca_cert))

    def kafka_client(self, role: str = "admin") -> dict[str, str]:
        """librdkafka settings for ``role`` (the stack's probes and ACL set-up use ``admin``)."""
        return {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": role,
            "sasl.password": self.secret("kafka", role),
            "ssl.ca.location": str(self.ca_cert),
        }

    def redis_client(self, role: str = "admin") -> dict[str, Any]:
        """redis-py keyword arguments for ``role`` over TLS."""
        return {
            "ssl": True,
            "ssl_ca_certs": str(self.ca_cert),
            "username": role,
            "password": self.secret("redis", role),
        }


def _openssl(what: str, *parts: list[str]) -> None:
    run_step(what, ["openssl", *[a for p in parts for a in p]], timeout_s=60, hint="openssl must be on PATH.")


def kafka_acls(bootstrap: str, files: SecureFiles) -> None:
    """Install :data:`KAFKA_ACLS` (idempotent: an ACL that exists is created again harmlessly)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    kinds = {"topic": (ResourceType.TOPIC, "*"), "group": (ResourceType.GROUP, "*")}
    kinds["cluster"] = (ResourceType.BROKER, "kafka-cluster")
    bindings = [
        AclBinding(
            kinds[kind][0],
            kinds[kind][1],
            ResourcePatternType.LITERAL,
            f"User:{role}",
            "*",
            AclOperation[op],
            AclPermissionType.ALLOW,
        )
        for role, rules in KAFKA_ACLS.items()
        for kind, ops in rules.items()
        for op in ops
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, **files.kafka_client()})
    for binding, future in admin.create_acls(bindings, request_timeout=30).items():
        try:
            future.result(timeout=60)
        except Exception as exc:
            raise StackError(f"creating the Kafka ACL {binding}: {exc}") from exc


def consul_acls(addr: str, files: SecureFiles) -> None:
    """Make one policy (:data:`CONSUL_RULES`) and one token per role, with the stack's recorded secrets
    as the tokens' SecretIDs (idempotent: existing ones are updated/left)."""
    management = files.secret("consul", "management")
    ctx = files.ssl_context()

    def call(method: str, path: str, body: Any = None, token: str = management) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"https://{addr}{path}", data=data, method=method)
        req.add_header("X-Consul-Token", token)
        with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
            return json.loads(resp.read() or b"null")

    policies = {p["Name"]: p["ID"] for p in call("GET", "/v1/acl/policies")}
    tokens = {t.get("Description") for t in call("GET", "/v1/acl/tokens")}
    for role in ROLES:
        name = f"jobq-{role}"
        policy = {"Name": name, "Description": f"jobq role {role}", "Rules": CONSUL_RULES[role]}
        if name in policies:
            call("PUT", f"/v1/acl/policy/{policies[name]}", policy)
        else:
            call("PUT", "/v1/acl/policy", policy)
        description = f"jobq role {role}"
        if description not in tokens:
            secret = files.secret("consul", role)
            token = {"SecretID": secret, "Description": description, "Policies": [{"Name": name}]}
            call("PUT", "/v1/acl/token", token)


def role_exports(
    files: SecureFiles, role: str, *, kafka_bootstrap: str, redis_port: int, consul_port: int
) -> dict[str, str]:
    """The settings one ``role`` needs to reach the secure servers (environment names of jqcore's
    ``KafkaSettings``, ``RedisSettings``, ``ConsulSettings``), secrets as ``*_FILE`` paths (never the
    values: a child's environment, ``ps e`` or a crash dump then holds none)."""
    if role not in ROLES:
        raise StackError(f"unknown role {role!r}; roles: {', '.join(ROLES)}")
    env = {
        "JOBQ_KAFKA_BOOTSTRAP": kafka_bootstrap,
        "JOBQ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "JOBQ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "JOBQ_KAFKA_SASL_USERNAME": role,
        "JOBQ_KAFKA_SASL_PASSWORD_FILE": str(files.secret_file("kafka", role)),
        "JOBQ_KAFKA_SSL_CA_LOCATION": str(files.ca_cert),
        "JOBQ_REDIS_URL": f"rediss://127.0.0.1:{redis_port}/0",
        "JOBQ_REDIS_TLS": "true",
        "JOBQ_REDIS_TLS_CA_FILE": str(files.ca_cert),
        "JOBQ_REDIS_USERNAME": role,
        "JOBQ_REDIS_PASSWORD_FILE": str(files.secret_file("redis", role)),
        "JOBQ_CONSUL_ADDR": f"https://127.0.0.1:{consul_port}",
        "JOBQ_CONSUL_SCHEME": "https",
        "JOBQ_CONSUL_CA_FILE": str(files.ca_cert),
        "JOBQ_CONSUL_VERIFY": "true",
        "JOBQ_CONSUL_TOKEN_FILE": str(files.secret_file("consul", role)),
    }
    return env

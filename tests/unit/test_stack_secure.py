"""The secure stack's material and configuration, without starting a server: keys and secrets are 0600
and made once, no listener takes plaintext, no password is written where it need not be, and
``jobq stack env --role`` exports exactly the contract's settings for each role."""

from __future__ import annotations

import shlex
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from jobq.cli import app
from jqcore.settings.common import load
from jqcore.settings.kafka import KafkaSettings
from jqcore.settings.servers import ConsulSettings, RedisSettings
from jqstack.manager import Stack, StackSpec
from jqstack.secure import KAFKA_ACLS, REDIS_RULES, ROLES, SecureFiles
from jqstack.servers import KafkaBroker, RedisServer

CONTRACT = {
    "JOBQ_KAFKA_BOOTSTRAP",
    "JOBQ_KAFKA_SECURITY_PROTOCOL",
    "JOBQ_KAFKA_SASL_MECHANISM",
    "JOBQ_KAFKA_SASL_USERNAME",
    "JOBQ_KAFKA_SASL_PASSWORD",
    "JOBQ_KAFKA_SASL_PASSWORD_FILE",
    "JOBQ_KAFKA_SSL_CA_LOCATION",
    "JOBQ_REDIS_URL",
    "JOBQ_REDIS_TLS",
    "JOBQ_REDIS_TLS_CA_FILE",
    "JOBQ_REDIS_USERNAME",
    "JOBQ_REDIS_PASSWORD",
    "JOBQ_REDIS_PASSWORD_FILE",
    "JOBQ_CONSUL_ADDR",
    "JOBQ_CONSUL_SCHEME",
    "JOBQ_CONSUL_CA_FILE",
    "JOBQ_CONSUL_VERIFY",
    "JOBQ_CONSUL_TOKEN",
    "JOBQ_CONSUL_TOKEN_FILE",
}
"""The server settings of the helpers' contract (issue 34) that a secure stack sets."""

OTHERS = {
    "JOBQ_HISTORY_PATH",
    "JOBQ_GATE_TOKENS",
    "JOBQ_WEB_ADMIN_TOKENS",
    "JOBQ_WEB_READ_TOKENS",
    "JOBQ_CANARY_GATEWAYS",
    "JOBQ_CANARY_TOKEN",
    "JOBQ_URL",
    "JOBQ_TOKEN",
}


@pytest.fixture
def secure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Stack:
    monkeypatch.setenv("JOBQ_HOME", str(tmp_path))
    stack = Stack(StackSpec(name="secure", secure=True))
    assert stack.secure is not None
    stack.secure.ensure()
    return stack


def files_of(stack: Stack) -> SecureFiles:
    assert stack.secure is not None
    return stack.secure


def test_keys_and_secrets_are_private_and_made_once(secure: Stack) -> None:
    files = files_of(secure)
    assert stat.S_IMODE(files.root.stat().st_mode) == 0o700
    private = [files.ca_key, files.server_key, files.kafka_keystore]
    private += [files.secret_file(kind, role) for kind in ("kafka", "redis", "consul") for role in ROLES]
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    before = {p: p.read_bytes() for p in private}
    files.ensure()
    assert {p: p.read_bytes() for p in private} == before
    assert len({files.secret("kafka", r) for r in ROLES}) == len(ROLES)


def test_kafka_listens_for_sasl_ssl_only(secure: Stack) -> None:
    files = files_of(secure)
    props = KafkaBroker.properties(secure.of_kind("kafka")[0], 1, "1@127.0.0.1:1", files)
    lines = dict(line.split("=", 1) for line in props.splitlines() if line)
    assert "PLAINTEXT" not in lines["listeners"]
    assert lines["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert lines["listener.name.controller.ssl.client.auth"] == "required"
    assert lines["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert lines["allow.everyone.if.no.acl.found"] == "false"
    assert lines["authorizer.class.name"].endswith("StandardAuthorizer")
    assert set(KAFKA_ACLS) == set(ROLES)


def test_redis_takes_tls_only_and_its_acl_file_holds_no_password(secure: Stack) -> None:
    files = files_of(secure)
    server = secure.of_kind("redis")[0]
    cmd = RedisServer.command(server, Path("redis-server"), secure=files)
    assert cmd[cmd.index("--port") + 1] == "0"
    assert cmd[cmd.index("--tls-port") + 1] == str(server.port)
    acl = (server.data_dir / "users.acl").read_text()
    assert stat.S_IMODE((server.data_dir / "users.acl").stat().st_mode) == 0o600
    assert acl.splitlines()[0] == "user default off"
    assert [line.split()[1] for line in acl.splitlines()[1:]] == list(ROLES)
    assert not [r for r in ROLES if files.secret("redis", r) in acl]
    assert "-@admin" in REDIS_RULES["worker"]
    assert "-@admin" not in REDIS_RULES["admin"]


def env_of(role: str | None) -> dict[str, str]:
    args = ["stack", "env", "--name", "secure", *(["--role", role] if role else [])]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return dict(shlex.split(line)[1].split("=", 1) for line in result.stdout.splitlines())


@pytest.mark.parametrize("role", ROLES)
def test_env_exports_a_roles_settings_and_they_load(
    secure: Stack, role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = env_of(role)
    assert set(env) <= CONTRACT | OTHERS
    assert {k for k in env if k in CONTRACT} >= CONTRACT - {
        "JOBQ_KAFKA_SASL_PASSWORD",
        "JOBQ_REDIS_PASSWORD",
        "JOBQ_CONSUL_TOKEN",
    }
    files = files_of(secure)
    assert Path(env["JOBQ_KAFKA_SASL_PASSWORD_FILE"]).read_text() == files.secret("kafka", role)
    assert Path(env["JOBQ_REDIS_PASSWORD_FILE"]).read_text() == files.secret("redis", role)
    assert Path(env["JOBQ_CONSUL_TOKEN_FILE"]).read_text() == files.secret("consul", role)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    kafka = load(KafkaSettings)
    assert (kafka.security_protocol, kafka.sasl_username) == ("SASL_SSL", role)
    redis = load(RedisSettings)
    assert (redis.url.startswith("rediss://"), redis.username) == (True, role)
    assert load(ConsulSettings).addr.startswith("https://127.0.0.1:")


def test_env_defaults_to_the_admin_role_and_refuses_an_unknown_one(secure: Stack) -> None:
    assert env_of(None)["JOBQ_KAFKA_SASL_USERNAME"] == "admin"
    result = CliRunner().invoke(app, ["stack", "env", "--name", "secure", "--role", "nobody"])
    assert result.exit_code == 2
    assert "unknown role 'nobody'" in result.output


def test_a_plain_stack_has_no_roles(secure: Stack) -> None:
    Stack(StackSpec(name="plain"))
    result = CliRunner().invoke(app, ["stack", "env", "--name", "plain", "--role", "relay"])
    assert result.exit_code == 2
    assert "not secure" in result.output


def test_up_keeps_a_secure_stack_secure_unless_told(secure: Stack) -> None:
    from jobq.commands.stack import open_stack

    assert open_stack("secure").spec.secure
    assert not open_stack("plain").spec.secure


def test_the_demo_gives_each_process_its_own_roles_credentials(
    secure: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobq import demo_workload
    from jobq.commands.stack import stack_tokens

    # a shell that ran `eval "$(jobq stack env ...)"` with a password value mixes in nothing
    monkeypatch.setenv("JOBQ_KAFKA_SASL_PASSWORD", "inherited")
    monkeypatch.setenv("CONSUL_HTTP_TOKEN", "inherited")
    monkeypatch.setenv("JOBQ_KAFKA_REPLICATION", "1")  # what the deployment wants is inherited
    tokens = stack_tokens(secure)
    spec = demo_workload.pipeline_env(secure.client_env, tokens, "/tmp/history")
    envs = {
        "gateway": spec.gateway(8000),
        "relay": spec.relay("r"),
        "scheduler": spec.scheduler("s"),
        "worker": spec.worker(),
        "canary": spec.canary(["http://127.0.0.1:8000@a"], interval_s=10, late_after_s=20),
        "web": spec.web(9000),
        "history": spec.history(trigger_s=2),
        "admin": spec.common(),
    }
    assert set(envs) == set(ROLES)
    files = files_of(secure)
    for role, env in envs.items():
        users = {env[f"JOBQ_{k}_USERNAME"] for k in ("KAFKA_SASL", "REDIS")}
        assert users == {role}, role
        assert env["JOBQ_CONSUL_TOKEN_FILE"] == str(files.secret_file("consul", role))
        assert "JOBQ_KAFKA_SASL_PASSWORD" not in env
        assert "CONSUL_HTTP_TOKEN" not in env
        assert env["JOBQ_KAFKA_REPLICATION"] == "1"
        assert env["JOBQ_GATE_TOKENS"] == tokens.gate == files.secret("gate")
    dispatcher = spec.dispatcher(demo_workload.HOOK_QUEUE, callback_url="http://127.0.0.1:8000")
    assert dispatcher["JOBQ_REDIS_USERNAME"] == "worker"  # it does to jobs in Redis what a pool does
    assert dispatcher["JOBQ_CALLBACK_SECRET"] == envs["gateway"]["JOBQ_CALLBACK_SECRET"]  # signs / checks
    sources = demo_workload.sources(spec)  # the demo's own reads: admin, with this process's env ignored
    assert (sources.kafka.sasl_username, sources.redis.username) == ("admin", "admin")
    assert sources.kafka.sasl_password is not None
    assert sources.kafka.sasl_password.get_secret_value() == files.secret("kafka", "admin")
    assert sources.consul.scheme == "https"

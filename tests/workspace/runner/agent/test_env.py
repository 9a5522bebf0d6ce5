"""The agent's step environments on this machine: what each step gets, and from where."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from workspace.runner.agent.env import Caching, MissingValueError, Values, step_envs
from workspace.runner.job import ENV_SOURCES, EnvSources, Owner, RunJob, SecretEnv

GIT_PASSWORD = "git-password-value"  # noqa: S105 - a test value
PASSPHRASE = "passphrase-value"  # noqa: S105 - a test value
TOKEN = "template-token-value"  # noqa: S105 - a test value


class FakeCore:
    """Secrets and ConfigMaps of one namespace, counting the reads."""

    def __init__(
        self, secrets: dict[str, dict[str, str]], config_maps: dict[str, dict[str, str]]
    ) -> None:
        """Serve ``secrets`` (plain values, encoded here) and ``config_maps``."""
        self.secrets = secrets
        self.config_maps = config_maps
        self.reads: list[str] = []

    def read_namespaced_secret(self, name: str, namespace: str, **_: Any) -> dict[str, Any]:
        """The Secret, its values base64-encoded as the API has them; 404 when absent."""
        self.reads.append(f"secret/{namespace}/{name}")
        if name not in self.secrets:
            raise ApiException(status=404, reason="Not Found")
        data = {k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[name].items()}
        return {"data": data}

    def read_namespaced_config_map(self, name: str, namespace: str, **_: Any) -> dict[str, Any]:
        """The ConfigMap; 404 when absent."""
        self.reads.append(f"configmap/{namespace}/{name}")
        if name not in self.config_maps:
            raise ApiException(status=404, reason="Not Found")
        return {"data": self.config_maps[name]}


def a_job(template: dict[str, Any] | None = None) -> RunJob:
    """A job with one git credential and one run Secret value."""
    return RunJob(
        namespace="ns",
        owner=Owner("pulumi.com/v1", "Stack", "app", "uid"),
        generation=1,
        commit="abc",
        service_account="default",
        document='{"stack":"dev"}',
        secret_env=(SecretEnv("PSO_SECRET_0", "pulumi-secrets", "passphrase"),),
        git_env=(SecretEnv("PSO_GIT_0", "git-auth", "password"),),
        overrides=json.dumps(template or {}),
    )


def a_core() -> FakeCore:
    """The namespace's objects the job and the template below name."""
    return FakeCore(
        {
            "pulumi-secrets": {"passphrase": PASSPHRASE},
            "git-auth": {"password": GIT_PASSWORD},
            "tokens": {"token": TOKEN},
            "bulk": {"ONE": "1", "TWO": "2"},
        },
        {"settings": {"region": "eu-1"}},
    )


def envs_of(job: RunJob, core: FakeCore, tmp_path: Path, **environ: str) -> Any:
    """Both steps' environments of ``job``, the operator's environment ``environ``."""
    return step_envs(
        job=job,
        operation="up",
        workspace=tmp_path / "ws",
        values=Values(core, "ns"),
        cli_dir="/opt/pulumi/bin",
        caching=Caching(tmp_path / "cache", 1024, "http://mirror.example"),
        environ={"PATH": "/usr/bin", "LANG": "C.UTF-8", "KUBECONFIG": "/k", "PSO_X": "1"} | environ,
    )


def test_git_credentials_reach_the_checkout_only_and_secrets_the_run_only(tmp_path: Path) -> None:
    """The git credentials are the checkout's, the Stack's other Secret values the run's."""
    envs = envs_of(a_job(), a_core(), tmp_path)
    assert envs.checkout["PSO_GIT_0"] == GIT_PASSWORD
    assert "PSO_SECRET_0" not in envs.checkout
    assert envs.run["PSO_SECRET_0"] == PASSPHRASE
    assert "PSO_GIT_0" not in envs.run
    assert envs.secrets == {GIT_PASSWORD, PASSPHRASE}


def test_both_steps_get_the_job_the_workspace_and_an_allow_listed_environment(
    tmp_path: Path,
) -> None:
    """The job, the workspace and the operator's allow-listed variables, nothing else of its."""
    envs = envs_of(a_job(), a_core(), tmp_path)
    workspace = tmp_path / "ws"
    for env in (envs.checkout, envs.run):
        assert env["PSO_JOB"] == '{"stack":"dev"}'
        assert env["PSO_OPERATION"] == "up"
        assert env["PSO_WORKSPACE"] == str(workspace)
        assert env["HOME"] == str(workspace / "home")
        assert env["TMPDIR"] == str(workspace / "tmp")
        assert env["PULUMI_ENV"] == str(workspace / "share" / ".env")
        assert env["PATH"] == "/opt/pulumi/bin:/usr/bin"  # the operator's CLI first
        assert env["LANG"] == "C.UTF-8"
        assert "KUBECONFIG" not in env  # the operator's own, never the program's
        assert "PSO_X" not in env
    assert envs.run["PSO_CACHE_DIR"] == str(tmp_path / "cache")
    assert envs.run["PSO_CACHE_LIMIT"] == "1024"
    assert envs.run["PSO_PLUGIN_MIRROR"] == "http://mirror.example"
    assert "PSO_CACHE_DIR" not in envs.checkout


def test_the_template_env_is_filled_as_the_kubelet_fills_it(tmp_path: Path) -> None:
    """The ``envFrom`` under ``env``, Secret and ConfigMap keys read, pod-only sources left out."""
    template = {
        "envFrom": [{"secretRef": {"name": "bulk"}, "prefix": "B_"}],
        "env": [
            {"name": "PLAIN", "value": "yes"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tokens", "key": "token"}}},
            {
                "name": "REGION",
                "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "region"}},
            },
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {
                "name": "MAYBE",
                "valueFrom": {"secretKeyRef": {"name": "gone", "key": "x", "optional": True}},
            },
            {"name": "B_ONE", "value": "env wins"},
        ],
    }
    core = a_core()
    envs = envs_of(a_job(template), core, tmp_path)
    for env in (envs.checkout, envs.run):
        assert env["PLAIN"] == "yes"
        assert env["TOKEN"] == TOKEN
        assert env["REGION"] == "eu-1"
        assert env["B_TWO"] == "2"
        assert env["B_ONE"] == "env wins"
        assert "POD_IP" not in env  # the pod's, not this machine's
        assert "MAYBE" not in env
        sources = EnvSources.decode(env[ENV_SOURCES])
        assert sources is not None
        assert sources.secret == {"TOKEN", "MAYBE"}
        assert sources.secret_prefixes == {"B_"}
    assert TOKEN in envs.secrets
    assert core.reads.count("secret/ns/tokens") == 1  # each object read once


@pytest.mark.parametrize(
    ("secrets", "named"),
    [
        ({"git-auth": {"password": GIT_PASSWORD}}, "Secret ns/pulumi-secrets"),
        (
            {"git-auth": {"password": GIT_PASSWORD}, "pulumi-secrets": {"other": "x"}},
            "key 'passphrase' of Secret ns/pulumi-secrets",
        ),
    ],
)
def test_a_missing_secret_or_key_is_named_never_a_value(
    tmp_path: Path, secrets: dict[str, dict[str, str]], named: str
) -> None:
    """A missing Secret or key is named in the error; no value is."""
    with pytest.raises(MissingValueError) as raised:
        envs_of(a_job(), FakeCore(secrets, {}), tmp_path)
    assert named in str(raised.value)
    assert GIT_PASSWORD not in str(raised.value)


def test_an_unreadable_secret_says_why_without_its_body(tmp_path: Path) -> None:
    """A Secret the API does not serve: its status, not its body."""

    class Refusing(FakeCore):
        def read_namespaced_secret(self, *_: Any, **__: Any) -> dict[str, Any]:
            raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(MissingValueError, match="403 Forbidden"):
        envs_of(a_job(), Refusing({}, {}), tmp_path)

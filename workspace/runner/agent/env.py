"""The environment of the agent's two steps on this machine: what a run pod's kubelet gives.

Role: ``AgentRunner`` (``workspace.runner.agent.runner``) runs a run pod's agent as child
processes of the operator; this module builds each child's whole environment, as the
pod's containers get it (``workspace.runner.pod.spec``), with the values the kubelet would
fill from Secrets read through the Kubernetes API here.

Both steps get an allow-list of the operator's own variables (``cli.INHERITED_ENV``: the
locale, proxies, CAs, registry mirrors, ``PULUMI_PYTHON_CMD``) with the CLI's directory
first on ``PATH`` (the agent finds the operator's ``pulumi`` there), ``HOME`` and
``TMPDIR`` inside the run's private workspace, ``PSO_WORKSPACE``, ``PSO_JOB``,
``PSO_OPERATION``, ``PSO_ENV_SOURCES``, ``PULUMI_ENV`` (a file nobody writes: a Stack with
init containers is refused before a run), and the workspaceTemplate's ``envFrom`` and
``env`` (``env`` wins). Only the checkout step gets the git credentials (``RunJob.git_env``);
only the run step the other Secret values (``RunJob.secret_env``) and the cache settings.

Of ``workspaceTemplate``, what a process on this machine can honour is honoured: ``env``
with a literal value, a ``secretKeyRef`` or a ``configMapKeyRef`` (``optional`` ones may be
missing), and ``envFrom`` Secrets and ConfigMaps (with their ``prefix``). Pod-only settings
are ignored: ``fieldRef``/``resourceFieldRef`` variables, volumes and mounts, resources,
security contexts, scheduling, labels and annotations, the image.

Guarantees: a value read from a Secret is only ever in the returned environment (never in
an error or a log line); a missing Secret, key or ConfigMap raises ``MissingValueError``
naming it.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from controller.coreapi import Timeout
from workspace.runner.cli import INHERITED_ENV
from workspace.runner.envfile import ENV_VARIABLE
from workspace.runner.job import ENV_SOURCES, EnvSources, RunJob, SecretEnv, trace_env

API_TIMEOUT = 10.0  # seconds one read of a Secret or ConfigMap may take
SHARE = "share"  # the workspace's stand-in for the pod's share volume (PULUMI_ENV's file)


class MissingValueError(Exception):
    """A Secret, key or ConfigMap the run needs cannot be read (the message names it)."""


@dataclass(frozen=True)
class Caching:
    """What the run step caches where.

    ``directory`` (``PSO_CACHE_DIR``), its ``limit`` in bytes, the plugin ``mirror``
    (None: each plugin's own source).
    """

    directory: Path
    limit: int
    mirror: str | None = None


@dataclass(frozen=True)
class StepEnvs:
    """The two steps' whole environments; ``secrets`` every value read from a Secret."""

    checkout: dict[str, str]
    run: dict[str, str]
    secrets: frozenset[str]


class Reads(Protocol):
    """The reads ``Values`` makes (``controller.coreapi.CoreApi`` has them)."""

    def read_namespaced_secret(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the Secret ``namespace/name``."""
        ...

    def read_namespaced_config_map(
        self, name: str, namespace: str, *, _request_timeout: Timeout = None
    ) -> dict[str, Any]:
        """GET the ConfigMap ``namespace/name``."""
        ...


class Values:
    """Reads Secret and ConfigMap keys of one namespace, each object once."""

    def __init__(self, core: Reads, namespace: str) -> None:
        """Read through ``core`` in ``namespace``."""
        self._core = core
        self._namespace = namespace
        self._objects: dict[tuple[str, str], dict[str, str] | None] = {}
        self.secrets: set[str] = set()

    def secret(self, name: str, key: str, *, optional: bool = False) -> str | None:
        """The value of ``key`` in Secret ``name`` (None: ``optional`` and missing)."""
        data = self.secret_data(name, optional=optional)
        if data is None or key not in data:
            return self._missing(f"key {key!r} of Secret {self._where(name)}", optional)
        return data[key]

    def secret_data(self, name: str, *, optional: bool = False) -> dict[str, str] | None:
        """Every key of Secret ``name``, decoded (None: ``optional`` and missing)."""
        data = self._read("secrets", name)
        if data is None:
            return self._missing(f"Secret {self._where(name)}", optional)
        self.secrets.update(v for v in data.values() if v)
        return data

    def config_map(self, name: str, key: str | None, *, optional: bool = False) -> Any:  # noqa: ANN401
        """``key`` of ConfigMap ``name`` (every key when None; None: optional and missing)."""
        data = self._read("configmaps", name)
        if data is None or (key is not None and key not in data):
            what = f"ConfigMap {self._where(name)}" + (f" key {key!r}" if key else "")
            return self._missing(what, optional)
        return data if key is None else data[key]

    def _where(self, name: str) -> str:
        return f"{self._namespace}/{name}"

    @staticmethod
    def _missing(what: str, optional: bool) -> None:  # noqa: FBT001 - private
        if optional:
            return
        msg = f"{what} is missing (the run needs it)"
        raise MissingValueError(msg)

    def _read(self, kind: str, name: str) -> dict[str, str] | None:
        """The object's data (decoded for a Secret), None when it does not exist."""
        if (kind, name) not in self._objects:
            self._objects[(kind, name)] = self._fetch(kind, name)
        return self._objects[(kind, name)]

    def _fetch(self, kind: str, name: str) -> dict[str, str] | None:
        secret = kind == "secrets"
        read = (
            self._core.read_namespaced_secret if secret else self._core.read_namespaced_config_map
        )
        try:
            obj = read(name, self._namespace, _request_timeout=API_TIMEOUT)
        except ApiException as err:
            if err.status == 404:
                return None
            what = "Secret" if secret else "ConfigMap"
            msg = f"reading {what} {self._where(name)} failed: {err.status} {err.reason}"
            raise MissingValueError(msg) from None
        except (HTTPError, OSError) as err:
            what = "Secret" if secret else "ConfigMap"
            msg = f"reading {what} {self._where(name)} failed: {type(err).__name__}"
            raise MissingValueError(msg) from None
        if not secret:
            return {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
        return {str(k): _decoded(name, str(k), v) for k, v in (obj.get("data") or {}).items()}


def _decoded(name: str, key: str, value: object) -> str:
    try:
        return base64.b64decode(str(value), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        msg = f"key {key!r} of Secret {name} is not base64-encoded UTF-8 text"
        raise MissingValueError(msg) from None


def step_envs(  # noqa: PLR0913 - one run's facts, all keyword-only
    *,
    job: RunJob,
    operation: str,
    workspace: Path,
    values: Values,
    cli_dir: str,
    caching: Caching,
    environ: Mapping[str, str] | None = None,
) -> StepEnvs:
    """Both steps' environments for ``job`` (see the module docstring).

    Raises:
        MissingValueError: a Secret, key or ConfigMap the job or its template names.
    """
    template = job.template()
    common = {
        **inherited(os.environ if environ is None else environ, cli_dir),
        "HOME": str(workspace / "home"),
        "TMPDIR": str(workspace / "tmp"),
        "PSO_WORKSPACE": str(workspace),
        "PSO_JOB": job.document,
        "PSO_OPERATION": operation,
        **trace_env(job.trace),
    }
    tail = {
        ENV_SOURCES: EnvSources.of(template.get("env", []), template.get("envFrom", [])).encode(),
        ENV_VARIABLE: str(workspace / SHARE / ".env"),
        **template_env(template, values),
    }
    cache = {"PSO_CACHE_DIR": str(caching.directory), "PSO_CACHE_LIMIT": str(caching.limit)}
    if caching.mirror:
        cache["PSO_PLUGIN_MIRROR"] = caching.mirror
    checkout = {**common, **secret_env(job.git_env, values), **tail}
    run = {**common, **cache, **secret_env(job.secret_env, values), **tail}
    return StepEnvs(checkout, run, frozenset(values.secrets))


def inherited(environ: Mapping[str, str], cli_dir: str) -> dict[str, str]:
    """The operator's allow-listed variables, the CLI's directory first on ``PATH``."""
    kept = {k: v for k, v in environ.items() if k in INHERITED_ENV and k != "TMPDIR"}
    kept["PATH"] = os.pathsep.join([cli_dir, *filter(None, [environ.get("PATH", "")])])
    kept.setdefault("PULUMI_SKIP_UPDATE_CHECK", "true")
    return kept


def secret_env(variables: Iterable[SecretEnv], values: Values) -> dict[str, str]:
    """The job's variables filled from their Secret keys."""
    return {v.env: str(values.secret(v.secret, v.key)) for v in variables}


def template_env(template: Mapping[str, Any], values: Values) -> dict[str, str]:
    """The workspaceTemplate's ``envFrom``, then its ``env`` over it (as the kubelet does)."""
    env: dict[str, str] = {}
    for source in template.get("envFrom", []):
        env |= _env_from(source, values)
    for entry in template.get("env", []):
        value = _env_value(entry, values)
        if value is not None:
            env[str(entry["name"])] = value
    return env


def _env_from(source: Mapping[str, Any], values: Values) -> dict[str, str]:
    prefix = str(source.get("prefix") or "")
    if "secretRef" in source:
        ref = source["secretRef"]
        data = values.secret_data(ref["name"], optional=bool(ref.get("optional")))
    elif "configMapRef" in source:
        ref = source["configMapRef"]
        data = values.config_map(ref["name"], None, optional=bool(ref.get("optional")))
    else:
        data = None
    return {f"{prefix}{k}": v for k, v in (data or {}).items()}


def _env_value(entry: Mapping[str, Any], values: Values) -> str | None:
    """A variable's value; None when it has none here (optional and missing, pod-only)."""
    if "value" in entry or "valueFrom" not in entry:
        return str(entry.get("value") or "")
    source = entry["valueFrom"]
    if "secretKeyRef" in source:
        ref = source["secretKeyRef"]
        return values.secret(ref["name"], ref["key"], optional=bool(ref.get("optional")))
    if "configMapKeyRef" in source:
        ref = source["configMapKeyRef"]
        found = values.config_map(ref["name"], ref["key"], optional=bool(ref.get("optional")))
        return None if found is None else str(found)
    return None  # fieldRef, resourceFieldRef: the pod's, not this machine's

"""The helm binary built by the test bed, run against one kubeconfig with its own home.

``Helm`` runs ``helm`` with every directory Helm writes to (cache, config, data: its
repositories, plugins and registry logins; ``$HOME`` too, for client-go's discovery cache)
under ``home``, so nothing lands in the user's
``~/.config`` or ``~/.cache``, and with ``--kubeconfig`` set explicitly (the caller's
``KUBECONFIG`` and ``HELM_*`` variables are ignored). Values are handed over in a file
(mode 0600) under ``home``, never on the command line, so a value that is a secret is not
visible in the process list.

Caller obligations: ``home`` is a directory the caller owns and removes; releases installed
with ``install`` are removed with ``uninstall`` (Helm's release Secrets live in the cluster).
"""

from __future__ import annotations

import itertools
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.assets import K8S_VERSION, find_built

Manifest = dict[str, Any]
DEFAULT_TIMEOUT = 120.0  # seconds for a helm command that does not wait for a rollout


class HelmError(RuntimeError):
    """helm exited non-zero; ``stderr`` holds its message (schema errors, lint findings)."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        """Keep helm's outputs; the message names the subcommand and quotes stderr."""
        super().__init__(f"helm {args[0] if args else ''} exited {returncode}: {stderr.strip()}")
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


def find_helm(*, build: bool = True) -> Path:
    """The test bed's helm binary (built from its Go module when missing and ``build``).

    Raises ``testbed.assets.AssetError`` when it is neither cached nor buildable.
    """
    return find_built("helm", build=build) / "helm"


@dataclass
class Helm:
    """helm with its own home, against ``kubeconfig`` (None: only offline commands work)."""

    binary: Path
    kubeconfig: Path | None
    home: Path
    # Capabilities.KubeVersion of offline renders and lint's deprecation checks: the test
    # bed's apiserver (helm's built-in default is the client-go version it was stamped with).
    kube_version: str = K8S_VERSION
    _values_files: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    def run(self, *args: str, timeout: float = DEFAULT_TIMEOUT) -> str:
        """Run ``helm args``; its stdout, or ``HelmError`` if it exits non-zero."""
        command = [str(self.binary), *args]
        if self.kubeconfig is not None:
            command += ["--kubeconfig", str(self.kubeconfig)]
        proc = subprocess.run(
            command,
            env=self._environment(),
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise HelmError(args, proc.returncode, proc.stdout, proc.stderr)
        return proc.stdout

    def lint(
        self, chart: Path, values: Mapping[str, Any] | None = None, *, strict: bool = False
    ) -> str:
        """``helm lint`` (``--strict``: warnings fail too); its report."""
        args = ["lint", str(chart), f"--kube-version={self.kube_version}"]
        args += self._values_args(values)
        return self.run(*args, *(["--strict"] if strict else []))

    def template(
        self,
        release: str,
        chart: Path,
        namespace: str,
        values: Mapping[str, Any] | None = None,
        *,
        include_crds: bool = False,
    ) -> list[Manifest]:
        """The objects ``helm template`` renders, parsed (empty documents dropped)."""
        args = ["template", release, str(chart), "--namespace", namespace]
        args += [f"--kube-version={self.kube_version}", *self._values_args(values)]
        if include_crds:
            args.append("--include-crds")
        return [doc for doc in yaml.safe_load_all(self.run(*args)) if doc]

    def install(
        self,
        release: str,
        chart: Path,
        namespace: str,
        values: Mapping[str, Any] | None = None,
        *,
        wait: bool = True,
        timeout: float = 300.0,
        create_namespace: bool = False,
    ) -> str:
        """``helm install``; with ``wait``, returns once every object is ready (Helm's --wait).

        Raises ``HelmError`` if the install fails or is not ready within ``timeout`` seconds.
        """
        args = ["install", release, str(chart), "--namespace", namespace]
        args += self._values_args(values)
        args += [f"--timeout={int(timeout)}s"]
        if wait:
            args.append("--wait")
        if create_namespace:
            args.append("--create-namespace")
        return self.run(*args, timeout=timeout + 60.0)

    def upgrade(
        self,
        release: str,
        chart: Path,
        namespace: str,
        values: Mapping[str, Any] | None = None,
        *,
        timeout: float = 300.0,
    ) -> str:
        """``helm upgrade --wait`` of an installed release: returns once it is ready again.

        Raises ``HelmError`` if the upgrade fails or is not ready within ``timeout`` seconds.
        As Helm does, it leaves the chart's ``crds/`` alone.
        """
        args = ["upgrade", release, str(chart), "--namespace", namespace, "--wait"]
        args += [*self._values_args(values), f"--timeout={int(timeout)}s"]
        return self.run(*args, timeout=timeout + 60.0)

    def uninstall(self, release: str, namespace: str, *, timeout: float = 300.0) -> str:
        """``helm uninstall --wait``: returns once the release's objects are gone."""
        args = ["uninstall", release, "--namespace", namespace, "--wait"]
        return self.run(*args, f"--timeout={int(timeout)}s", timeout=timeout + 60.0)

    def _values_args(self, values: Mapping[str, Any] | None) -> list[str]:
        """``--values <file>`` for ``values`` (nothing for None), the file private to us."""
        if values is None:
            return []
        directory = self.home / "values"
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = directory / f"values-{next(self._values_files)}.yaml"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(dict(values)))
        return ["--values", str(path)]

    def _environment(self) -> dict[str, str]:
        """The caller's environment without KUBECONFIG and HELM_*, Helm's homes under ours."""
        environ = {
            key: value
            for key, value in os.environ.items()
            if key != "KUBECONFIG" and not key.startswith("HELM_")
        }
        for kind in ("cache", "config", "data"):
            environ[f"HELM_{kind.upper()}_HOME"] = str(self.home / kind)
        # client-go's discovery cache (~/.kube/cache) and anything else keyed on $HOME.
        environ["HOME"] = str(self.home)
        return environ

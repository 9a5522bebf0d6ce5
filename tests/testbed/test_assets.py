"""``testbed.assets``' lookup and command line, with binaries named by the environment.

Nothing is built or run: every binary is a file the test makes, named by ``TEST_ASSET_*``,
so the lookup stops at step 1 and ``go`` is never needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.assets import (
    FLUX_SOURCE_CONTROLLER_MODULE,
    FLUX_SOURCE_CONTROLLER_VERSION,
    FLUX_SOURCE_CRDS,
    PULUMI_BINARIES,
    AssetError,
    find_built,
    find_flux_crds,
    find_kube_binary,
    find_pulumi,
    toolchain,
)
from testbed.assets.cli import main
from testbed.assets.lookup import RECIPES, env_name


def executable(path: Path) -> Path:
    """An empty executable file at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    path.chmod(0o755)
    return path


def pulumi_dir(root: Path, *, without: str = "") -> Path:
    """A directory with every one of PULUMI_BINARIES but ``without``."""
    for binary in PULUMI_BINARIES:
        if binary != without:
            executable(root / binary)
    return root


def test_env_names_follow_envtest() -> None:
    """Non-alphanumerics become underscores, letters upper case."""
    assert env_name("kube-apiserver") == "TEST_ASSET_KUBE_APISERVER"
    assert env_name(RECIPES["kubernetes"].name) == "TEST_ASSET_PULUMI_RESOURCE_KUBERNETES"


def test_an_explicit_binary_wins_and_must_be_executable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TEST_ASSET_ETCD`` is returned as it is; a non-executable one is an error naming it."""
    etcd = executable(tmp_path / "etcd")
    monkeypatch.setenv("TEST_ASSET_ETCD", str(etcd))
    assert find_kube_binary("etcd", build=False) == etcd
    etcd.chmod(0o644)
    with pytest.raises(AssetError, match=r"TEST_ASSET_ETCD=.* is not an executable file"):
        find_kube_binary("etcd", build=False)


def test_kubebuilder_assets_holds_the_control_plane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``TEST_ASSET_KUBECTL``, ``KUBEBUILDER_ASSETS/kubectl`` is used."""
    kubectl = executable(tmp_path / "kubectl")
    monkeypatch.delenv("TEST_ASSET_KUBECTL", raising=False)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert find_kube_binary("kubectl", build=False) == kubectl


def test_an_explicit_pulumi_needs_every_binary_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TEST_ASSET_PULUMI``'s directory is returned when complete, else the gap is named."""
    complete = pulumi_dir(tmp_path / "complete")
    monkeypatch.setenv("TEST_ASSET_PULUMI", str(complete / "pulumi"))
    assert find_pulumi(build=False) == complete
    partial = pulumi_dir(tmp_path / "partial", without="pulumi-language-go")
    monkeypatch.setenv("TEST_ASSET_PULUMI", str(partial / "pulumi"))
    with pytest.raises(AssetError, match="pulumi-language-go missing"):
        find_pulumi(build=False)


def test_an_optional_recipe_is_found_by_its_dir_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TEST_ASSET_HELM_DIR`` names helm's directory; nothing is looked up or built."""
    monkeypatch.setenv("TEST_ASSET_HELM_DIR", str(tmp_path))
    assert find_built("helm", build=False) == tmp_path


def test_flux_crds_are_read_from_the_module_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CRDs come from the source-controller's module; not cached and no download: error."""
    monkeypatch.setenv("PULUMI_STACK_OPERATOR_CACHE", str(tmp_path))
    with pytest.raises(AssetError, match="is not in the module cache"):
        find_flux_crds(download=False)
    module = f"{FLUX_SOURCE_CONTROLLER_MODULE}@v{FLUX_SOURCE_CONTROLLER_VERSION}"
    bases = tmp_path / "go" / "mod" / module / "config" / "crd" / "bases"
    bases.mkdir(parents=True)
    assert find_flux_crds(download=False) == tuple(bases / name for name in FLUX_SOURCE_CRDS)


def test_the_command_prints_one_line_per_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only ``export`` lines go to stdout (four, one per recipe ``--with`` names); logs: stderr."""
    for binary in ("etcd", "kube-apiserver", "kubectl"):
        monkeypatch.setenv(env_name(binary), str(executable(tmp_path / binary)))
    monkeypatch.setenv("TEST_ASSET_PULUMI", str(pulumi_dir(tmp_path / "pulumi") / "pulumi"))
    monkeypatch.setenv("TEST_ASSET_HELM_DIR", str(tmp_path / "helm"))

    assert main(["--no-build", "--print-env", "--with", "helm", "--with", "helm"]) == 0

    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"export TEST_ASSET_ETCD={tmp_path / 'etcd'}",
        f"export TEST_ASSET_KUBE_APISERVER={tmp_path / 'kube-apiserver'}",
        f"export TEST_ASSET_KUBECTL={tmp_path / 'kubectl'}",
        f"export TEST_ASSET_PULUMI={tmp_path / 'pulumi' / 'pulumi'}",
        f"export TEST_ASSET_HELM_DIR={tmp_path / 'helm'}",
    ]
    assert err.startswith("[test-assets] ready in ")


def test_the_command_fails_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An ``AssetError`` ends the command with 1 and its message on stderr."""
    monkeypatch.setenv("TEST_ASSET_ETCD", str(tmp_path / "absent"))
    monkeypatch.setenv("TEST_ASSET_PULUMI", str(pulumi_dir(tmp_path / "pulumi") / "pulumi"))
    for binary in ("kube-apiserver", "kubectl"):
        monkeypatch.setenv(env_name(binary), str(executable(tmp_path / binary)))

    assert main(["--no-build"]) == 1

    out, err = capsys.readouterr()
    assert out == ""
    assert (
        err
        == f"hack/test-assets: TEST_ASSET_ETCD={tmp_path / 'absent'} is not an executable file\n"
    )


def _fake_go(tmp_path: Path, failures: int, stderr: str) -> Path:
    """A ``go`` that fails ``failures`` times with ``stderr``, then prints ``ok``; its log."""
    calls = tmp_path / "calls"
    script = tmp_path / "bin" / "go"
    script.parent.mkdir()
    script.write_text(
        "#!/bin/sh\n"
        f'echo x >> "{calls}"\n'
        f'if [ "$(wc -l < "{calls}")" -le {failures} ]; then echo "{stderr}" >&2; exit 1; fi\n'
        "echo ok\n"
    )
    script.chmod(0o755)
    return calls


@pytest.mark.parametrize(
    ("stderr", "runs", "succeeds"),
    [
        ("dial tcp: lookup proxy.golang.org: i/o timeout", 2, True),
        ("go: module example.com/x: reading 504 Gateway Timeout", 2, True),
        ("go: example.com/x@v9: invalid version: unknown revision v9", 1, False),
    ],
    ids=["dns-timeout", "proxy-5xx", "not-the-network"],
)
def test_a_go_command_is_retried_only_when_the_network_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: str, runs: int, *, succeeds: bool
) -> None:
    """One network failure costs a retry, not the cold run; any other failure stops at once."""
    calls = _fake_go(tmp_path, 1, stderr)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    monkeypatch.setattr(toolchain, "RETRY_WAITS", (0.0, 0.0))
    go = toolchain.Go(cache=tmp_path / "cache", version="go1.26.8")
    if succeeds:
        assert go.run(["mod", "download"], tmp_path) == "ok\n"
    else:
        with pytest.raises(AssetError, match="unknown revision"):
            go.run(["mod", "download"], tmp_path)
    assert len(calls.read_text().splitlines()) == runs

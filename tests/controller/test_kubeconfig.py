"""A static kubeconfig is read as the client library reads it; any other goes to the library."""

from __future__ import annotations

import base64
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.config import kube_config
from kubernetes.config.config_exception import ConfigException

from controller import kubeconfig

CA, CERT, KEY = b"-- a CA --\n", b"-- a client certificate --\n", b"-- a client key --\n"
FIELDS = ("host", "verify_ssl", "tls_server_name", "proxy", "api_key")
FILES = ("ssl_ca_cert", "cert_file", "key_file")


def b64(data: bytes) -> str:
    """``data`` as a kubeconfig's ``-data`` field holds it."""
    return base64.b64encode(data).decode()


def a_kubeconfig(
    tmp_path: Path, cluster: dict[str, Any], user: dict[str, Any] | None, **extra: Any
) -> Path:
    """A kubeconfig whose current context is ``cluster`` and ``user`` (a decoy context too)."""
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "chosen",
        "contexts": [
            {"name": "decoy", "context": {"cluster": "other", "user": "other"}},
            {"name": "chosen", "context": {"cluster": "c", **({"user": "u"} if user else {})}},
        ],
        "clusters": [
            {"name": "other", "cluster": {"server": "https://other:1"}},
            {"name": "c", "cluster": cluster},
        ],
        "users": [{"name": "other", "user": {"token": "decoy"}}]
        + ([{"name": "u", "user": user}] if user else []),
        **extra,
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(document))
    return path


def by_library(path: Path, context: str | None = None) -> client.Configuration:
    """The configuration the client library's own loader makes of ``path``."""
    config: client.Configuration = type.__call__(client.Configuration)
    kube_config.load_kube_config(
        config_file=str(path), context=context, client_configuration=config
    )
    return config


def described(config: client.Configuration) -> dict[str, Any]:
    """The fields a connection uses; files by their content, not their (temporary) paths."""
    seen: dict[str, Any] = {field: getattr(config, field) for field in FIELDS}
    for field in FILES:
        path = getattr(config, field)
        seen[field] = Path(path).read_bytes() if path else None
    return seen


@pytest.fixture
def files(tmp_path: Path) -> Path:
    """The CA, certificate, key and a token as files in ``tmp_path/certs``."""
    folder = tmp_path / "certs"
    folder.mkdir()
    (folder / "ca.crt").write_bytes(CA)
    (folder / "client.crt").write_bytes(CERT)
    (folder / "client.key").write_bytes(KEY)
    (folder / "token").write_text("from-a-file")
    return folder


STATIC = {
    "client certificate as data": (
        {"server": "https://h:6443/", "certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
    ),
    "client certificate as files": (
        {"server": "https://h:6443", "certificate-authority": "certs/ca.crt"},
        {"client-certificate": "certs/client.crt", "client-key": "certs/client.key"},
    ),
    "token": ({"server": "https://h", "insecure-skip-tls-verify": True}, {"token": "abc"}),
    "token file": (
        {"server": "https://h", "tls-server-name": "api", "proxy-url": "http://p:3128"},
        {"tokenFile": "certs/token"},
    ),
    "token over token file": ({"server": "https://h"}, {"token": "", "tokenFile": "certs/token"}),
    "basic auth": ({"server": "https://h"}, {"username": "me", "password": "pw"}),
    "plain http, no user": ({"server": "http://h:8080"}, None),
    "empty data over a file": (
        {"server": "https://h", "certificate-authority-data": "", "certificate-authority": "x"},
        {},
    ),
}


@pytest.mark.parametrize(("cluster", "user"), STATIC.values(), ids=STATIC.keys())
def test_a_static_kubeconfig_reads_as_the_library_reads_it(
    tmp_path: Path, files: Path, cluster: dict[str, Any], user: dict[str, Any] | None
) -> None:
    """Same host, TLS settings, credentials and file contents, without the library's loader."""
    del files
    path = a_kubeconfig(tmp_path, cluster, user)

    assert described(kubeconfig.configuration(str(path))) == described(by_library(path))


def test_a_named_context_is_read_instead_of_the_current_one(tmp_path: Path) -> None:
    """``context`` picks its cluster and user, as the library's ``context`` does."""
    path = a_kubeconfig(tmp_path, {"server": "https://h"}, {"token": "t"})

    ours = kubeconfig.configuration(str(path), context="decoy")

    assert (ours.host, ours.api_key) == ("https://other:1", {"BearerToken": "Bearer decoy"})
    assert described(ours) == described(by_library(path, "decoy"))


def test_data_files_are_private_to_the_process(tmp_path: Path) -> None:
    """A key written out is readable by its owner only, in a folder only the owner enters."""
    path = a_kubeconfig(
        tmp_path,
        {"server": "https://h", "certificate-authority-data": b64(CA)},
        {"client-certificate-data": b64(CERT), "client-key-data": b64(KEY)},
    )

    key = Path(str(kubeconfig.configuration(str(path)).key_file))

    assert key.read_bytes() == KEY
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700


def test_data_files_are_removed_when_the_process_exits(tmp_path: Path) -> None:
    """The files written for ``-data`` fields and their folder go with the process."""
    path = a_kubeconfig(
        tmp_path, {"server": "https://h", "certificate-authority-data": b64(CA)}, None
    )
    program = (
        "from controller import kubeconfig; "
        f"print(kubeconfig.configuration({str(path)!r}).ssl_ca_cert)"
    )
    repo = str(Path(__file__).resolve().parents[2])
    written = subprocess.run(
        [sys.executable, "-c", program], check=True, capture_output=True, text=True, cwd=repo
    ).stdout.strip()

    assert written
    assert not Path(written).exists()
    assert not Path(written).parent.exists()


def test_an_exec_user_is_read_by_the_library(tmp_path: Path) -> None:
    """A credential plugin is the library's: its token, as the library gives it."""
    plugin = tmp_path / "plugin"
    plugin.write_text(
        "#!/bin/sh\n"
        'echo \'{"apiVersion": "client.authentication.k8s.io/v1", '
        '"kind": "ExecCredential", "status": {"token": "from-exec"}}\'\n'
    )
    plugin.chmod(0o755)
    exec_user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    path = a_kubeconfig(tmp_path, {"server": "https://h"}, exec_user)

    ours = kubeconfig.configuration(str(path))

    assert ours.api_key == {"BearerToken": "Bearer from-exec"}


def test_several_files_are_merged_by_the_library(tmp_path: Path) -> None:
    """``KUBECONFIG=a:b`` is the library's merge, as ``kubectl`` merges it."""
    first = a_kubeconfig(tmp_path, {"server": "https://h"}, {"token": "t"})
    second = tmp_path / "second"
    second.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config"}))

    ours = kubeconfig.configuration(f"{first}:{second}")

    assert (ours.host, ours.api_key) == ("https://h", {"BearerToken": "Bearer t"})


@pytest.mark.parametrize(
    ("content", "context", "named"),
    [
        ("current-context: gone\ncontexts: []\n", None, "no context named 'gone'"),
        (None, "nowhere", "no context named 'nowhere'"),
        ("[a list]", None, "not a mapping"),
        (": :\n", None, "Invalid kube-config file"),
    ],
    ids=["no current context", "no such context", "not a mapping", "not YAML"],
)
def test_a_bad_kubeconfig_raises_the_librarys_exception_naming_it(
    tmp_path: Path, content: str | None, context: str | None, named: str
) -> None:
    """Not YAML, not a mapping, or no such context: ``ConfigException`` naming the file."""
    path = a_kubeconfig(tmp_path, {"server": "https://h"}, {"token": "t"})
    if content is not None:
        path.write_text(content)

    with pytest.raises(ConfigException, match=named) as raised:
        kubeconfig.configuration(str(path), context=context)

    assert str(path) in str(raised.value)


def test_a_missing_certificate_file_is_named(tmp_path: Path) -> None:
    """A certificate file the kubeconfig names but that is not there is named."""
    cluster = {"server": "https://h", "certificate-authority": "gone.crt"}
    path = a_kubeconfig(tmp_path, cluster, {})

    with pytest.raises(ConfigException, match=r"File does not exist: .*gone\.crt"):
        kubeconfig.configuration(str(path))


def test_no_kubeconfig_and_no_service_account_reads_kubeconfig_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Outside a pod, ``$KUBECONFIG`` names the file (``~/.kube/config`` without it)."""
    path = a_kubeconfig(tmp_path, {"server": "https://from-variable"}, {"token": "t"})
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(path))

    api = kubeconfig.load_api_client(None)

    assert api.configuration.host == "https://from-variable"

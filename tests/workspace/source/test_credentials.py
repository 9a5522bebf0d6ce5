"""workspace.source.credentials: the environment handed to git, and credentials through it.

SSH is covered at the level of the environment handed to git (key file, GIT_SSH_COMMAND,
SSH_ASKPASS, clean-up), with the real OpenSSH client where one is installed; there is no
sshd in the test bed, so no SSH transfer is tested. HTTP credentials are tested against a
real smart HTTP server with basic authentication.
"""

from __future__ import annotations

import dataclasses
import secrets
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from testbed.git_http import Account
from tests.workspace.source.helpers import (
    OPERATIONS,
    SSH_KEYGEN,
    Repo,
    error_texts,
    operate,
    tree,
)
from workspace.source import (
    GitCredentials,
    SourceError,
    SourceFailure,
    checkout,
    git_environment,
    resolve_revision,
)
from workspace.source import credentials as source_credentials

# --- the environment handed to git ---------------------------------------------------------


def test_environment_is_isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The environment has a private HOME, no system config, no prompts, none of our secrets."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "agent.sock"))
    monkeypatch.setenv("GIT_DIR", "/somewhere")
    with git_environment(None) as env:
        home = Path(env["HOME"])
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert env["GIT_CONFIG_NOSYSTEM"] == "1"
        assert env["GIT_TERMINAL_PROMPT"] == "0"
        assert "file" not in env["GIT_ALLOW_PROTOCOL"].split(":")
        assert not {"AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "GIT_DIR"} & env.keys()
        ssh = shlex.split(env["GIT_SSH_COMMAND"])
        assert "BatchMode=yes" in ssh
        assert f"ConnectTimeout={source_credentials.SSH_CONNECT_TIMEOUT_SECONDS}" in ssh
        assert f"ServerAliveInterval={source_credentials.SSH_CONNECT_TIMEOUT_SECONDS}" in ssh
        config = {
            env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"]
            for i in range(int(env["GIT_CONFIG_COUNT"]))
        }
        assert config["http.lowSpeedTime"] == str(source_credentials.STALL_TIMEOUT_SECONDS)
        assert config["http.lowSpeedLimit"] == str(source_credentials.STALL_MIN_BYTES_PER_SECOND)
    assert not home.exists()


def test_http_askpass_answers_git_prompts(http_account: Account) -> None:
    """The GIT_ASKPASS script answers git's username and password prompts from the env."""
    credentials = GitCredentials(username=http_account.username, password=http_account.password)
    with git_environment(credentials) as env:
        askpass = env["GIT_ASKPASS"]
        assert http_account.password not in Path(askpass).read_text()

        def ask(prompt: str) -> str:
            return subprocess.run(
                [askpass, prompt], env=env, capture_output=True, text=True, check=True, timeout=10
            ).stdout

        assert ask("Username for 'http://127.0.0.1': ") == http_account.username + "\n"
        assert ask("Password for 'http://u@127.0.0.1': ") == http_account.password + "\n"
        assert "SSH_ASKPASS" not in env


def test_ssh_environment_writes_a_private_key_file_and_removes_it(ssh_key: tuple[str, str]) -> None:
    """The key is a 0600 file in a 0700 dir, used by GIT_SSH_COMMAND, deleted afterwards."""
    key, passphrase = ssh_key
    with git_environment(GitCredentials(ssh_private_key=key, ssh_passphrase=passphrase)) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        key_file = Path(command[command.index("-i") + 1])
        home = Path(env["HOME"])
        assert command[0] == "ssh"
        assert key_file.is_relative_to(home)
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        assert stat.S_IMODE(key_file.parent.stat().st_mode) == 0o700
        assert key_file.read_text() == key
        assert "IdentitiesOnly=yes" in command
        assert "StrictHostKeyChecking=accept-new" in command
        assert f"UserKnownHostsFile={home / '.ssh' / 'known_hosts'}" in command
        assert "BatchMode=no" in command  # the passphrase is read through SSH_ASKPASS
        assert passphrase not in env["GIT_SSH_COMMAND"]
        assert env["SSH_ASKPASS_REQUIRE"] == "force"
        assert passphrase not in Path(env["SSH_ASKPASS"]).read_text()
    assert not key_file.exists()
    assert not home.exists()


def test_ssh_key_without_a_passphrase_never_prompts() -> None:
    """Without a passphrase ssh runs in batch mode and no SSH_ASKPASS is configured."""
    with git_environment(GitCredentials(ssh_private_key="KEY")) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        assert "BatchMode=yes" in command
        assert "SSH_ASKPASS" not in env
        assert (Path(env["HOME"]) / ".ssh" / "id").read_text() == "KEY\n"


def test_ssh_environment_is_removed_when_the_body_raises() -> None:
    """The private HOME with the key goes away even when the git call fails."""
    homes: list[Path] = []

    def fail_inside() -> None:
        with git_environment(GitCredentials(ssh_private_key="KEY")) as env:
            homes.append(Path(env["HOME"]))
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert len(homes) == 1
    assert not homes[0].exists()


@pytest.mark.parametrize(
    ("given", "accepted"),
    [pytest.param(None, True, id="right-passphrase"), pytest.param("wrong", False, id="wrong")],
)
def test_openssh_reads_the_passphrase_through_askpass(
    ssh_key: tuple[str, str], tmp_path: Path, given: str | None, *, accepted: bool
) -> None:
    """Real OpenSSH decrypts the key file with the passphrase SSH_ASKPASS hands it."""
    key, passphrase = ssh_key
    credentials = GitCredentials(ssh_private_key=key, ssh_passphrase=given or passphrase)
    assert SSH_KEYGEN is not None
    with git_environment(credentials) as env:
        command = shlex.split(env["GIT_SSH_COMMAND"])
        key_file = command[command.index("-i") + 1]
        derived = subprocess.run(
            [SSH_KEYGEN, "-y", "-f", key_file],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
            start_new_session=True,  # no controlling terminal: askpass is the only way
        )
    public = (tmp_path / "id_test.pub").read_text().split()[:2]
    assert (derived.stdout.split()[:2] == public) is accepted


def test_git_credentials_repr_masks_every_value() -> None:
    """repr() says which fields are set and shows none of their values."""
    values = {
        "token": "t0ken",
        "username": "us3r",
        "password": "passw0rd",
        "ssh_private_key": "-----BEGIN KEY-----",
        "ssh_passphrase": "phr4se",
    }
    assert set(values) == {f.name for f in dataclasses.fields(GitCredentials)}
    text = repr(GitCredentials(**values))
    assert [v for v in values.values() if v in text] == []
    assert text.count("'***'") == len(values)
    assert repr(GitCredentials()).count("=None") == len(values)


# --- authentication against a real server ----------------------------------------------------


@pytest.mark.parametrize(
    "credentials", [pytest.param("basic_auth", id="basic"), pytest.param("token_auth", id="token")]
)
def test_http_authentication_succeeds(
    http_repo: Repo, tmp_path: Path, credentials: str, request: pytest.FixtureRequest
) -> None:
    """Basic and token credentials let resolve_revision and checkout through."""
    creds: GitCredentials = request.getfixturevalue(credentials)
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})

    assert resolve_revision(url, "main", creds) == tip
    assert checkout(url, tmp_path / "work", commit=tip, credentials=creds) == tip
    assert tree(tmp_path / "work") == {"a.txt": "1"}


@pytest.mark.parametrize(
    "kind",
    [
        pytest.param("password", id="wrong-password"),
        pytest.param("token", id="wrong-token"),
        pytest.param("none", id="no-credentials"),
    ],
)
@pytest.mark.parametrize("operation", OPERATIONS)
def test_wrong_credentials_are_refused_without_leaking(
    http_repo: Repo, http_account: Account, tmp_path: Path, kind: str, operation: str
) -> None:
    """Refused credentials are AuthenticationFailed, not transient, and never shown."""
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})
    secret = f"wrong-{secrets.token_hex(8)}"
    credentials = {
        "password": GitCredentials(username=http_account.username, password=secret),
        "token": GitCredentials(token=secret),
        "none": None,
    }[kind]

    with capture_logs() as logs, pytest.raises(SourceError) as caught:
        operate(operation, url, tmp_path / "work", credentials, commit=tip)

    assert (caught.value.reason, caught.value.transient) == (
        SourceFailure.AUTHENTICATION_FAILED,
        False,
    )
    assert secret not in error_texts(caught.value)
    assert secret not in repr(logs)


def test_credentials_are_never_on_a_command_line(
    http_repo: Repo,
    http_account: Account,
    token_auth: GitCredentials,
    ssh_key: tuple[str, str],
    tmp_path: Path,
    git_argv: list[list[str]],
) -> None:
    """No argv of any process started carries a password, token, passphrase or key."""
    url, upstream = http_repo
    tip = upstream.commit({"a.txt": "1"})
    key, passphrase = ssh_key
    basic = GitCredentials(
        username=http_account.username,
        password=http_account.password,
        ssh_private_key=key,
        ssh_passphrase=passphrase,
    )
    in_url = url.replace("://", f"://{http_account.username}:{http_account.password}@")
    git_argv.clear()  # the upstream commit above ran git too

    resolve_revision(url, "main", basic)
    checkout(url, tmp_path / "a", commit=tip, credentials=basic)
    checkout(url, tmp_path / "b", commit=tip, credentials=token_auth)
    checkout(in_url, tmp_path / "c", commit=tip)

    assert any(argv[:2] == ["git", "ls-remote"] for argv in git_argv)
    assert any(argv[:2] == ["git", "fetch"] for argv in git_argv)
    hidden = [http_account.password, token_auth.token, passphrase, *key.splitlines()[1:-1]]
    for argv in git_argv:
        assert not [s for s in hidden if s and any(s in arg for arg in argv)], argv


def test_user_git_configuration_is_ignored(
    git_repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A global gitconfig and inherited GIT_* variables do not reach git."""
    url, upstream = git_repo
    tip = upstream.commit({"a.txt": "1"})
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(f'[url "git://127.0.0.1:9/"]\n\tinsteadOf = {url}\n')
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / ".gitconfig"))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))

    assert resolve_revision(url, "main", None) == tip
    assert checkout(url, tmp_path / "work", commit=tip) == tip

"""Secrets stay out of messages, reprs and outputs: the ``Scrubber`` and what uses it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.workspace.runner.support import SECRET_VALUE, TOKEN_VALUE, ArgvSpy, run
from workspace.runner import ErrorKind, LocalRunner, UpdateRequest
from workspace.runner.scrub import Scrubber
from workspace.runner.types import MASK


@pytest.mark.pulumi
def test_secret_printed_by_a_failing_program_is_scrubbed(
    runner: LocalRunner, make_request: Callable[..., UpdateRequest], argv_spy: ArgvSpy
) -> None:
    """A program failing with a secret in its error never puts the secret in the outcome."""
    outcome = run(runner, make_request(secret_config={"fail": SECRET_VALUE}))

    assert outcome.error is ErrorKind.UPDATE_FAILED
    assert MASK in outcome.message  # the error did carry the secret
    assert SECRET_VALUE not in outcome.message
    assert SECRET_VALUE not in repr(outcome)
    assert argv_spy.proc_hits == []


def request(
    env: dict[str, str] | None = None,
    secret_config: dict[str, str] | None = None,
    secret_env: frozenset[str] | None = None,
) -> UpdateRequest:
    """A request with only what the scrubber reads."""
    return UpdateRequest(
        work_dir=Path("/nowhere"),
        stack="dev",
        env=env or {},
        secret_config=secret_config or {},
        secret_env=secret_env,
    )


def test_request_repr_hides_secret_values() -> None:
    """``repr`` of a request names env vars and secret keys but shows no values."""
    subject = request(env={"API_TOKEN": TOKEN_VALUE}, secret_config={"pw": SECRET_VALUE})

    text = repr(subject)

    assert "API_TOKEN" in text
    assert "pw" in text
    assert TOKEN_VALUE not in text
    assert SECRET_VALUE not in text
    assert str(subject) == text


def test_secret_config_and_suspect_env_values_are_scrubbed_longest_first() -> None:
    """Secret config and env values go, whole, also JSON-escaped; locations and flags stay."""
    scrubber = Scrubber(
        request(
            env={
                "TOKEN": "abcd",
                "LONGER": "abcd-efgh",
                "PATH": "/usr/bin:/bin",
                "PULUMI_BACKEND_URL": "file:///state",
                "FLAG": "true",
                "COUNT": "12345",
                "SHORT": "abc",
            },
            secret_config={"multi": 'line 1\nline "2"', "empty": ""},
        )
    )

    text = scrubber.scrub(
        'abcd-efgh abcd /usr/bin:/bin file:///state true 12345 abc "line 1\\nline \\"2\\""'
    )

    assert text == f'{MASK} {MASK} /usr/bin:/bin file:///state true 12345 abc "{MASK}"'


def test_a_backend_url_with_userinfo_is_secret() -> None:
    """``PULUMI_BACKEND_URL`` is a location unless it carries a user or password."""
    url = "s3://key:secret@bucket"

    assert Scrubber(request(env={"PULUMI_BACKEND_URL": url})).scrub(url) == MASK


def test_outputs_are_masked_when_secret_or_holding_a_secret_value() -> None:
    """An output is masked if marked secret, or if a secret value is anywhere inside it."""
    scrubber = Scrubber(request(secret_config={"pw": SECRET_VALUE}))

    assert scrubber.output({"nested": [f"x{SECRET_VALUE}x"]}, secret=False) == MASK
    assert scrubber.output("plain", secret=True) == MASK
    assert scrubber.output({"plain": [1, "x"]}, secret=False) == {"plain": [1, "x"]}
    assert not Scrubber(request()).finds(SECRET_VALUE)


HOST = "10.88.0.1"
REGISTRY = f"http://{HOST}:41771/"
KEY_DATA = "LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpNSUlFb3dJQkFBS0NBUUVB"
KUBECONFIG = f"""apiVersion: v1
clusters:
- cluster:
    server: https://{HOST}:6443
  name: node
contexts:
- context:
    cluster: gke_my-project_us-central1-a_prod
    user: admin
  name: gke_my-project_us-central1-a_prod
users:
- name: admin
  user:
    client-key-data: {KEY_DATA}
    token: "abcdef0123456789.abcdef0123456789"
"""


def pod_request() -> UpdateRequest:
    """A run pod's request: the kubeconfig as secret config, registries as plain env."""
    return request(
        env={
            "KUBERNETES_SERVICE_HOST": HOST,
            "NPM_CONFIG_REGISTRY": REGISTRY,
            "PULUMI_PLUGIN_MIRROR": f"{REGISTRY}plugins",
            "PIP_INDEX_URL": f"{REGISTRY}simple",
            "GITHUB_TOKEN": "plain-but-named-a-token",
            "DB_PASSWORD_FROM_SECRET": "hunter2-longer",
            "FROM_SECRET": "sekrit-value-1",
        },
        secret_config={"kubernetes:kubeconfig": KUBECONFIG},
        secret_env=frozenset({"FROM_SECRET"}),
    )


def test_a_failure_still_names_the_registry_mirror_and_package() -> None:
    """Plain env and fragments of a secret stay; the npm and plugin 404s read whole."""
    scrubber = Scrubber(pod_request())
    npm = f"npm error 404 Not Found - GET {REGISTRY}@pulumi%2fkubernetes - Not found"
    plugin = (
        f"error: 404 HTTP error fetching plugin from {REGISTRY}plugins/"
        "pulumi-resource-kubernetes-v4.18.0-linux-amd64.tar.gz"
    )
    pip = f"ERROR: No matching distribution found for pulumi (from {REGISTRY}simple/pulumi/)"
    dial = f"dial tcp {HOST}:6443: connect: connection refused"

    for message in (npm, plugin, pip, dial):
        assert scrubber.scrub(message) == message


def test_whole_secret_values_and_their_key_lines_are_masked() -> None:
    """The kubeconfig whole, its key material alone, Secret env and credential names."""
    scrubber = Scrubber(pod_request())

    assert scrubber.scrub(f"config: {KUBECONFIG}") == f"config: {MASK}"
    assert scrubber.scrub(f"bad key {KEY_DATA}!") == f"bad key {MASK}!"
    assert scrubber.scrub("token abcdef0123456789.abcdef0123456789") == f"token {MASK}"
    assert scrubber.scrub("sekrit-value-1 plain-but-named-a-token") == f"{MASK} {MASK}"
    assert scrubber.scrub("pw=hunter2-longer") == f"pw={MASK}"


def test_a_short_secret_is_masked_only_where_it_stands_alone() -> None:
    """A secret of a few characters does not garble the words and numbers that hold it."""
    scrubber = Scrubber(request(secret_config={"pin": "4711"}))

    assert scrubber.scrub("pin 4711, port 47110, id a4711") == f"pin {MASK}, port 47110, id a4711"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("clone https://user:pw@git.example/r.git", f"clone https://{MASK}@git.example/r.git"),
        ("s3://AKIDEXAMPLE@bucket/x", f"s3://{MASK}@bucket/x"),
        ("Authorization: Bearer abcdefghijkl.mnop", f"Authorization: Bearer {MASK}"),
        ("token pul-" + "0123456789" * 4 + " used", f"token {MASK} used"),
        ("ghp_" + "A1b2C3d4E5" * 4, MASK),
        ("key AKIAIOSFODNN7EXAMPLE set", f"key {MASK} set"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY----- after",
            f"{MASK} after",
        ),
        (
            "GET http://10.0.0.1:41771/@pulumi%2fpulumi",
            "GET http://10.0.0.1:41771/@pulumi%2fpulumi",
        ),
        ("npm ERR! git@github.com:org/repo.git", "npm ERR! git@github.com:org/repo.git"),
        ("cloning ssh://git@github.com/org/repo", "cloning ssh://git@github.com/org/repo"),
        ("Basic authentication is not supported", "Basic authentication is not supported"),
        ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {MASK}"),
    ],
)
def test_known_secret_shapes_are_masked_anywhere(text: str, expected: str) -> None:
    """URL userinfo, bearer credentials, PEM keys and token shapes, with no value known."""
    assert Scrubber(request(secret_env=frozenset())).scrub(text) == expected


def test_a_percent_encoded_secret_is_masked() -> None:
    """A secret as it appears in a URL (percent-encoded) goes too."""
    scrubber = Scrubber(request(secret_config={"pw": "p@ss/word#1"}))

    assert scrubber.scrub("https://h/?pw=p%40ss%2Fword%231") == f"https://h/?pw={MASK}"


def test_names_in_a_secret_kubeconfig_stay_readable() -> None:
    """Cluster, context and user names of a kubeconfig are not key material."""
    scrubber = Scrubber(pod_request())
    text = 'context "gke_my-project_us-central1-a_prod" does not exist'
    assert scrubber.scrub(text) == text


def test_a_flag_or_number_from_a_secret_does_not_garble_messages() -> None:
    """A Secret's env value that cannot be a secret (1, true) is not masked."""
    scrubber = Scrubber(
        request(env={"FLAG": "1", "ON": "true"}, secret_env=frozenset({"FLAG", "ON"}))
    )
    assert scrubber.scrub("exit code 1, verbose true") == "exit code 1, verbose true"


def test_an_output_with_a_plain_ssh_url_is_not_masked() -> None:
    """A non-secret output holding a user name in a URL is reported as it is."""
    scrubber = Scrubber(request(secret_env=frozenset()))
    url = "ssh://git@github.com/org/repo"
    assert scrubber.output(url, secret=False) == url


def test_scrubbed_text_is_plain_and_a_coloured_secret_is_still_masked() -> None:
    """Terminal codes go before masking: colours around or inside a secret do not hide it."""
    scrubber = Scrubber(request(secret_config={"pw": SECRET_VALUE}))
    half = len(SECRET_VALUE) // 2
    coloured = f"\x1b[31mError\x1b[0m: {SECRET_VALUE[:half]}\x1b[1m{SECRET_VALUE[half:]}\r\n"

    assert scrubber.scrub(coloured) == f"Error: {MASK}\n"


def test_an_output_with_control_characters_is_not_taken_for_a_secret() -> None:
    """Only secrets mask an output: a value with a colour code or NEL in it is reported."""
    scrubber = Scrubber(request(secret_config={"pw": SECRET_VALUE}))
    value = {"banner": "\x1b[32mok\x1b[0m", "line": "a\x85b"}

    assert scrubber.output(value, secret=False) == value

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
    env: dict[str, str] | None = None, secret_config: dict[str, str] | None = None
) -> UpdateRequest:
    """A request with only what the scrubber reads."""
    return UpdateRequest(
        work_dir=Path("/nowhere"), stack="dev", env=env or {}, secret_config=secret_config or {}
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

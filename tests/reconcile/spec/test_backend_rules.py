"""``reconcile.spec.backend_rules``: stack names, DIY organisations and secrets providers.

The cases shared with the CRD tests are in ``cases`` (``BACKEND``), judged by ``test_parse``.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.spec import SpecError, check_stack_for_backend, parse_spec
from tests.reconcile.spec.helpers import NS, assert_refused, base

# Stacks and providers that would only fail at run time (in the Pulumi CLI) are refused at once.
DOOMED = [
    pytest.param(
        base(stack="acme/dev", backend="s3://bucket/state?region=eu-west-1"),
        "spec.stack",
        "s3:// backend",
        id="stack-org-on-s3-backend",
    ),
    pytest.param(
        base(stack="acme/proj/dev", backend="/var/lib/pulumi"),
        "spec.stack",
        "local-path backend",
        id="stack-org-on-local-path",
    ),
    pytest.param(
        base(secretsProvider="gcpkms://"),
        "spec.secretsProvider",
        "unknown secrets provider",
        id="secrets-provider-empty-key",
    ),
    pytest.param(
        base(secretsProvider="Passphrase"),
        "spec.secretsProvider",
        "unknown secrets provider",
        id="secrets-provider-case",
    ),
]


@pytest.mark.parametrize(("spec", "path", "fragment"), DOOMED)
def test_spec_that_could_only_fail_at_run_time_is_refused(
    spec: Any, path: str, fragment: str
) -> None:
    """Config keys, stack names, secrets providers and sizes Pulumi would refuse are refused now."""
    assert_refused(spec, path, fragment)


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"stack": "organization/dev", "backend": "gs://b"}, id="diy-org-stack"),
        pytest.param({"stack": "dev", "backend": "azblob://c"}, id="diy-plain-stack"),
        pytest.param({"stack": "acme/proj/dev"}, id="backend-unset"),
        pytest.param({"secretsProvider": "passphrase"}, id="provider-passphrase"),
        pytest.param(
            {"secretsProvider": "awskms://alias/ExampleAlias?region=us-east-1"}, id="awskms"
        ),
        pytest.param(
            {"secretsProvider": "azurekeyvault://vault.vault.azure.net/keys/k"}, id="azure"
        ),
        pytest.param(
            {"secretsProvider": "gcpkms://projects/p/locations/l/keyRings/r/cryptoKeys/k"},
            id="gcpkms",
        ),
        pytest.param({"secretsProvider": "hashivault://mykey"}, id="hashivault"),
    ],
)
def test_specs_that_can_work_are_accepted(fields: dict[str, Any]) -> None:
    """Valid config keys, stack/backend pairs and secrets providers parse."""
    parse_spec(base(**fields), NS)


@pytest.mark.parametrize(
    ("stack", "backend", "fragment"),
    [
        pytest.param("acme/proj/dev", "file:///state", "file:// backend", id="file"),
        pytest.param("acme/proj/dev", "FILE:///state", "file:// backend", id="file-upper"),
        pytest.param("acme/dev", "gs://bucket", "use 'organization/dev' or 'dev'", id="gs-2"),
        pytest.param("acme/proj/dev", "azblob://c", "azblob:// backend", id="azblob"),
        pytest.param("acme/proj/dev", "~/state", "local-path backend", id="home-path"),
        pytest.param("acme/proj/dev", "./state", "local-path backend", id="relative-path"),
        pytest.param("dev", "file:///state", None, id="plain-stack"),
        pytest.param("organization/proj/dev", "s3://b", None, id="organization"),
        pytest.param("acme/proj/dev", "https://api.pulumi.com", None, id="cloud"),
        pytest.param("acme/proj/dev", "https://pulumi.example.com", None, id="self-hosted-cloud"),
        pytest.param("acme/proj/dev", None, None, id="cli-default"),
    ],
)
def test_check_stack_for_backend(stack: str, backend: str | None, fragment: str | None) -> None:
    """Only DIY backends restrict the organisation; the message names spec.stack, not the URL."""
    message = check_stack_for_backend(stack, backend)
    if fragment is None:
        assert message is None
        return
    assert message is not None
    assert message.startswith("spec.stack: organization 'acme' does not exist")
    assert fragment in message
    assert "state" not in message.replace("self-managed", "")


def test_stack_is_checked_against_the_backend_the_spec_names() -> None:
    """parse_spec applies check_stack_for_backend to spec.backend, with the same message."""
    spec = base(stack="acme/proj/dev", backend="file:///state")
    with pytest.raises(SpecError) as refused:
        parse_spec(spec, NS)
    assert str(refused.value) == check_stack_for_backend("acme/proj/dev", "file:///state")

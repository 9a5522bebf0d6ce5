"""``reconcile.spec.config``: keys Pulumi accepts, values as strings, sizes within budget.

The cases shared with the CRD tests are in ``cases`` (``CONFIG_AND_REFS``), judged by
``test_parse``.
"""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.spec import MAX_CONFIG_TOTAL_BYTES, MAX_CONFIG_VALUE_BYTES, parse_spec
from tests.reconcile.spec.helpers import NS, assert_refused, base, freeze, secret

# Config that would only fail at run time (in the Pulumi CLI) is refused at once.
DOOMED = [
    pytest.param(
        base(config={"aws:config:region": "v"}),
        "spec.config[aws:config:region]",
        "use aws:region",
        id="config-key-old-config-form",
    ),
    pytest.param(
        base(config={":region": "v"}),
        "spec.config[:region]",
        "empty namespace",
        id="config-ns-empty",
    ),
    pytest.param(
        base(config={"aws:": "v"}), "spec.config[aws:]", "empty namespace or name", id="config-name"
    ),
    pytest.param(
        base(secretsRef={"db:pw:x": secret()}),
        "spec.secretsRef[db:pw:x]",
        "at most one ':'",
        id="secret-config-key-two-colons",
    ),
    pytest.param(
        base(config={"big": "x" * (MAX_CONFIG_VALUE_BYTES + 1)}),
        "spec.config[big]",
        f"the value is {MAX_CONFIG_VALUE_BYTES + 1} bytes, more than {MAX_CONFIG_VALUE_BYTES}:"
        " move large data into the repository",
        id="config-value-too-big",
    ),
    pytest.param(
        base(config={"big": ["\u00e9" * (MAX_CONFIG_VALUE_BYTES // 2)]}),
        "spec.config[big]",
        "more than",
        id="config-structured-value-too-big-in-utf8",
    ),
    pytest.param(
        base(config={f"k{i}": "x" * MAX_CONFIG_VALUE_BYTES for i in range(8)}),
        "spec.config",
        f"more than {MAX_CONFIG_TOTAL_BYTES}",
        id="config-total-too-big",
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
        pytest.param({"config": {"region": "v", "aws:region": "v"}}, id="config-keys"),
        pytest.param({"config": {"app:url": "https://a/b?x=1:2"}}, id="colon-in-value"),
        pytest.param({"config": {"k": "x" * MAX_CONFIG_VALUE_BYTES}}, id="value-at-the-limit"),
    ],
)
def test_specs_that_can_work_are_accepted(fields: dict[str, Any]) -> None:
    """Valid config keys, stack/backend pairs and secrets providers parse."""
    parse_spec(base(**fields), NS)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("plain", "plain", id="string-unchanged"),
        pytest.param("", "", id="empty-string"),
        pytest.param(3, "3", id="integer"),
        pytest.param(1.5, "1.5", id="float"),
        pytest.param(True, "true", id="boolean"),
        pytest.param([1, "b"], '[1,"b"]', id="array"),
        pytest.param({"a": {"b": [True]}}, '{"a":{"b":[true]}}', id="object"),
    ],
)
def test_config_values_are_strings(value: object, expected: str) -> None:
    """Config strings pass through; other JSON values are JSON-encoded, even when frozen."""
    assert parse_spec(base(config={"k": value}), NS).config == {"k": expected}
    assert parse_spec(freeze(base(config={"k": value})), NS).config == {"k": expected}

"""Spec validation by the apiserver (schema and CEL rules), case by case of the shared table.

``tests.reconcile.spec.cases`` gives each spec two verdicts. Here, against a real apiserver:
what the CRD refuses is refused with the field path and our message, never repeating a URL's
token; what it accepts is stored unchanged (nothing pruned), and the parser then judges the
stored spec as the table says, so that what the CRD cannot type (config, workspaceTemplate)
or keeps on purpose (deprecated and unsupported PKO fields) still reaches the operator.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.control_plane import ControlPlane
from tests.reconcile.crd.helpers import apply_stack, get_stack
from tests.reconcile.spec.cases import CASES, TOKEN, Case, Refused, check_parser_verdict, each

pytestmark = pytest.mark.integration


@each(case for case in CASES if isinstance(case.apiserver, Refused))
def test_apiserver_rejects_invalid_spec(
    plane: ControlPlane, tmp_path: Path, namespace: str, case: Case
) -> None:
    """The apiserver refuses the spec with the field path and our message, never the token."""
    assert isinstance(case.apiserver, Refused)
    result = apply_stack(plane, tmp_path, namespace, case.spec)
    assert result.returncode != 0
    assert case.apiserver.path in result.stderr
    assert case.apiserver.message in " ".join(result.stderr.split())  # CEL messages wrap
    assert TOKEN not in result.stderr


@each(case for case in CASES if not isinstance(case.apiserver, Refused))
def test_apiserver_stores_spec_for_the_parser(
    plane: ControlPlane, tmp_path: Path, namespace: str, case: Case
) -> None:
    """The apiserver stores the spec unchanged; the parser judges the stored spec as the table."""
    spec = case.spec
    result = apply_stack(plane, tmp_path, namespace, spec)
    assert result.returncode == 0, result.stderr
    stored = get_stack(plane, namespace)["spec"]
    assert stored == spec
    check_parser_verdict(case, stored, namespace)

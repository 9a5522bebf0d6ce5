"""``controller.names``: the DNS-1123 label and subdomain rules, length limits included."""

from __future__ import annotations

import pytest

from controller.names import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX, is_dns_label, is_dns_subdomain

LABEL_CASES = [
    pytest.param("a", True, id="one-letter"),
    pytest.param("0", True, id="one-digit"),
    pytest.param("pulumi-cache", True, id="dash-inside"),
    pytest.param("1st-run", True, id="leading-digit"),
    pytest.param("a" * 63, True, id="63"),
    pytest.param("a" * 64, False, id="64"),
    pytest.param("", False, id="empty"),
    pytest.param("-a", False, id="leading-dash"),
    pytest.param("a-", False, id="trailing-dash"),
    pytest.param("Cache", False, id="upper-case"),
    pytest.param("a_b", False, id="underscore"),
    pytest.param("a.b", False, id="dot"),
    pytest.param("a b", False, id="space"),
    pytest.param("a\n", False, id="trailing-newline"),
    pytest.param("é", False, id="non-ascii"),
]

SUBDOMAIN_CASES = [
    pytest.param("default", True, id="label"),
    pytest.param("ci.runner-1", True, id="dots"),
    pytest.param("a.b.c", True, id="three-labels"),
    pytest.param("a" * 253, True, id="253"),
    pytest.param(".".join(["a" * 63] * 3 + ["a" * 61]), True, id="253-of-labels"),
    pytest.param("a" * 254, False, id="254"),
    pytest.param("", False, id="empty"),
    pytest.param(".a", False, id="leading-dot"),
    pytest.param("a.", False, id="trailing-dot"),
    pytest.param("a..b", False, id="empty-label"),
    pytest.param("a.-b", False, id="label-leading-dash"),
    pytest.param("a-.b", False, id="label-trailing-dash"),
    pytest.param("Not_A_Name", False, id="upper-and-underscore"),
    pytest.param("a/b", False, id="slash"),
    pytest.param("a\n", False, id="trailing-newline"),
]


def test_limits_are_kubernetes() -> None:
    """A DNS label has at most 63 characters, a DNS subdomain at most 253."""
    assert (DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX) == (63, 253)


@pytest.mark.parametrize(("name", "valid"), LABEL_CASES)
def test_dns_label(name: str, *, valid: bool) -> None:
    """A DNS label: lowercase letters, digits and -, alphanumeric at both ends, 63 at most."""
    assert is_dns_label(name) is valid


@pytest.mark.parametrize(("name", "valid"), SUBDOMAIN_CASES)
def test_dns_subdomain(name: str, *, valid: bool) -> None:
    """A DNS subdomain: DNS labels joined by dots, 253 characters at most."""
    assert is_dns_subdomain(name) is valid


@pytest.mark.parametrize(
    "name", [pytest.param(case.values[0], id=case.id) for case in LABEL_CASES if case.values[1]]
)
def test_every_label_is_a_subdomain(name: str) -> None:
    """A subdomain is labels joined by dots: every DNS label is a DNS subdomain."""
    assert is_dns_subdomain(name)


def test_a_label_longer_than_63_can_be_a_subdomain() -> None:
    """The two rules differ in length: 64 letters are a subdomain but not a label."""
    name = "a" * 64
    assert is_dns_subdomain(name)
    assert not is_dns_label(name)

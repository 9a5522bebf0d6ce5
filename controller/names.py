"""Kubernetes object names: the DNS-1123 label and subdomain rules, as predicates.

Role: the one definition of the two rules the apiserver applies to most object names, for
any controller to check a name before it reaches the apiserver (a flag, a field of a custom
resource):

- a **DNS label** (``DNS_LABEL_MAX`` characters at most): lowercase letters, digits and
  ``-``, starting and ending with a letter or digit; it names namespaces, volumes,
  containers...;
- a **DNS subdomain** (``DNS_SUBDOMAIN_MAX`` characters at most): DNS labels joined by
  ``.``; it names most objects (ServiceAccounts, Secrets, ConfigMaps, PersistentVolumeClaims,
  PriorityClasses...) and prefixes qualified keys (``example.com/team``).

Guarantees: each predicate is pure and total (any string in, a boolean out) and accepts
exactly what Kubernetes' rule of that name accepts, length limit included. Which rule a
field follows, and what to say when a name breaks it, is the caller's business.
"""

from __future__ import annotations

import re
from typing import Final

DNS_LABEL_MAX: Final = 63
"""The most characters a DNS label may have."""
DNS_SUBDOMAIN_MAX: Final = 253
"""The most characters a DNS subdomain may have."""

_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL: Final = re.compile(_LABEL)
_DNS_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*")


def is_dns_label(name: str) -> bool:
    """Whether ``name`` is a DNS label: at most 63 lowercase letters, digits and ``-``."""
    return len(name) <= DNS_LABEL_MAX and _DNS_LABEL.fullmatch(name) is not None


def is_dns_subdomain(name: str) -> bool:
    """Whether ``name`` is a DNS subdomain: DNS labels joined by ``.``, 253 characters at most."""
    return len(name) <= DNS_SUBDOMAIN_MAX and _DNS_SUBDOMAIN.fullmatch(name) is not None

"""Whether a Stack's ServiceAccount may run it: the account read from the API, judged.

Role: read the one ServiceAccount a due run would use (by name, never listed or watched)
and judge it with ``reconcile.tenancy.account_refusal``. Only runs in pods use a
ServiceAccount; the local runner skips this.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from kubernetes import client

from controller.coreapi import CoreApi
from controller.retry import with_retries
from reconcile.context import Settings
from reconcile.spec import StackSpec
from reconcile.tenancy import account_refusal


class AccountSource(Protocol):
    """Reads ServiceAccounts' labels."""

    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """The labels of ServiceAccount ``namespace/name``; None when it does not exist."""
        ...


class ServiceAccountReader:
    """``AccountSource`` through the API server: one GET per call, nothing cached."""

    def __init__(self, api_client: client.ApiClient) -> None:
        """Read through ``api_client``."""
        self._api = CoreApi(api_client)

    def labels(self, namespace: str, name: str) -> Mapping[str, str] | None:
        """See ``AccountSource``; transient API failures are retried in the call."""
        try:
            account = with_retries(self._api.read_namespaced_service_account, name, namespace)
        except client.ApiException as err:
            if err.status == 404:
                return None
            raise
        return dict(account.get("metadata", {}).get("labels") or {})


def refused_account(
    accounts: AccountSource | None, settings: Settings, namespace: str, spec: StackSpec
) -> str | None:
    """Why ``spec``'s ServiceAccount may not run it in ``namespace`` (None: it may).

    Nothing is read when no run uses a ServiceAccount (``accounts`` is None or runs are
    local) or when the operator's rules allow the name as it is.
    """
    name, tenancy = spec.service_account_name, settings.tenancy
    if accounts is None or not settings.runner_traits.in_pods or not tenancy.checks_accounts(name):
        return None
    labels = accounts.labels(namespace, name)
    return account_refusal(name, labels, namespace, tenancy, spec.service_account_field)

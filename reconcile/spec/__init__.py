"""Parse and validate a Stack's ``spec`` into frozen values the reconciler can trust.

Role: the one place that reads ``Stack.spec`` as the API returns it (plain ``dict``/``list``
from the client, or read-only ``MappingProxyType``/``tuple`` from the informer cache) and
turns it into a ``StackSpec``. Field names and meanings follow the Pulumi Kubernetes Operator
(PKO), so PKO manifests parse unchanged. Import from this package, not from its modules:

- ``model``: the values (``StackSpec``, ``GitAuth``, ``ResourceRef``...) and ``SpecError``;
- ``fields``: readers of one raw field, and the field paths errors name;
- ``parse``: ``parse_spec``, the assembly: known fields, the program source, periods, flags;
- ``config``, ``resource_refs``, ``repo_url``, ``backend_rules``, ``workspace``: one section
  each (``workspace``: ``serviceAccountName`` and ``workspaceTemplate``, for the pod runner,
  with ``volumes`` for its volumes and mounts, ``pod_metadata`` for its labels and
  annotations, and ``template_fields``, the readers they share);
- ``names``: names and keys (object names over ``controller.names``, labels, data keys,
  variables); ``durations``: Go duration strings.

Guarantees:

- ``parse_spec`` returns a fully validated ``StackSpec`` or raises ``SpecError``, whose message
  starts with the field path (``spec.gitAuth.basicAuth.password: ...``) and says what to do.
  A ``SpecError`` is terminal: it does not go away until the spec changes.
- The input is never mutated, and the result shares nothing mutable with it: mappings are
  read-only copies, sequences are tuples.
- Secret values are never read here: refs hold Secret names only, and ``repr`` masks literal
  values, so a ``StackSpec`` is safe to log.
- Empty strings, empty lists and ``null`` mean "unset", as Go's ``omitempty`` does for PKO.
- Refused on purpose: ``Env``/``FS`` refs (they read the operator's own environment and
  filesystem), cross-namespace Secret refs, PKO's deprecated fields (the error names the
  replacement), more than one program source (``projectRepo``, ``fluxSource``,
  ``programRef``), git fields beside a Flux source or a Program, the parts of
  ``workspaceTemplate`` that would weaken the run pod, and ``..`` in a source's directory (a
  leading ``/`` there means the source's root, as PKO reads it). The refusals by field name
  are public (``DEPRECATED_FIELDS``, ``REFUSED_REF_TYPES``, ``REFUSED_POD_FIELDS``,
  ``REFUSED_CONTAINER_FIELDS``; ``WORKSPACE_FIELDS``, ``POD_FIELDS``, ``CONTAINER_FIELDS``
  are the keys read), so that the docs' table of differences is checked against them.
- Refused because they could only fail at run time: a ``projectRepo`` git cannot or must not
  fetch (a scheme other than https, http, ssh, git or scp-like ``user@host:path``, a local
  path or ``file://``, a host or user starting with ``-``, credentials in the URL), a commit
  that is not a full SHA (40 or 64 hex digits), a ref that is not a branch, a config key
  Pulumi cannot parse, an unknown ``secretsProvider``, an organisation other than
  ``organization`` on a self-managed (DIY) ``backend``, config values over the size budget.
  Messages never repeat a URL's user information.

Left to others: reading Secrets (``reconcile.refs``), reaching the git remote, checking that
prerequisite Stacks exist, checking ``repoDir`` inside the checkout (``workspace.source``),
and checking ``stack`` against the operator's default backend when ``backend`` is unset
(``check_stack_for_backend``), and whether ``spec.environment`` can work on it
(``check_environments_for_backend``: Pulumi ESC needs a Pulumi Cloud backend).
"""

from reconcile.spec.backend_rules import (
    DIY_ORGANIZATION,
    SECRETS_PROVIDER_KINDS,
    check_environments_for_backend,
    check_stack_for_backend,
)
from reconcile.spec.config import MAX_CONFIG_TOTAL_BYTES, MAX_CONFIG_VALUE_BYTES
from reconcile.spec.durations import parse_go_duration
from reconcile.spec.model import (
    DEFAULT_RETRY_MAX_BACKOFF_SECONDS,
    DEFAULT_SERVICE_ACCOUNT,
    MIN_RESYNC_SECONDS,
    SERVICE_ACCOUNT_FIELDS,
    GitAuth,
    Prerequisite,
    ResourceRef,
    SecretKeyRef,
    SpecError,
    StackSpec,
    Workspace,
    referenced_config_maps,
    referenced_secrets,
)
from reconcile.spec.parse import DEPRECATED_FIELDS, SPEC_FIELDS, parse_spec
from reconcile.spec.resource_refs import REFUSED_REF_TYPES
from reconcile.spec.workspace import (
    CONTAINER_FIELDS,
    POD_FIELDS,
    REFUSED_CONTAINER_FIELDS,
    REFUSED_POD_FIELDS,
    WORKSPACE_FIELDS,
)

__all__ = [
    "CONTAINER_FIELDS",
    "DEFAULT_RETRY_MAX_BACKOFF_SECONDS",
    "DEFAULT_SERVICE_ACCOUNT",
    "DEPRECATED_FIELDS",
    "DIY_ORGANIZATION",
    "MAX_CONFIG_TOTAL_BYTES",
    "MAX_CONFIG_VALUE_BYTES",
    "MIN_RESYNC_SECONDS",
    "POD_FIELDS",
    "REFUSED_CONTAINER_FIELDS",
    "REFUSED_POD_FIELDS",
    "REFUSED_REF_TYPES",
    "SECRETS_PROVIDER_KINDS",
    "SERVICE_ACCOUNT_FIELDS",
    "SPEC_FIELDS",
    "WORKSPACE_FIELDS",
    "GitAuth",
    "Prerequisite",
    "ResourceRef",
    "SecretKeyRef",
    "SpecError",
    "StackSpec",
    "Workspace",
    "check_environments_for_backend",
    "check_stack_for_backend",
    "parse_go_duration",
    "parse_spec",
    "referenced_config_maps",
    "referenced_secrets",
]

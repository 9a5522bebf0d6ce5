"""The run pod's manifest: named after its Stack, restricted, Secrets only by reference."""

from __future__ import annotations

import json
from typing import Any

import pytest

from controller.tracing import TraceContext
from workspace.handover import KEEP_WARM_ENV
from workspace.runner import ENV_SOURCES, EnvSources, RunJob, SecretEnv
from workspace.runner.job import Owner, trace_env, trace_of
from workspace.runner.pod.spec import (
    AGENT_COMMAND,
    CHECKOUT_AND_RUN_ARGS,
    CHECKOUT_ARGS,
    DEFAULT_REQUESTS,
    WARM_LIFE,
    RunCaching,
    fit_key,
    is_warm,
    pod_name,
    references,
    run_pod,
    warm_eligible,
)


def job(**fields: Any) -> RunJob:
    """A job of Stack ``team/web`` generation 3, changed by ``fields``."""
    base: dict[str, Any] = {
        "namespace": "team",
        "owner": Owner("pulumi.com/v1", "Stack", "web", "uid-1"),
        "generation": 3,
        "commit": "c" * 40,
        "service_account": "deployer",
        "document": json.dumps({"stack": "dev"}),
        "secret_env": (SecretEnv("PSO_SECRET_0", "creds", "token"),),
        "timeout": 600.0,
    }
    return RunJob(**{**base, **fields})


GIT = (SecretEnv("PSO_GIT_0", "git", "token"),)
"""A job's git credentials: its pod checks out in an init container of its own."""


def manifest(**fields: Any) -> dict[str, Any]:
    """The ``up`` pod of ``job(**fields)`` with the default image."""
    return run_pod(job(**fields), "up", image="operator:1", grace=60)


def test_the_name_is_the_stacks_and_fits_a_hostname() -> None:
    """Deterministic per Stack; at most 63 characters; distinct for distinct long names."""
    assert pod_name("web") == "web-pulumi"
    long_a, long_b = "a" * 60 + "x", "a" * 60 + "y"
    assert len(pod_name(long_a)) <= 63
    assert pod_name(long_a) != pod_name(long_b)
    assert pod_name(long_a) == pod_name(long_a)


def test_the_pod_runs_the_agent_as_the_stacks_service_account() -> None:
    """SA, never restarted, owned by the Stack, labelled with its uid and generation."""
    pod = manifest()
    spec, metadata = pod["spec"], pod["metadata"]
    assert (metadata["name"], metadata["namespace"]) == ("web-pulumi", "team")
    assert spec["serviceAccountName"] == "deployer"
    assert spec["restartPolicy"] == "Never"
    assert spec["enableServiceLinks"] is False
    assert spec["activeDeadlineSeconds"] > 600
    assert metadata["ownerReferences"][0]["uid"] == "uid-1"
    assert metadata["annotations"]["pulumi-stack-operator.dev/generation"] == "3"
    assert metadata["labels"]["pulumi-stack-operator.dev/stack-uid"] == "uid-1"
    [container] = spec["containers"]
    assert container["command"] == [*AGENT_COMMAND, *CHECKOUT_AND_RUN_ARGS]
    assert container["image"] == "operator:1"
    assert "initContainers" not in spec, "no credentials to keep from the program"


@pytest.mark.parametrize(
    "fields",
    [
        {"git_env": GIT},
        {"overrides": json.dumps({"initContainers": [{"name": "mine", "image": "busybox"}]})},
        {"image": "mine:2"},
    ],
    ids=["git-credentials", "own-init-containers", "own-image"],
)
def test_a_checkout_apart_is_an_init_container_and_the_run_only_runs(fields: Any) -> None:
    """Credentials, the Stack's init containers or its own image: the checkout goes first."""
    spec = manifest(**fields)["spec"]
    checkout = spec["initContainers"][0]
    assert (checkout["name"], checkout["command"]) == ("checkout", [*AGENT_COMMAND, *CHECKOUT_ARGS])
    [container] = spec["containers"]
    assert container["command"] == list(AGENT_COMMAND)


def test_restricted_by_default_baseline_on_request() -> None:
    """Restricted: non-root, no escalation, no capabilities, seccomp, read-only root.

    Baseline: root and a writable root filesystem, and still no capabilities.
    """
    pod = manifest()
    [container] = pod["spec"]["containers"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/workspace", "/tmp"} <= mounts  # noqa: S108 - the pod's own emptyDir
    baseline = manifest(security_profile="baseline")
    assert "runAsNonRoot" not in baseline["spec"]["securityContext"]
    assert baseline["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert baseline["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_secret_values_come_by_reference() -> None:
    """Each Secret key is a secretKeyRef variable; the job's document is a plain value."""
    [container] = manifest()["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["PSO_SECRET_0"]["valueFrom"] == {"secretKeyRef": {"name": "creds", "key": "token"}}
    assert env["PSO_JOB"]["value"] == json.dumps({"stack": "dev"})
    assert env["PSO_OPERATION"]["value"] == "up"


@pytest.mark.parametrize(
    ("overrides", "check"),
    [
        ({"nodeSelector": {"pool": "pulumi"}}, lambda p: p["spec"]["nodeSelector"]),
        (
            {"resources": {"limits": {"memory": "1Gi"}}},
            lambda p: {"limits": p["spec"]["containers"][0]["resources"]["limits"]},
        ),
        ({"env": [{"name": "A", "value": "1"}]}, lambda p: p["spec"]["containers"][0]["env"][-1:]),
        ({"labels": {"team": "a"}}, lambda p: {"team": p["metadata"]["labels"]["team"]}),
    ],
)
def test_the_workspace_template_is_applied(overrides: dict[str, Any], check: Any) -> None:
    """What the Stack's workspaceTemplate sets reaches the pod."""
    [value] = overrides.values()
    assert check(manifest(overrides=json.dumps(overrides))) == value


def requests_of(pod: dict[str, Any]) -> list[dict[str, str] | None]:
    """The resource requests of the checkout and run containers, in that order."""
    containers = [pod["spec"]["initContainers"][0], pod["spec"]["containers"][0]]
    return [c.get("resources", {}).get("requests") for c in containers]


def test_a_run_requests_the_defaults_for_what_its_stack_leaves_unset() -> None:
    """No resources: both containers request the defaults; the pod is Burstable, unlimited."""
    pod = manifest(git_env=GIT)
    assert requests_of(pod) == [dict(DEFAULT_REQUESTS)] * 2
    alone = manifest()["spec"]["containers"][0]
    assert alone["resources"]["requests"] == dict(DEFAULT_REQUESTS)
    assert "limits" not in pod["spec"]["containers"][0]["resources"]


@pytest.mark.parametrize(
    ("resources", "requested"),
    [
        ({"requests": {"cpu": "2"}}, {"cpu": "2", "memory": "256Mi"}),
        # A limit alone: Kubernetes requests as much, so no default may exceed it.
        ({"limits": {"memory": "128Mi"}}, {"cpu": "100m"}),
        ({"requests": {"cpu": "1", "memory": "1Gi"}}, {"cpu": "1", "memory": "1Gi"}),
        (
            {"limits": {"cpu": "1", "memory": "1Gi"}},
            None,
        ),
    ],
    ids=["cpu-requested", "memory-limited", "both-requested", "both-limited"],
)
def test_a_stacks_own_requests_and_limits_win_key_by_key(
    resources: dict[str, Any], requested: dict[str, str] | None
) -> None:
    """Each resource the template requests or limits is its own; the rest get the defaults."""
    pod = manifest(overrides=json.dumps({"resources": resources}), git_env=GIT)
    assert requests_of(pod) == [requested] * 2
    assert pod["spec"]["containers"][0]["resources"].get("limits") == resources.get("limits")


def test_the_operator_may_set_other_defaults_or_none() -> None:
    """``requests``: the operator's own defaults; empty: no resources at all (LimitRange's)."""
    mine = run_pod(job(git_env=GIT), "up", image="operator:1", grace=60, requests={"memory": "1Gi"})
    assert requests_of(mine) == [{"memory": "1Gi"}] * 2
    none = run_pod(job(), "up", image="operator:1", grace=60, requests={})
    assert all("resources" not in c for c in none["spec"]["containers"])


def test_the_template_cannot_take_over_the_runners_labels_or_image() -> None:
    """The runner's labels win over the template's; the Stack's own image wins the default."""
    pod = manifest(
        overrides=json.dumps({"labels": {"pulumi-stack-operator.dev/stack-uid": "other"}}),
        image="mine:2",
    )
    assert pod["metadata"]["labels"]["pulumi-stack-operator.dev/stack-uid"] == "uid-1"
    assert pod["spec"]["containers"][0]["image"] == "mine:2"


def test_only_the_checkout_container_has_the_git_credentials() -> None:
    """The init container checks out with PSO_GIT_*; the program's container never has them."""
    pod = manifest(git_env=GIT)
    [checkout] = pod["spec"]["initContainers"]
    [container] = pod["spec"]["containers"]
    assert checkout["command"] == [*AGENT_COMMAND, "checkout"]
    assert checkout["securityContext"] == container["securityContext"]
    names = {e["name"] for e in checkout["env"]}
    assert "PSO_GIT_0" in names
    assert "PSO_SECRET_0" not in names
    assert "PSO_GIT_0" not in {e["name"] for e in container["env"]}


def test_the_namespaces_cache_claim_is_mounted_into_the_run_container_only() -> None:
    """With the claim: a volume, the run container's mount, and the agent told where."""
    caching = RunCaching(claim="pulumi-cache", limit=5 * 1024**3, mirror="http://mirror.example")
    pod = run_pod(
        job(git_env=GIT), "up", image="operator:1", grace=60, caching=caching, cached=True
    )
    spec = pod["spec"]
    assert {"name": "pulumi-cache", "persistentVolumeClaim": {"claimName": "pulumi-cache"}} in (
        spec["volumes"]
    )
    [container] = spec["containers"]
    assert {"name": "pulumi-cache", "mountPath": "/pulumi-cache"} in container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PSO_CACHE_DIR"] == "/pulumi-cache"
    assert env["PSO_CACHE_LIMIT"] == str(5 * 1024**3)
    assert env["PSO_PLUGIN_MIRROR"] == "http://mirror.example"
    [checkout] = spec["initContainers"]
    assert all(m["name"] != "pulumi-cache" for m in checkout["volumeMounts"])


def test_without_the_claim_the_pod_caches_in_its_own_workspace() -> None:
    """No claim in the namespace (or none configured): no volume, no PSO_CACHE_DIR."""
    for caching, cached in ((RunCaching(), False), (RunCaching(claim=""), True)):
        pod = run_pod(job(), "up", image="operator:1", grace=60, caching=caching, cached=cached)
        [container] = pod["spec"]["containers"]
        names = {e["name"] for e in container["env"]}
        assert "PSO_CACHE_DIR" not in names
        assert "PSO_PLUGIN_MIRROR" not in names
        assert all(v["name"] != "pulumi-cache" for v in pod["spec"]["volumes"])


def test_the_agent_is_told_which_template_variables_come_from_secrets() -> None:
    """``PSO_ENV_SOURCES``: secretKeyRef names, plain names, envFrom Secret prefixes."""
    secret_ref = {"secretKeyRef": {"name": "db", "key": "pw"}}
    config_ref = {"configMapKeyRef": {"name": "cm", "key": "k"}}
    template = {
        "env": [
            {"name": "NPM_CONFIG_REGISTRY", "value": "http://mirror:41771/"},
            {"name": "DB_PASSWORD", "valueFrom": secret_ref},
            {"name": "REGION", "valueFrom": config_ref},
        ],
        "envFrom": [
            {"secretRef": {"name": "aws"}, "prefix": "AWS_"},
            {"configMapRef": {"name": "c"}},
        ],
    }
    pod = manifest(overrides=json.dumps(template))

    [container] = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    sources = EnvSources.decode(env[ENV_SOURCES])
    assert sources == EnvSources(
        secret=frozenset({"DB_PASSWORD"}),
        plain=frozenset({"NPM_CONFIG_REGISTRY", "REGION"}),
        secret_prefixes=frozenset({"AWS_"}),
    )


@pytest.mark.parametrize("text", [None, "", "[1]", "{", '{"secret": 3}'])
def test_unreadable_sources_read_as_unknown(text: str | None) -> None:
    """An absent or garbled variable means "not known", never "nothing is secret"."""
    assert EnvSources.decode(text) is None


def test_an_envfrom_secret_covers_its_prefix_but_not_the_pods_own_variables() -> None:
    """Prefixed names are secret unless env set them or the kubelet or agent did."""
    sources = EnvSources(plain=frozenset({"SET_PLAIN"}), secret_prefixes=frozenset({""}))
    environ = {
        "SET_PLAIN": "http://x",
        "FROM_SECRET": "value-1",
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "HOSTNAME": "web-pulumi",
        "FLAG": "true",
    }

    assert sources.secret_names(environ) == {"FROM_SECRET"}


def test_the_stacks_init_containers_run_after_the_checkout_hardened_with_pulumi_env() -> None:
    """PKO's issue-937 shape: its image and command, the runner's security, ``$PULUMI_ENV``.

    The pod has the ``share`` volume the file is on; a container mounting it itself (as
    PKO's example does) is not given a second mount.
    """
    extra = {
        "name": "extra",
        "image": "busybox",
        "command": ["sh", "-c", "echo 'PULUMI_CONFIG_PASSPHRASE=test' > /share/.env"],
        "volumeMounts": [{"name": "share", "mountPath": "/share"}],
    }
    second = {"name": "second", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
    pod = manifest(overrides=json.dumps({"initContainers": [extra, second]}))
    spec = pod["spec"]
    checkout, mine, other = spec["initContainers"]
    assert checkout["name"] == "checkout"
    assert (mine["image"], mine["command"]) == (extra["image"], extra["command"])
    for container in (mine, other, spec["containers"][0]):
        assert {"name": "PULUMI_ENV", "value": "/share/.env"} in container["env"]
        mounts = [m for m in container["volumeMounts"] if m["name"] == "share"]
        assert mounts == [{"name": "share", "mountPath": "/share"}]
    for container in (mine, other):
        assert container["securityContext"] == spec["containers"][0]["securityContext"]
        assert not any(e["name"].startswith("PSO_") for e in container["env"])
    assert {"name": "share", "emptyDir": {}} in spec["volumes"]


def test_a_stacks_own_share_volume_is_the_one_used() -> None:
    """A volume named ``share`` in the template replaces the runner's emptyDir."""
    claim = {"name": "share", "persistentVolumeClaim": {"claimName": "shared"}}
    spec = manifest(overrides=json.dumps({"volumes": [claim]}))["spec"]
    assert [v for v in spec["volumes"] if v["name"] == "share"] == [claim]


def test_a_traced_run_hands_its_context_to_the_agent() -> None:
    """The job's trace context: two plain variables of the run container, and none without."""
    trace = TraceContext("00-" + "a" * 32 + "-" + "b" * 16 + "-01", "grpc://collector:4317")
    [container] = manifest(trace=trace)["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert trace_of(env) == trace
    [untraced] = manifest()["spec"]["containers"]
    assert trace_of({e["name"]: e.get("value") for e in untraced["env"]}) is None
    assert trace_env(None) == {}


# -- warm run pods (--run-pod-keep-warm) ---------------------------------------------------


def warm(**fields: Any) -> dict[str, Any]:
    """The ``up`` pod of ``job(**fields)`` kept warm for 30 s."""
    return run_pod(job(**fields), "up", image="operator:1", grace=60, keep_warm=30)


def test_a_warm_pods_agent_is_told_its_window_and_lives_long_enough() -> None:
    """PSO_KEEP_WARM on the run container; the deadline allows WARM_LIFE past the run's."""
    cold, kept = manifest(), warm()
    env = {e["name"]: e.get("value") for e in kept["spec"]["containers"][0]["env"]}
    assert env[KEEP_WARM_ENV] == "30"
    assert is_warm(kept)
    assert not is_warm(cold)
    deadline = kept["spec"]["activeDeadlineSeconds"]
    assert deadline == cold["spec"]["activeDeadlineSeconds"] + WARM_LIFE


@pytest.mark.parametrize(
    "fields",
    [
        {"git_env": GIT},
        {"overrides": json.dumps({"initContainers": [{"name": "mine", "image": "busybox"}]})},
        {"image": "mine:2"},
        {"reclaim": "Retain"},
    ],
    ids=["git-credentials", "init-containers", "own-image", "retain"],
)
def test_only_a_pod_that_checks_out_itself_is_kept_warm(fields: dict[str, Any]) -> None:
    """Credentials live in a checkout container; init containers would not run again."""
    assert not warm_eligible(job(**fields))
    assert not is_warm(warm(**fields))
    assert warm_eligible(job())


def test_the_fit_key_ignores_what_differs_between_runs() -> None:
    """Generation, commit, operation, deadline, the job and its trace: the same key."""
    versions = {"secret/creds": "7"}
    first = run_pod(job(), "up", image="operator:1", grace=60, keep_warm=30)
    trace = TraceContext(traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01", endpoint="h:1")
    later = job(
        generation=4,
        commit="d" * 40,
        document=json.dumps({"stack": "dev", "config": {"x": "2"}}),
        timeout=60.0,
        trace=trace,
    )
    second = run_pod(later, "destroy", image="operator:1", grace=60, keep_warm=30)
    assert fit_key(first, versions) == fit_key(second, versions)


@pytest.mark.parametrize(
    "change",
    [
        {"versions": {"secret/creds": "8"}},
        {"fields": {"service_account": "other"}},
        {"fields": {"secret_env": (SecretEnv("PSO_SECRET_0", "creds", "other-key"),)}},
        {"fields": {"overrides": json.dumps({"env": [{"name": "A", "value": "1"}]})}},
        {"fields": {"overrides": json.dumps({"annotations": {"team": "b"}})}},
        {"image": "operator:2"},
    ],
    ids=["secret-changed", "account", "secret-key", "template-env", "annotation", "image"],
)
def test_the_fit_key_changes_with_what_a_running_pod_cannot(change: dict[str, Any]) -> None:
    """A Secret's new version, the account, the env, the pod's metadata, the image."""
    versions = {"secret/creds": "7"}
    base = fit_key(warm(), versions)
    pod = run_pod(
        job(**change.get("fields", {})),
        "up",
        image=change.get("image", "operator:1"),
        grace=60,
        keep_warm=30,
    )
    assert fit_key(pod, change.get("versions", versions)) != base


def test_the_references_are_every_secret_and_config_map_the_pod_reads() -> None:
    """secretKeyRef, configMapKeyRef, envFrom, secret, configMap and projected volumes."""
    template = {
        "env": [{"name": "C", "valueFrom": {"configMapKeyRef": {"name": "cm1", "key": "k"}}}],
        "envFrom": [{"secretRef": {"name": "s2"}}, {"configMapRef": {"name": "cm2"}}],
        "volumes": [
            {"name": "v1", "secret": {"secretName": "s3"}},
            {"name": "v2", "configMap": {"name": "cm3"}},
            {"name": "v3", "projected": {"sources": [{"secret": {"name": "s4"}}]}},
        ],
        "volumeMounts": [{"name": "v1", "mountPath": "/v1"}],
    }
    pod = run_pod(job(overrides=json.dumps(template)), "up", image="operator:1", grace=60)
    assert references(pod) == [
        "configmap/cm1",
        "configmap/cm2",
        "configmap/cm3",
        "secret/creds",
        "secret/s2",
        "secret/s3",
        "secret/s4",
    ]

# The operator's image: the operator's wheel and its dependencies in a virtualenv, the
# Pulumi CLI with the language hosts of Python, Node.js (JavaScript, TypeScript), YAML and
# Go programs, Node.js with npm and corepack, uv, git and ssh for sources; non-root (uid
# 65532). No Go toolchain (a Go program needs an image of its own, or a prebuilt binary).
#
#   docker build -t pulumi-stack-operator --build-arg REVISION="$(git rev-parse HEAD)" .
#   (arm64: --build-arg PULUMI_ARCH=arm64)
#
# hack/build-image (make image) builds it without a registry: podman or docker, a Debian
# base made with mmdebstrap, a Node.js stage made from the host's Node.js, the test bed's
# Pulumi CLI served on loopback.
#
# Writable paths: PSO_WORK_DIR (checkouts, each Stack's PULUMI_HOME and HOME, the shared
# plugin store; also the operator's HOME) and /tmp. With a read-only root filesystem, mount
# an emptyDir on both. Programs' dependencies (node_modules, a virtualenv per program) and
# the package managers' download caches go to the operator's dependency cache: in
# PSO_WORK_DIR (its .cache) for the local runner, on the namespace's cache claim or in the
# pod's workspace for run pods; corepack's yarn and pnpm under the Stack's HOME.
# tests/hack/test_dockerfile.py lints this file with hadolint and replays its install steps.

# The base of every stage. Another base must be Debian-like (apt-get, useradd) with
# python3 and its venv module, and glibc and libstdc++ for node; hack/build-image builds
# one with mmdebstrap.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The builder stage's base: PYTHON_IMAGE, or an image built on it with what reaching the
# package index needs (e.g. a proxy's CA bundle), which then stays out of the image.
ARG BUILDER_IMAGE=${PYTHON_IMAGE}
# Node.js for JavaScript and TypeScript programs (@pulumi/pulumi needs node >= 20; Debian
# bookworm's is 18): node, npm and corepack are copied from /usr/local of this image, laid
# out as the official node images lay it out. hack/build-image makes one from the host's.
ARG NODE_IMAGE=node:20-bookworm-slim
# Keep in step with PULUMI_VERSION in testbed/assets/pulumi.py: the CLI the tests run.
ARG PULUMI_VERSION=3.274.1
# x64 or arm64, as the release archives are named.
ARG PULUMI_ARCH=x64
ARG PULUMI_URL=https://get.pulumi.com/releases/sdk/pulumi-v${PULUMI_VERSION}-linux-${PULUMI_ARCH}.tar.gz
ARG PULUMI_CHECKSUMS_URL=https://get.pulumi.com/releases/sdk/pulumi-${PULUMI_VERSION}-checksums.txt
# uv (PyPI), for Python programs whose Pulumi.yaml says `toolchain: uv`. No poetry.
ARG UV_VERSION=0.13.9

# -- Node.js: only copied from (see NODE_IMAGE) --------------------------------------------
FROM ${NODE_IMAGE} AS node

# -- the operator: its wheel, installed with its dependencies into /opt/venv -------------
FROM ${BUILDER_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
# The venv keeps its pip: the Python language host runs `python -m pip list` in it to find
# the plugins a program needs. The dependencies first, from pyproject.toml alone, so that a
# change to the operator's code (or the README) reuses their layer.
# The Kubernetes client's asyncio half (kubernetes.aio: two thirds of the package, 66 MB
# with its bytecode) is removed: nothing the operator runs imports it.
COPY pyproject.toml ./
RUN python -m venv /opt/venv \
    && python -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
        > /tmp/requirements.txt \
    && /opt/venv/bin/pip install --requirement /tmp/requirements.txt \
    && /opt/venv/bin/python -c 'import kubernetes, pathlib, shutil; shutil.rmtree(pathlib.Path(kubernetes.__file__).parent / "aio", ignore_errors=True)'
# uv's wheel is its two binaries: installed beside the venv, not into it, and copied alone.
ARG UV_VERSION
RUN /opt/venv/bin/pip install --no-deps --target /opt/uv "uv==${UV_VERSION}" \
    && /opt/uv/bin/uv --version
COPY README.md ./
COPY controller/ controller/
COPY workspace/ workspace/
COPY reconcile/ reconcile/
COPY status/ status/
COPY pulumi_stack_operator/ pulumi_stack_operator/
RUN /opt/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/venv/bin/pip install --no-deps /wheels/*.whl \
    && /opt/venv/bin/pip check

# -- the Pulumi CLI's release archive and checksums, fetched in a stage of their own so
# that the URLs (build arguments) do not change the cache keys of the steps after them --
FROM scratch AS download
ARG PULUMI_URL
ARG PULUMI_CHECKSUMS_URL
# Both sources are URLs (hadolint sees only the ARG names); the checksum is verified below.
# hadolint ignore=DL3020
ADD ${PULUMI_URL} /download/pulumi.tar.gz
# hadolint ignore=DL3020
ADD ${PULUMI_CHECKSUMS_URL} /download/checksums.txt

# -- the Pulumi CLI, its language hosts and plugins, from the release archive -------------
FROM ${PYTHON_IMAGE} AS pulumi
ARG PULUMI_VERSION
ARG PULUMI_ARCH
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /download
COPY --from=download /download/ ./
# The CLI and the Python plugins must be in the archive. The hosts of the runtimes this
# image has (Node.js, YAML; Go for prebuilt binaries) and the Node.js dynamic provider are
# taken when it has them: a release archive has them all, the test bed's those it builds.
# The .NET and Java hosts and the policy analyzers are left out.
RUN awk -v archive="pulumi-v${PULUMI_VERSION}-linux-${PULUMI_ARCH}.tar.gz" \
        '$2 == archive { print $1 "  pulumi.tar.gz" }' checksums.txt | sha256sum --check --strict \
    && tar -xzf pulumi.tar.gz \
    && install -d /opt/pulumi/bin \
    && install -m 0755 pulumi/pulumi pulumi/pulumi-language-python \
        pulumi/pulumi-language-python-exec pulumi/pulumi-resource-pulumi-python /opt/pulumi/bin/ \
    && for optional in pulumi/pulumi-language-nodejs pulumi/pulumi-resource-pulumi-nodejs \
            pulumi/pulumi-language-yaml pulumi/pulumi-language-go; do \
        if [ -f "${optional}" ]; then install -m 0755 "${optional}" /opt/pulumi/bin/; fi; \
    done \
    && /opt/pulumi/bin/pulumi version

# -- the image ----------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# git and ssh fetch Stack sources (sshAuth needs ssh); tini is PID 1 so that plugin
# processes orphaned by a killed Pulumi CLI are reaped, not left as zombies. apt's caches
# (the downloaded packages and its two package caches, 92 MB) are cleaned: a base without
# the official images' apt settings keeps them. Debian's versions are not pinned:
# bookworm's security updates replace them, and a pin would break the build then.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git openssh-client tini \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 65532 nonroot \
    && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin \
        --home-dir /var/lib/pulumi-stack-operator nonroot \
    && install -d -o 65532 -g 65532 -m 0750 /var/lib/pulumi-stack-operator
# Node.js: COPY follows a symbolic link it is given, so the links npm, npx and corepack
# are made here, as the node images make them; `corepack enable` adds the yarn and pnpm
# shims, which fetch the version a project names into ~/.cache/node/corepack (or
# COREPACK_HOME) on first use.
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules/npm/ /usr/local/lib/node_modules/npm/
COPY --from=node /usr/local/lib/node_modules/corepack/ /usr/local/lib/node_modules/corepack/
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && ln -s ../lib/node_modules/corepack/dist/corepack.js /usr/local/bin/corepack \
    && corepack enable --install-directory /usr/local/bin \
    && node --version
COPY --from=pulumi /opt/pulumi/bin/ /opt/pulumi/bin/
COPY --from=builder /opt/uv/bin/ /usr/local/bin/
COPY --from=builder /opt/venv/ /opt/venv/
ENV PATH=/opt/venv/bin:/opt/pulumi/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/var/lib/pulumi-stack-operator \
    PSO_WORK_DIR=/var/lib/pulumi-stack-operator \
    PULUMI_SKIP_UPDATE_CHECK=true \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Near the end, so that a new revision rebuilds only the steps below. buildah (podman)
# keys the cache of a LABEL or ENV step on its text, not on the build arguments it
# expands, so a LABEL alone would keep a previous build's revision; a RUN's cache key
# holds the arguments, so this one writes them down and every later step is rebuilt.
ARG PYTHON_IMAGE
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG PULUMI_VERSION
RUN printf 'VERSION=%s\nREVISION=%s\nPULUMI_VERSION=%s\nBASE=%s\n' \
        "${VERSION}" "${REVISION}" "${PULUMI_VERSION}" "${PYTHON_IMAGE}" \
        > /etc/pulumi-stack-operator-release
LABEL org.opencontainers.image.title="pulumi-stack-operator" \
      org.opencontainers.image.description="Reconciles pulumi.com/v1 Stacks through the Pulumi Automation API" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}" \
      com.pulumi.cli.version="${PULUMI_VERSION}"
WORKDIR /var/lib/pulumi-stack-operator
USER 65532:65532
# /metrics and /healthz, /readyz. The flags default to loopback; in a container pass
# --metrics-bind-address=:8080 --health-probe-bind-address=:8081 (the manifests do).
EXPOSE 8080 8081
ENTRYPOINT ["/usr/bin/tini", "--", "pulumi-stack-operator"]

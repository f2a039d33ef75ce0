# The two commands of the README. Each sets up .venv on first use (torch 2.13.0 CPU + ragen2).
VENV ?= .venv
STAMP := $(VENV)/.ragen2-installed
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist processes (tests sharing one session-scoped training run stay in one: loadgroup).
# 0 (one process) here: on 2 cores, with empty caches, 2 workers took 1129 s of pytest and one
# process 1072 s (2026-12-01, one machine): the tests contend for the cores.
PYTEST_WORKERS ?= 0
PYTEST = $(VENV)/bin/python -m pytest -q --durations=20 -n $(PYTEST_WORKERS) --dist loadgroup

.PHONY: train test test-e2e test-all setup bench docs

setup: $(STAMP)

$(STAMP): pyproject.toml launch/setup_venv.sh
	bash launch/setup_venv.sh $(VENV)
	touch $(STAMP)

## Main job: warm start + RL on the embedded CPU default (tiny model, FrozenLake, Ray + FSDP2).
train: $(STAMP)
	$(VENV)/bin/ragen2-train $(ARGS)

## Tests, tier 1 (the README's test command): every unit and component test plus one shared
## end-to-end smoke (Ray, two FSDP2 ranks, vLLM, weight sync + probe, checkpoint, exact resume).
## Budget: 5 minutes of pytest, 10 with the venv, on a fresh machine with empty caches.
test: $(STAMP)
	$(PYTEST) -m "not e2e" $(PYTEST_ARGS)

## Tests, tier 2: every other end-to-end run and the control studies (CI runs both tiers).
test-e2e: $(STAMP)
	$(PYTEST) -m e2e $(PYTEST_ARGS)

## Both tiers, one after the other.
test-all: test test-e2e

## Benchmarks against their baselines (benchmarks/README.md): ARGS="--quick" for the 5-minute run.
bench: $(STAMP)
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(VENV)/bin/python benchmarks/run.py $(ARGS)

## The documentation site (docs/, mkdocs.yml) into site/, strict: a broken link fails (tier 1 builds
## it too, tests/test_docs_site.py); `$(VENV)/bin/mkdocs serve` to browse it while editing.
docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict

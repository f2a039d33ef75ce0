# The two commands of the README. Each sets up .venv on first use (torch 2.13.0 CPU + ragen2).
VENV ?= .venv
STAMP := $(VENV)/.ragen2-installed
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist processes (tests sharing one session-scoped training run stay in one: loadgroup).
# 0 (one process) here: on 2 cores, with empty caches, 2 workers took 1129 s of pytest and one
# process 1072 s (2026-12-01, one machine): the tests contend for the cores.
PYTEST_WORKERS ?= 0

.PHONY: train test setup bench

setup: $(STAMP)

$(STAMP): pyproject.toml launch/setup_venv.sh
	bash launch/setup_venv.sh $(VENV)
	touch $(STAMP)

## Main job: warm start + RL on the embedded CPU default (tiny model, FrozenLake, Ray + FSDP2).
train: $(STAMP)
	$(VENV)/bin/ragen2-train $(ARGS)

## Test suite (slow end-to-end tests included; add PYTEST_ARGS="-m 'not slow'" to skip them,
## PYTEST_WORKERS=4 to spread it over 4 processes).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q --durations=20 -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

## Benchmarks against their baselines (benchmarks/README.md): ARGS="--quick" for the 5-minute run.
bench: $(STAMP)
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(VENV)/bin/python benchmarks/run.py $(ARGS)

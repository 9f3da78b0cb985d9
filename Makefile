# Entry points for people who already ran ./setup.sh once (it installs make too).
# The two README commands are `./setup.sh quick` and `./setup.sh test`; they call these targets.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: helpers test unit lint bench-delayline clean-helpers

helpers:
	$(MAKE) -C topologies/delayline

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

unit:
	$(PY) -m pytest -m "not integration" -q

test: helpers lint
	$(PY) -m pytest -q -ra

bench-delayline: helpers
	$(PY) bench/delayline_bench.py --out bench/results/delayline.json

clean-helpers:
	$(MAKE) -C topologies/delayline clean

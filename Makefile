# Entry points for people who already ran ./setup.sh once (it installs make too).
# The two README commands are `./setup.sh quick` and `./setup.sh test`; they call these targets.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: helpers test unit fast lint vm-test bench-delayline clean-helpers

helpers:
	$(MAKE) -C topologies/delayline
	$(MAKE) -C topologies/nssim NS3=$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ns3

lint:
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

unit:
	$(PY) -m pytest -m "not integration" -q

# The fast tier for development: every test that needs neither root nor a namespace and is not slow
# (fuzzing, simulations), with one in ten of the generated bad-input cases, on every core
# (pytest-xdist); docs/development.md has the measured times. The README's test command stays the full suite.
fast:
	$(PY) -m pytest -m "not root and not vm and not slow" --matrix-sample 10 -n auto -q -p no:cacheprovider

# The host suite in two tiers, then the VM stage (tests/vm/stage.sh): the netem and OVS tests (marker
# vm) on Debian's stock kernel in a VM, which fails where it cannot run unless BSZ_VM_OPTIONAL=1.
# tests/stages.sh runs the three, each even after one failed, and ends with a summary of them.
# The tests that need neither root nor a namespace run on every core (as `fast`, with the slow ones and
# the whole bad-input matrix); the root tier runs one test at a time, because its tests judge real links on
# this machine's cores and must not share them with each other.
# --durations: the slowest tests, so a run (and CI's log) shows where the suite's time goes.
test: helpers lint
	PY=$(PY) tests/stages.sh

vm-test: helpers
	tests/vm/stage.sh

bench-delayline: helpers
	$(PY) bench/delayline_bench.py --out bench/results/delayline.json

clean-helpers:
	$(MAKE) -C topologies/delayline clean
	$(MAKE) -C topologies/nssim clean NS3=unused

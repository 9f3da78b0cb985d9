# Entry points for people who already ran ./setup.sh once (it installs make too).
# The two README commands are `./setup.sh quick` and `./setup.sh test`; they call these targets.
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: helpers test claims claims-faults test-extensive unit fast lint vm-test bench-delayline clean-helpers

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

# The README's test command (tests/stages.sh): the structure stage (every test of what is built, refused,
# written, resumed and torn down: the tests that need root and build one at a time on one pytest-xdist
# worker, the rest on two more, the VM stage's structural tests beside them), then the claims stage
# alone (below), and a summary with the ten slowest tests and the claims' verdicts.
test: helpers lint
	PY=$(PY) tests/stages.sh

# The toolkit's measured claims alone, one line a claim: held, broken or inconclusive (tests/claims).
claims: helpers
	PYTHONPATH=tests $(PY) -m claims

# Each planted fault in turn, and the claims it must break shown broken (tests/claims/faults.py).
claims-faults: helpers
	PYTHONPATH=tests $(PY) -m claims --every-fault

# The test command with the long forms it leaves out (docs/development.md): both remote machines over
# SSH, the Slurm node, the hard-crash sweep at full size, the whole bad-input matrix, every VM test.
test-extensive: helpers lint
	BSZ_EXTENSIVE=1 PY=$(PY) tests/stages.sh

vm-test: helpers
	tests/vm/stage.sh

bench-delayline: helpers
	$(PY) bench/delayline_bench.py --out bench/results/delayline.json

clean-helpers:
	$(MAKE) -C topologies/delayline clean
	$(MAKE) -C topologies/nssim clean NS3=unused

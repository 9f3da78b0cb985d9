#!/bin/bash
# Runs inside the guest that tests/vm/stage.sh boots (never on the host): Debian's stock kernel,
# the host's root filesystem shared read-only over 9p (/etc, /var, /tmp are guest-only overlays).
#   guest.sh REPO OVS ACCEL PART FAULT [extra pytest args]
# PART: structure (the tests marked neither claim nor extensive), claims (those marked claim: they print their figures
# as BSZ-CLAIM lines for the host's claims stage to judge) or all; FAULT: a planted fault for the
# claims (tests/claims/faults.py), or - for none.
# Prints "guest: up" first (the stage's boot timeout ends there) and "guest: pytest exit N" last
# (the stage takes the result from that line, not only from the VM's exit status).
set -u
exec 2>&1 # the stage keeps only the guest's stdout (guest.out): errors and stack dumps must land there
repo=$1 ovs=$2 accel=$3 part=$4 fault=$5
shift 5
case "$part" in
  structure) marks="vm and not claim and not extensive" ;;
  claims) marks="vm and claim" ;;
  *) marks="vm" ;;
esac
[ "$fault" = - ] || export BSZ_CLAIMS_FAULT="$fault"
echo "guest: up: kernel $(uname -r), $(nproc) CPUs, accel $accel, tests: $part"
cd "$repo" || exit 1
# BSZ_VM_GUEST=1 lets tests/test_netem_vm.py run (and makes a missing netem a failure, not a skip).
# The repo is read-only here: no bytecode, no .pytest_cache. faulthandler_timeout: a test still
# running after 240 s (a whole guest run takes 300-500 s) prints every thread's stack, so a stall
# under the stage's limit says where it waits instead of only that it did.
export BSZ_VM_GUEST=1 BSZ_VM_OVS="$ovs" BSZ_VM_ACCEL="$accel" PYTHONDONTWRITEBYTECODE=1
.venv/bin/python -m pytest -m "$marks" -q -ra -p no:cacheprovider -o faulthandler_timeout=240 --durations=10 tests/test_netem_vm.py tests/test_mininet_vm.py "$@"
rc=$?
echo "guest: pytest exit $rc"
exit $rc

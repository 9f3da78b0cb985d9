#!/usr/bin/env bash
# One entry point for a new user on Debian or Ubuntu, as root:
#   ./setup.sh quick   set everything up, then run the main job (results under results/)
#   ./setup.sh test    set everything up, then run the test suite (the host's, then the VM stage:
#                      tests/vm/stage.sh boots a stock kernel for the netem/OVS tests, ~2 min)
#   ./setup.sh         set everything up only
# Every step checks before it acts, so re-running is cheap and safe.
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(iproute2 ethtool bridge-utils iputils-ping iperf iperf3 mininet make gcc g++ libc6-dev git
  python3 python3-venv procps)
# The ns-3 twin (bufsize sim) builds against this wheel's headers and libraries; only the wheel, not
# its Python bindings' dependencies (cppyy), which the twin does not use. Pinned: the same as
# topologies/nssim.py NS3_WHEEL, so every machine simulates with the same ns-3.
NS3_WHEEL=ns3==3.44.post0
# Only the test command needs these: sshd for the `bufsize remote` test (it starts its own sshd
# processes inside its own namespaces; the package's service is never started here, and is
# disabled if this script installed it), clang and its runtimes for the delay line's libFuzzer target
# (topologies/delayline/fuzz_parsers.c), and Slurm with munge for the test that runs a twin sweep on
# a Slurm cluster (it starts its own munged, slurmctld and slurmd from a private directory; the
# packages' services are never started here, and are disabled if this script installed them).
TEST_APT_PACKAGES=(openssh-server clang libclang-rt-dev munge slurmctld slurmd slurm-client)
# Vagrant is optional: newer distributions dropped it after its licence change, and the
# Vagrantfile test then skips with that reason instead of the whole test command failing.
# Chromium loads a sweep's live page (Dask's dashboard) in the tests; Debian packages it, Ubuntu
# ships it as a snap, where that test skips and says so.
OPTIONAL_TEST_APT_PACKAGES=(vagrant chromium)
VENV=.venv

say() { printf '[setup] %s\n' "$*"; }

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (namespaces, qdiscs and packages need it): sudo $0 $*" >&2
  exit 2
fi

install_apt() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    say "apt packages present"
    return
  fi
  say "installing apt packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Services that packages try to start (iperf3's, sshd) are not wanted here: policy-rc.d
  # answering 101 is Debian's way to say so during an install (only if none is there already).
  local made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
  fi
  local rc=0
  apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
  [ "$rc" -eq 0 ] || exit "$rc"
  # The services of packages this script installed must not start at the next boot either.
  command -v systemctl >/dev/null || return 0
  local p units
  for p in "${missing[@]}"; do
    case "$p" in
      openssh-server) units=(ssh.service ssh.socket) ;;
      munge | slurmctld | slurmd) units=("$p.service") ;;
      *) continue ;;
    esac
    systemctl disable "${units[@]}" >/dev/null 2>&1 || true
    say "$p installed for the tests; its service is not started and is disabled"
  done
}

pick_python() {
  # The first python3 on PATH if it is 3.11 or newer and can make a venv, else Debian's, else the
  # distribution's python3.11 package (Ubuntu 22.04 ships 3.10 as python3 and 3.11 beside it).
  for py in "$(command -v python3 || true)" /usr/bin/python3 /usr/bin/python3.11; do
    [ -n "$py" ] && [ -x "$py" ] || continue
    if "$py" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
      echo "$py"
      return
    fi
  done
  apt-get update -q >&2 || true
  if apt-cache show python3.11-venv >/dev/null 2>&1; then
    say "python3 is older than 3.11: installing python3.11 and python3.11-venv" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3.11 python3.11-venv >&2
    echo /usr/bin/python3.11
    return
  fi
  echo "setup.sh: no python3 >= 3.11 with venv found, and no python3.11 package to install" >&2
  exit 1
}

make_venv() {
  if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
    local py
    py=$(pick_python)
    say "creating $VENV with $py"
    rm -rf "$VENV"
    "$py" -m venv "$VENV"
  fi
  local stamp="$VENV/.bufsize-installed" want extras='.[dev,remote]'
  # The stamp covers the extras too: a venv made before they changed is brought up to date.
  want=$( (cat pyproject.toml; echo "$extras") | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || [ ! -x "$VENV/bin/bufsize" ]; then
    say "installing the project and its Python dependencies into $VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    # remote: Fabric, for `bufsize remote` (the machine that drives cloud VMs needs it).
    "$VENV/bin/python" -m pip install -q -e "$extras"
    echo "$want" > "$stamp"
  else
    say "$VENV up to date"
  fi
  # Debian's Mininet installs for /usr/bin/python3 only; expose just that package to the venv.
  local site
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ -d /usr/lib/python3/dist-packages/mininet ] && [ ! -e "$site/mininet" ]; then
    ln -s /usr/lib/python3/dist-packages/mininet "$site/mininet"
    say "linked Debian's Mininet into $VENV"
  fi
}

build_helpers() {
  make -s -C topologies/delayline
  say "helpers built (topologies/delayline/bsz-delayline)"
  build_twin || say "the ns-3 twin could not be set up (above); everything else works, and bufsize sim says why"
}

build_twin() {
  local ns3
  ns3=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/ns3
  if ! "$VENV/bin/python" -m pip show -q ns3 >/dev/null 2>&1 ||
    [ "$("$VENV/bin/python" -m pip show ns3 | sed -n 's/^Version: //p')" != "${NS3_WHEEL#ns3==}" ]; then
    say "installing the ns-3 wheel for the simulator twin ($NS3_WHEEL, about 70 MB)"
    "$VENV/bin/python" -m pip install -q --no-deps "$NS3_WHEEL" || return 1
  fi
  make -s -C topologies/nssim NS3="$ns3" || return 1
  say "simulator twin built (topologies/nssim/bsz-nssim, ns-3 ${NS3_WHEEL#ns3==})"
}

install_apt "${APT_PACKAGES[@]}"
if [ "${1:-}" = test ]; then
  install_apt "${TEST_APT_PACKAGES[@]}"
  for p in "${OPTIONAL_TEST_APT_PACKAGES[@]}"; do
    (install_apt "$p") || say "could not install $p (not in this distribution?); the tests that need it skip and say why"
  done
fi
make_venv
build_helpers

case "${1:-}" in
  "") say "done; the command is $VENV/bin/bufsize" ;;
  quick) shift; exec "$VENV/bin/bufsize" quick "$@" ;;
  test) shift; exec make test "$@" ;;
  *) echo "usage: $0 [quick|test]" >&2; exit 2 ;;
esac

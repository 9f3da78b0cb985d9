#!/usr/bin/env bash
# The VM stage: the netem delay backend (and Open vSwitch) on Debian's stock kernel.
#
# This machine's kernel has neither sch_netem nor openvswitch; the cloud VMs and Vagrant boxes
# users run on do. This stage boots Debian's stock kernel (linux-image-amd64) under QEMU with
# virtme-ng, sharing the host's root filesystem read-only over 9p, and runs
# tests/test_netem_vm.py (pytest -m vm) inside it through tests/vm/guest.sh. It boots once and
# runs every test in one pytest process: Python starts slowly over 9p.
#
#   tests/vm/stage.sh          alone: make vm-test; `make test` (./setup.sh test) runs it last
#
# It installs what it needs (apt: qemu-system-x86 kmod busybox-static udev file; PyPI:
# virtme-ng, in its own venv) and caches the kernel and the venv under $BSZ_VM_CACHE
# (/var/lib/bufsize-vm, about 450 MB; re-runs only boot the guest). Outside the repo, so a fresh
# checkout or `git clean` keeps it and Vagrant's rsync does not copy it; not under /var/cache,
# which the guest's init hides behind a tmpfs, while the guest must see the kernel's modules.
#
# Exit status: the guest's pytest's. Where the stage cannot run (not x86_64, not root, no apt,
# an install or download failing, the guest not booting in time) it prints "FAIL: VM stage could
# not run: <reason>" and exits 1: a suite that passed without the stock-kernel tests would say
# more than it checked. BSZ_VM_OPTIONAL=1, set on purpose, makes that "SKIP: <reason>" and exit 0.
# A guest that stops printing for BSZ_VM_STALL_S seconds, or outlives BSZ_VM_TIMEOUT, is ended and
# booted once more (a guest under software emulation has frozen on a loaded host); the PASS or FAIL
# line says when that happened.
#
# Knobs (environment):
#   BSZ_VM_CACHE         cache directory                                    /var/lib/bufsize-vm
#   BSZ_VM_ACCEL         kvm | tcg | auto (kvm only with vmx/svm in the CPU flags)      auto
#   BSZ_VM_OVS           1: install openvswitch-switch (its daemons are not started on this
#                        host) and require the OVS test; auto: test OVS only if it is
#                        already installed; 0: skip it                                     1
#   BSZ_VM_BOOT_TIMEOUT  seconds until the guest must be up                                180
#   BSZ_VM_TIMEOUT       seconds for the whole guest run (here under TCG: 240-280, and 460
#                        with the host loaded)                                             900
#   BSZ_VM_STALL_S       seconds the guest may print nothing before it counts as frozen
#                        (pytest prints a dot a test; the slowest test takes about 100 s) 360
#   BSZ_VM_PART          structure: the tests not marked claim (the test command's first stage,
#                        beside the host's tests); claims: those marked claim, which print their
#                        figures for the claims stage (tests/claims) to judge; all                all
#   BSZ_VM_FAULT         a fault planted in the guest for the claims (tests/claims/faults.py)
#   BSZ_VM_PYTEST_ARGS   extra pytest arguments for the guest (e.g. "-k ovs")
#   BSZ_VM_OPTIONAL=1    a stage that cannot run is skipped (exit 0) instead of failing
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${BSZ_VM_CACHE:-/var/lib/bufsize-vm}
ACCEL=${BSZ_VM_ACCEL:-auto}
OVS=${BSZ_VM_OVS:-1}
BOOT_TIMEOUT=${BSZ_VM_BOOT_TIMEOUT:-180}
GUEST_TIMEOUT=${BSZ_VM_TIMEOUT:-900}
STALL_S=${BSZ_VM_STALL_S:-360}
VNG_VERSION=1.42
T0=$(date +%s.%N)

since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
say() { echo "[vm] $*"; }
skip() {
  if [ "${BSZ_VM_OPTIONAL:-0}" = 1 ]; then
    echo "SKIP: VM stage: $* (after $(since "$T0") s; BSZ_VM_OPTIONAL=1)"
    exit 0
  fi
  echo "FAIL: VM stage could not run: $* (after $(since "$T0") s; BSZ_VM_OPTIONAL=1 skips it on purpose)"
  exit 1
}
fail() {
  echo "FAIL: VM stage: $* (wall time $(since "$T0") s)"
  exit 1
}

[ "$(uname -m)" = x86_64 ] || skip "only x86_64 hosts are supported (this is $(uname -m))"
[ "$(id -u)" = 0 ] || skip "needs root (apt-get, and the guest runs as the calling user)"
command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null || skip "no apt-get/dpkg-deb: not a Debian-like host"
[ -x "$REPO/.venv/bin/python" ] || skip "no $REPO/.venv: run ./setup.sh first"
[ -x "$REPO/topologies/delayline/bsz-delayline" ] || skip "the delay line is not built: run ./setup.sh first"
case "$CACHE" in
  # virtme-ng's guest init mounts tmpfs over these: the guest would not find the kernel's modules.
  /var/cache* | /var/log* | /var/tmp* | /run* | /dev* | /proc* | /sys*) fail "BSZ_VM_CACHE=$CACHE: the guest cannot see it" ;;
  /*) ;;
  *) fail "BSZ_VM_CACHE=$CACHE: give an absolute path" ;;
esac
mkdir -p "$CACHE" || skip "cannot create $CACHE"
# One stage at a time: the cache is shared, and two emulated guests on 2 cores would starve.
exec 9>"$CACHE/.lock"
flock -w 900 9 || skip "another VM stage held $CACHE/.lock for 15 minutes"

# ---- 1. host packages --------------------------------------------------------------------------
# qemu-system-x86: the VM. kmod: depmod here and modprobe in the guest (which runs the host's
# binaries). busybox-static: virtme-ng's initramfs. udev: without udevd in the guest there is no
# /dev/virtio-ports/virtme.*, and vng falls back to the serial console, which mixes kernel
# messages into the output and loses the exit status. file: virtme-ng inspects the kernel image.
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
need=()
for p in qemu-system-x86 kmod busybox-static udev file iproute2 iputils-ping iperf; do have "$p" || need+=("$p"); done
case "$OVS" in
  1) have openvswitch-switch || need+=(openvswitch-switch) ;;
  auto) have openvswitch-switch && OVS=1 || OVS=missing ;;
  0) ;;
  *) fail "BSZ_VM_OVS=$OVS: expected auto, 1 or 0" ;;
esac
if [ ${#need[@]} -gt 0 ]; then
  t=$(date +%s.%N)
  say "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >"$CACHE/apt.log" 2>&1 || skip "apt-get update failed (see $CACHE/apt.log)"
  # The guest runs the packages' programs; this host must not start their services (Open vSwitch's
  # daemons, for one). policy-rc.d answering 101 is Debian's way to say so during an install.
  made_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
    trap '[ "$made_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  apt-get install -y -q --no-install-recommends "${need[@]}" >>"$CACHE/apt.log" 2>&1 \
    || skip "apt-get install ${need[*]} failed (see $CACHE/apt.log)"
  if [ "$made_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; made_policy=0; fi
  say "  installed in $(since "$t") s"
fi

# ---- 2. the stock kernel, extracted (not installed) ------------------------------------------
# linux-image-amd64 is the metapackage; it depends on the current linux-image-<version>-amd64.
resolve_kernel() {
  apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'
}
KDIR=$CACHE/kernel
pkg=$(resolve_kernel)
if [ -z "$pkg" ] && ! [ -s "$KDIR/package" ]; then
  apt-get update -q >"$CACHE/apt.log" 2>&1 || true
  pkg=$(resolve_kernel)
fi
[ -n "$pkg" ] || pkg=$(cat "$KDIR/package" 2>/dev/null || true)
[ -n "$pkg" ] || skip "cannot resolve linux-image-amd64 to a kernel package"
if [ "$(cat "$KDIR/package" 2>/dev/null)" != "$pkg" ] || ! ls "$KDIR"/boot/vmlinuz-* >/dev/null 2>&1; then
  t=$(date +%s.%N)
  say "downloading and extracting $pkg"
  dl=$CACHE/debs
  rm -rf "$dl" "$KDIR.tmp"
  mkdir -p "$dl"
  (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >"$CACHE/download.log" 2>&1) \
    || { apt-get update -q >"$CACHE/apt.log" 2>&1 && (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >"$CACHE/download.log" 2>&1); } \
    || skip "apt-get download $pkg failed (see $CACHE/download.log)"
  dpkg-deb -x "$dl/${pkg}"_*.deb "$KDIR.tmp" || skip "dpkg-deb -x $pkg failed"
  kver=$(basename "$(ls -d "$KDIR.tmp"/lib/modules/* | head -1)")
  depmod -a -b "$KDIR.tmp" "$kver" # a .deb ships no modules.dep: its postinst makes it
  echo "$pkg" >"$KDIR.tmp/package"
  rm -rf "$KDIR" "$dl"
  mv "$KDIR.tmp" "$KDIR"
  say "  done in $(since "$t") s"
fi
KIMG=$(ls "$KDIR"/boot/vmlinuz-* | head -1)
KVER=${KIMG##*/vmlinuz-}
for m in sch_netem sch_htb sch_tbf veth bridge openvswitch; do
  find "$KDIR/lib/modules/$KVER/kernel" -name "$m.ko*" | grep -q . || fail "$m.ko is missing from the stock kernel $KVER"
done

# ---- 3. virtme-ng, in its own venv -------------------------------------------------------------
VENV=$CACHE/venv
if ! "$VENV/bin/vng" --version 2>/dev/null | grep -qx "virtme-ng $VNG_VERSION"; then
  t=$(date +%s.%N)
  say "pip install virtme-ng==$VNG_VERSION"
  rm -rf "$VENV"
  python3 -m venv "$VENV" >"$CACHE/pip.log" 2>&1 || skip "python3 -m venv failed (see $CACHE/pip.log)"
  "$VENV/bin/pip" install -q "virtme-ng==$VNG_VERSION" >>"$CACHE/pip.log" 2>&1 \
    || { rm -rf "$VENV"; skip "pip install virtme-ng==$VNG_VERSION failed (see $CACHE/pip.log)"; }
  say "  done in $(since "$t") s"
fi
export PATH=$VENV/bin:$PATH # vng runs virtme-run through PATH

# ---- 4. udev rules for the guest: only the virtio-ports symlinks -----------------------------
# Bound over /etc/udev/rules.d in the guest, where an empty file masks the /lib/udev/rules.d rule
# of the same name. A full udev coldplug takes ~10 s under emulation; this takes under 1 s.
RULES=$CACHE/udev-rules
rm -rf "$RULES"
mkdir -p "$RULES"
for f in /lib/udev/rules.d/*.rules; do : >"$RULES/${f##*/}"; done
echo 'SUBSYSTEM=="virtio-ports", KERNEL=="vport*", ATTR{name}=="?*", SYMLINK+="virtio-ports/$attr{name}"' \
  >"$RULES/50-udev-default.rules"

# ---- 5. boot once and run the tests ------------------------------------------------------------
# /dev/kvm can open yet be unusable for a stock kernel (here it is kvm_pvm, without vmx/svm, and
# the kernel hangs early), so KVM needs the CPU flag too; otherwise QEMU emulates the CPU (TCG).
kvm_usable() { [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; }
case "$ACCEL" in
  auto) if kvm_usable; then ACCEL=kvm; else ACCEL=tcg; fi ;;
  kvm | tcg) ;;
  *) fail "BSZ_VM_ACCEL=$ACCEL: expected auto, kvm or tcg" ;;
esac
PREP_S=$(since "$T0")
LOGS=$CACHE/last-run
mkdir -p "$LOGS"

# boot ACCEL: runs the guest; sets BOOT_RC (0 done, 1 no boot in time, 2 guest run timed out,
# 3 the guest printed nothing for STALL_S seconds).
boot() {
  local accel=$1 accel_opt=() t started=0 pid size=-1 quiet_since
  [ "$accel" = tcg ] && accel_opt=(--disable-kvm)
  # shellcheck disable=SC2086 # BSZ_VM_PYTEST_ARGS is split into words on purpose
  local cmd
  cmd=$(printf '%q ' "$REPO/tests/vm/guest.sh" "$REPO" "$OVS" "$accel" "${BSZ_VM_PART:-all}" "${BSZ_VM_FAULT:--}" \
    ${BSZ_VM_PYTEST_ARGS:-})
  say "booting $KVER ($accel, 2 CPUs, 1 GB) and running tests/test_netem_vm.py inside"
  : >"$LOGS/guest.out"
  t=$(date +%s.%N)
  # Its own session, so a timeout can end qemu with the rest of its process group.
  setsid vng --run "$KIMG" "${accel_opt[@]}" --force-9p --memory 1G --cpus 2 --name bsz-vm \
    --rodir=/etc/udev/rules.d="$RULES" --cwd "$REPO" --exec "$cmd" \
    </dev/null >"$LOGS/guest.out" 2>"$LOGS/console.log" &
  pid=$!
  BOOT_SID=$pid
  tail -n +1 -F --pid="$pid" "$LOGS/guest.out" 2>/dev/null &
  BOOT_RC=0
  quiet_since=$(date +%s.%N)
  while kill -0 "$pid" 2>/dev/null; do
    if [ $started = 0 ] && grep -q '^guest: up' "$LOGS/guest.out"; then
      started=1
      say "  guest up after $(since "$t") s"
    fi
    local el now_size
    el=$(since "$t")
    now_size=$(stat -c %s "$LOGS/guest.out" 2>/dev/null || echo 0)
    if [ "$now_size" != "$size" ]; then
      size=$now_size
      quiet_since=$(date +%s.%N)
    fi
    if { [ $started = 0 ] && awk -v e="$el" -v l="$BOOT_TIMEOUT" 'BEGIN { exit !(e > l) }'; } \
      || awk -v e="$el" -v l="$GUEST_TIMEOUT" 'BEGIN { exit !(e > l) }' \
      || { [ $started = 1 ] && awk -v e="$(since "$quiet_since")" -v l="$STALL_S" 'BEGIN { exit !(e > l) }'; }; then
      BOOT_RC=$((started ? 2 : 1))
      [ $started = 1 ] && awk -v e="$(since "$quiet_since")" -v l="$STALL_S" 'BEGIN { exit !(e > l) }' && BOOT_RC=3
      kill -TERM -- "-$pid" 2>/dev/null || true
      sleep 5
      kill -KILL -- "-$pid" 2>/dev/null || true
      break
    fi
    sleep 1
  done
  wait "$pid" 2>/dev/null && VNG_RC=0 || VNG_RC=$?
  end_session "$pid"
  wait 2>/dev/null || true # the tail
  GUEST_S=$(since "$t")
}

# end_session SID: every process still in the boot's own session (it is vng's: setsid made it), by PID,
# until none is left: a QEMU that outlived its guest's end would go on taking a CPU under what runs next.
end_session() {
  local sid=$1 left i
  for i in $(seq 30); do
    left=$(ps -e -o pid=,sid= | awk -v s="$sid" '$2 == s { print $1 }')
    [ -n "$left" ] || return 0
    # shellcheck disable=SC2086 # one PID a word
    kill -KILL $left 2>/dev/null || true
    sleep 1
  done
  say "  processes of the guest's session still there after 30 s: $left"
}

# A stage stopped part-way (Ctrl-C, SIGTERM) ends the guest it booted: nothing of it outlives the stage.
BOOT_SID=""
trap '[ -z "$BOOT_SID" ] || end_session "$BOOT_SID"' EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
boot "$ACCEL"
if [ "$BOOT_RC" = 1 ] && [ "$ACCEL" = kvm ] && [ "${BSZ_VM_ACCEL:-auto}" = auto ]; then
  say "no boot under KVM within ${BOOT_TIMEOUT} s; trying software emulation"
  ACCEL=tcg
  boot tcg
fi
RETRIED=""
if [ "$BOOT_RC" != 0 ]; then
  # One more boot for a guest that never came up, froze or ran out of time; the first try's logs are
  # kept beside the second's.
  case "$BOOT_RC" in
    1) why="did not come up within ${BOOT_TIMEOUT} s" ;;
    2) why="ran past ${GUEST_TIMEOUT} s" ;;
    *) why="printed nothing for ${STALL_S} s" ;;
  esac
  tail -15 "$LOGS/console.log" | sed 's/^/  console: /'
  for f in guest.out console.log; do mv -f "$LOGS/$f" "$LOGS/first-try-$f" 2>/dev/null || true; done
  say "the guest ($KVER, $ACCEL) $why; booting it once more (first try's logs: $LOGS/first-try-*)"
  RETRIED="; booted twice, the first guest $why"
  boot "$ACCEL"
fi
if [ "$BOOT_RC" = 1 ]; then
  tail -15 "$LOGS/console.log" | sed 's/^/  console: /'
  skip "the guest ($KVER, $ACCEL) did not come up within ${BOOT_TIMEOUT} s, twice (console: $LOGS/console.log)"
fi
[ "$BOOT_RC" = 2 ] && fail "the guest run exceeded ${GUEST_TIMEOUT} s$RETRIED (console: $LOGS/console.log)"
if [ "$BOOT_RC" = 3 ]; then
  tail -30 "$LOGS/guest.out" | sed 's/^/  guest: /'
  fail "the guest printed nothing for ${STALL_S} s$RETRIED (console: $LOGS/console.log)"
fi
# The guest's pytest status, as guest.sh printed it; a VM that died early never prints it.
rc=$(sed -n 's/^guest: pytest exit \([0-9]*\)$/\1/p' "$LOGS/guest.out" | tail -1)
if [ -z "$rc" ]; then
  tail -30 "$LOGS/console.log" | sed 's/^/  console: /'
  fail "the guest ended (vng status $VNG_RC) before pytest finished (console: $LOGS/console.log)"
fi
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$LOGS/guest.out" | tail -1 | tr -d '=' | xargs || true)
timing="prepare $PREP_S s, guest $GUEST_S s; $KVER, $ACCEL$RETRIED"
[ "$rc" = 0 ] || fail "tests inside the guest: ${summary:-pytest exit $rc} [$timing]"
echo "PASS: VM stage: ${summary} (wall time $(since "$T0") s: $timing)"

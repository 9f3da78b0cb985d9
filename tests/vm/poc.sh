#!/usr/bin/env bash
# Proof of concept: boot Debian's stock kernel (linux-image-amd64) under virtme-ng,
# sharing the host root read-only over 9p, and check that sch_netem works in the
# guest (namespaces + veth + bridge + netem delay + ping RTT).
#
# Idempotent: everything is cached under $VM_DIR; re-runs only boot the guest.
# Where it cannot run it prints "SKIP: <reason>" and exits 0 (VM_STRICT=1: exit 77).
#
# Env knobs:
#   VM_DIR      cache dir (kernel tree, venv, udev rules)      default /tmp/issue7/vm
#   VM_ACCEL    kvm | tcg | auto                                default auto
#   VM_TIMEOUT  seconds allowed for one guest run               default 300
#   VM_OVS=1    also install openvswitch-switch and test an OVS bridge in the guest
#   VNG_VERSION virtme-ng version from PyPI                     default 1.42
set -euo pipefail

VM_DIR=${VM_DIR:-/tmp/issue7/vm}
VM_ACCEL=${VM_ACCEL:-auto}
VM_TIMEOUT=${VM_TIMEOUT:-300}
VM_OVS=${VM_OVS:-0}
VNG_VERSION=${VNG_VERSION:-1.42}
DELAY_MS=20

skip() {
  echo "SKIP: $*"
  if [ "${VM_STRICT:-0}" = 1 ]; then exit 77; fi
  exit 0
}
step() { STEP_T0=$(date +%s.%N); echo "== $*"; }
done_step() { printf '   (%.1f s)\n' "$(echo "$(date +%s.%N) - $STEP_T0" | bc)"; }

[ "$(uname -m)" = x86_64 ] || skip "only x86_64 hosts are supported (got $(uname -m))"
[ "$(id -u)" = 0 ] || skip "needs root (apt-get install, network namespaces in the guest)"
command -v apt-get >/dev/null || skip "no apt-get: not a Debian-like host"
mkdir -p "$VM_DIR"

# --- 1. host packages ------------------------------------------------------------------------
# qemu-system-x86: the VM; kmod: depmod on the host + modprobe inside the guest (the guest
# runs the host's /sbin/modprobe); busybox-static: virtme-ng's initramfs; udev: the guest
# needs udevd to create /dev/virtio-ports/virtme.* (without it vng falls back to the serial
# console, mixes stdout with kernel messages and loses the exit code). bc: timings here.
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v depmod >/dev/null || need+=(kmod)
[ -x /bin/busybox ] || command -v busybox >/dev/null || need+=(busybox-static)
[ -x /lib/systemd/systemd-udevd ] || need+=(udev)
command -v bc >/dev/null || need+=(bc)
command -v file >/dev/null || need+=(file)
for t in ip tc ping; do command -v $t >/dev/null || need+=(iproute2 iputils-ping); done
if [ "$VM_OVS" = 1 ] && ! command -v ovs-vswitchd >/dev/null; then need+=(openvswitch-switch); fi
if [ ${#need[@]} -gt 0 ]; then
  echo "== apt-get install ${need[*]}"
  t0=$(date +%s)
  apt-get update -q >/dev/null || skip "apt-get update failed"
  # policy-rc.d / no systemd: openvswitch-switch's postinst does not start daemons on the host.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null \
    || skip "apt-get install ${need[*]} failed"
  echo "   ($(( $(date +%s) - t0 )) s)"
fi

# --- 2. stock kernel, extracted (not installed) -------------------------------------------------
KDIR=$VM_DIR/kernel
if ! ls "$KDIR"/boot/vmlinuz-* >/dev/null 2>&1; then
  step "download + extract linux-image-amd64"
  dl=$VM_DIR/debs; rm -rf "$dl"; mkdir -p "$dl"
  pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$pkg" ]; then apt-get update -q >/dev/null || true
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}'); fi
  [ -n "$pkg" ] || skip "cannot resolve linux-image-amd64's kernel package"
  (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null) || skip "apt-get download $pkg failed"
  rm -rf "$KDIR.tmp"; dpkg-deb -x "$dl"/"$pkg"_*.deb "$KDIR.tmp"
  kver=$(basename "$KDIR.tmp"/lib/modules/*)
  depmod -a -b "$KDIR.tmp" "$kver"   # debs ship no modules.dep (postinst makes it)
  rm -rf "$KDIR"; mv "$KDIR.tmp" "$KDIR"; rm -rf "$dl"
  done_step
fi
KIMG=$(ls "$KDIR"/boot/vmlinuz-* | head -1)
KVER=${KIMG##*/vmlinuz-}
for m in sch_netem veth bridge openvswitch; do
  find "$KDIR/lib/modules/$KVER/kernel" -name "$m.ko*" | grep -q . || skip "$m.ko missing from kernel $KVER"
done

# --- 3. virtme-ng in its own venv ---------------------------------------------------------------
if ! "$VM_DIR/venv/bin/vng" --version 2>/dev/null | grep -qx "virtme-ng $VNG_VERSION"; then
  step "pip install virtme-ng==$VNG_VERSION"
  python3 -m venv "$VM_DIR/venv" || skip "python3 -m venv failed (python3-venv missing?)"
  "$VM_DIR/venv/bin/pip" install -q "virtme-ng==$VNG_VERSION" || skip "pip install virtme-ng failed"
  done_step
fi
export PATH=$VM_DIR/venv/bin:$PATH   # vng execs virtme-run through PATH

# --- 4. udev rules for the guest: only the virtio-ports symlinks --------------------------------
# Bound over /etc/udev/rules.d in the guest; an empty file of the same name masks each
# /lib/udev/rules.d rule. Under TCG full udev coldplug+settle costs ~10 s; this costs <1 s.
RULES=$VM_DIR/udev-rules
rm -rf "$RULES"; mkdir -p "$RULES"
for f in /lib/udev/rules.d/*.rules; do : >"$RULES/${f##*/}"; done
echo 'SUBSYSTEM=="virtio-ports", KERNEL=="vport*", ATTR{name}=="?*", SYMLINK+="virtio-ports/$attr{name}"' \
  >"$RULES/50-udev-default.rules"

# --- 5. acceleration ----------------------------------------------------------------------------
# /dev/kvm may open yet be unusable for a stock kernel: on this workplace it is kvm_pvm
# (no vmx/svm in cpuinfo) and a stock kernel hangs at boot. So require the CPU flag too.
if [ "$VM_ACCEL" = auto ]; then
  if [ -r /dev/kvm ] && [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then VM_ACCEL=kvm; else VM_ACCEL=tcg; fi
fi
accel_opt=(); [ "$VM_ACCEL" = tcg ] && accel_opt=(--disable-kvm)
echo "== kernel $KVER, accel $VM_ACCEL"

# --- 6. the guest test ----------------------------------------------------------------------------
GUEST=$VM_DIR/guest-netem.sh
cat >"$GUEST" <<EOF
#!/bin/bash
set -eu
modprobe sch_netem
ip netns add vm-h1; ip netns add vm-h2; ip netns add vm-sw
ip link add vm-h1-eth0 type veth peer name vm-s-eth1
ip link add vm-h2-eth0 type veth peer name vm-s-eth2
ip link set vm-h1-eth0 netns vm-h1; ip link set vm-s-eth1 netns vm-sw
ip link set vm-h2-eth0 netns vm-h2; ip link set vm-s-eth2 netns vm-sw
ip -n vm-sw link add br0 type bridge
ip -n vm-sw link set vm-s-eth1 master br0; ip -n vm-sw link set vm-s-eth2 master br0
for l in lo br0 vm-s-eth1 vm-s-eth2; do ip -n vm-sw link set \$l up; done
ip -n vm-h1 addr add 10.0.0.1/24 dev vm-h1-eth0; ip -n vm-h1 link set vm-h1-eth0 up
ip -n vm-h2 addr add 10.0.0.2/24 dev vm-h2-eth0; ip -n vm-h2 link set vm-h2-eth0 up
ip netns exec vm-sw tc qdisc add dev vm-s-eth2 root netem delay ${DELAY_MS}ms
ip netns exec vm-h1 ping -c 4 -i 0.3 -W 2 10.0.0.2
if [ "$VM_OVS" = 1 ]; then
  modprobe openvswitch
  /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random --no-monitor >/dev/null
  ovs-vsctl add-br vm-ovs
  for i in 3 4; do
    ip netns add vm-h\$i; ip link add vm-h\$i-eth0 type veth peer name vm-o-eth\$i
    ip link set vm-h\$i-eth0 netns vm-h\$i; ovs-vsctl add-port vm-ovs vm-o-eth\$i; ip link set vm-o-eth\$i up
    ip -n vm-h\$i addr add 10.0.1.\$i/24 dev vm-h\$i-eth0; ip -n vm-h\$i link set vm-h\$i-eth0 up
  done
  tc qdisc add dev vm-o-eth4 root netem delay ${DELAY_MS}ms
  echo "== ovs"; ip netns exec vm-h3 ping -c 4 -i 0.3 -W 2 10.0.1.4
fi
EOF
chmod +x "$GUEST"

step "boot + run guest test"
out=$VM_DIR/guest.out; err=$VM_DIR/guest.err
set +e
timeout --kill-after=10 "$VM_TIMEOUT" vng --run "$KIMG" "${accel_opt[@]}" --force-9p --memory 1G --cpus 2 \
  --rodir=/etc/udev/rules.d="$RULES" --cwd / --exec "$GUEST" </dev/null >"$out" 2>"$err"
rc=$?
set -e
done_step
cat "$out"
if [ $rc = 124 ] || [ $rc = 137 ]; then
  tail -20 "$err"; skip "guest did not finish within ${VM_TIMEOUT}s (accel $VM_ACCEL)"
fi
if [ $rc != 0 ]; then tail -30 "$err"; echo "FAIL: guest script exited $rc"; exit 1; fi

# RTTs must be at least the netem delay (one direction delayed) and not far above it.
fail=0
while read -r min avg; do
  echo "   rtt min ${min} ms, avg ${avg} ms (netem delay ${DELAY_MS} ms)"
  if ! echo "$min >= $DELAY_MS && $min < $DELAY_MS + 15" | bc | grep -qx 1; then fail=1; fi
done < <(sed -n 's#^rtt min/avg/max/mdev = \([0-9.]*\)/\([0-9.]*\)/.*#\1 \2#p' "$out")
n=$(grep -c '^rtt min' "$out" || true)
want=1; [ "$VM_OVS" = 1 ] && want=2
if [ "$fail" = 0 ] && [ "$n" = "$want" ]; then echo "1 passed, 0 failed"; exit 0; fi
echo "FAIL: expected $want ping summaries with min RTT in [${DELAY_MS}, $((DELAY_MS + 15))) ms"
echo "0 passed, 1 failed"; exit 1

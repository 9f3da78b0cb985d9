"""The delay line built with AddressSanitizer and UBSan, fed hostile frames and malformed map files.

Every phase runs the sanitizer build (make -C topologies/delayline asan) in a fresh Wire, sends
raw frames with AF_PACKET sockets opened inside the Wire's namespaces, then asserts the process is
alive, its stderr has no sanitizer report, and an ordinary frame and a ping still cross.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from bufsize.topologies import netns
from bufsize.topologies.wire import Wire

pytestmark = pytest.mark.integration

DELAYLINE_DIR = Path(__file__).resolve().parent.parent / "topologies" / "delayline"
ASAN = DELAYLINE_DIR / "bsz-delayline-asan"
SANITIZER_MARKS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "runtime error:")
FRAME_MAX = 2048  # the delay line's slot size (FRAME_MAX in delayline.c)

ETH_P_ALL, ETH_P_IP, ETH_P_ARP, ETH_P_IPV6 = 0x0003, 0x0800, 0x0806, 0x86DD
ETH_P_8021Q, ETH_P_8021AD, ETH_P_QINQ1 = 0x8100, 0x88A8, 0x9100
SOL_PACKET, PACKET_AUXDATA, PACKET_OUTGOING = 263, 8, 4
TP_STATUS_VLAN_VALID, TP_STATUS_VLAN_TPID_VALID = 1 << 4, 1 << 6


def nsenter(ns: str, argv: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{ns}", "--", *argv]


def raw_socket(ns: str, listen: bool) -> socket.socket:
    """An AF_PACKET socket on e0 of `ns`; a sender's (protocol 0) receives nothing."""
    with netns.entered(ns):
        proto = ETH_P_ALL if listen else 0
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(proto))
        s.bind(("e0", proto))
    if listen:
        s.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    return s


def ip_checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4(src: str, dst: str, payload: bytes, proto: int = 17) -> bytes:
    h = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0, 0x4000, 64, proto, 0,
        socket.inet_aton(src), socket.inet_aton(dst),
    )  # fmt: skip
    return h[:10] + struct.pack("!H", ip_checksum(h)) + h[12:] + payload


def udp(src: str, dst: str, data: bytes, sport: int = 40000, dport: int = 9) -> bytes:
    """An IPv4 UDP packet (checksum 0: none) to the discard port."""
    return ipv4(src, dst, struct.pack("!HHHH", sport, dport, 8 + len(data), 0) + data)


class Rig:
    """A Wire, raw sockets in its end namespaces and the sanitizer delay line in the middle."""

    def __init__(self, wire: Wire, tmp: Path) -> None:
        self.wire, self.tmp = wire, tmp
        self.tx_a, self.tx_b = raw_socket(wire.a, False), raw_socket(wire.b, False)
        self.rx_b, self.rx_a = raw_socket(wire.b, True), raw_socket(wire.a, True)
        self.mac_a, self.mac_b = self.tx_a.getsockname()[4], self.tx_b.getsockname()[4]
        self.proc: subprocess.Popen[str] | None = None
        self.stats_path = tmp / "stats.json"
        self.stderr_path = tmp / "stderr.txt"
        self.probes = 0

    def close(self) -> None:
        for s in (self.tx_a, self.tx_b, self.rx_a, self.rx_b):
            s.close()
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def argv(self, *args: str) -> list[str]:
        return nsenter(self.wire.d, [str(ASAN), "-a", "da", "-b", "db", "-s", str(self.stats_path), "-i", "20", *args])

    def start(self, *args: str) -> None:
        with open(self.stderr_path, "w") as err:
            self.proc = subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=err, text=True, env=SAN_ENV)
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", f"no 'ready' ({line!r}): {self.stderr()}"

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def eth(self, ethertype: int, payload: bytes, forward: bool = True) -> bytes:
        dst, src = (self.mac_b, self.mac_a) if forward else (self.mac_a, self.mac_b)
        return dst + src + struct.pack("!H", ethertype) + payload

    def send(self, frames: Iterable[bytes], forward: bool = True) -> list[bytes]:
        """Sends each frame the kernel accepts; returns those it accepted."""
        sock = self.tx_a if forward else self.tx_b
        sent = []
        for f in frames:
            try:
                sock.send(f)
                sent.append(f)
            except OSError as e:
                # Below the Ethernet header or above the MTU the kernel refuses to send.
                if e.errno not in (errno.EINVAL, errno.EMSGSIZE):
                    raise
        return sent

    def drain(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        try:
            while True:
                sock.recv(65536)
        except BlockingIOError:
            pass
        finally:
            sock.setblocking(True)

    def received(self, until: Callable[[list[bytes]], bool], timeout: float = 5.0, forward: bool = True) -> list[bytes]:
        """Frames arriving at the far end (VLAN tags put back from the kernel's auxdata) until `until`."""
        sock = self.rx_b if forward else self.rx_a
        got: list[bytes] = []
        deadline = time.monotonic() + timeout
        while not until(got):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            sock.settimeout(left)
            try:
                data, anc, _flags, addr = sock.recvmsg(65536, socket.CMSG_SPACE(32))
            except TimeoutError:
                break
            if addr[2] == PACKET_OUTGOING:
                continue
            for level, kind, blob in anc:
                if level == SOL_PACKET and kind == PACKET_AUXDATA:
                    status, _l, _s, _m, _n, tci, tpid = struct.unpack("IIIHHHH", blob[:20])
                    if status & TP_STATUS_VLAN_VALID:
                        tpid = tpid if status & TP_STATUS_VLAN_TPID_VALID else ETH_P_8021Q
                        data = data[:12] + struct.pack("!HH", tpid, tci) + data[12:]
            got.append(data)
        return got

    def probe(self, forward: bool = True, timeout: float = 5.0) -> None:
        """An ordinary UDP frame crosses unchanged."""
        self.probes += 1
        token = b"probe-%d-%d" % (self.probes, random.getrandbits(32))
        src, dst = ("10.9.0.1", "10.9.0.2") if forward else ("10.9.0.2", "10.9.0.1")
        frame = self.eth(ETH_P_IP, udp(src, dst, token), forward)
        self.send([frame], forward)
        got = self.received(lambda g: frame in g, timeout, forward)
        assert frame in got, f"probe {token!r} did not cross ({len(got)} other frames)"

    def ping(self) -> None:
        res = subprocess.run(
            nsenter(self.wire.a, ["ping", "-n", "-q", "-c", "1", "-W", "5", "10.9.0.2"]),
            capture_output=True, text=True, timeout=15,
        )  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr

    def stats(self) -> dict:
        """Stats written after this call (the file is rewritten every 20 ms)."""
        since = time.monotonic_ns()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                s = json.loads(self.stats_path.read_text())
                if s["time_ns"] > since:
                    return s
            except (FileNotFoundError, json.JSONDecodeError):
                pass
            time.sleep(0.01)
        raise AssertionError("stats file not refreshed")

    def assert_clean(self) -> None:
        err = self.stderr()
        assert not any(m in err for m in SANITIZER_MARKS), err

    def wait_stats(self, done: Callable[[dict], bool], timeout: float = 5.0) -> dict:
        """Fresh stats until done(stats) or the timeout; the last ones either way."""
        deadline = time.monotonic() + timeout
        s = self.stats()
        while not done(s) and time.monotonic() < deadline:
            s = self.stats()
        return s

    def settle(self, timeout: float = 10.0) -> None:
        """Until nothing is held and nothing new comes in, so a probe finds the pool free (on a busy
        machine the line may still be working through a backlog when the sender is done)."""
        prev = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s = self.stats()
            now = (s["forward"]["rx_frames"], s["reverse"]["rx_frames"])
            if s["forward"]["held"] == s["reverse"]["held"] == 0 and now == prev:
                return
            prev = now
        raise AssertionError(f"the delay line did not settle: {s}")

    def assert_healthy(self) -> None:
        assert self.proc is not None
        assert self.proc.poll() is None, f"delay line died ({self.proc.returncode}): {self.stderr()}"
        self.assert_clean()
        self.settle()
        self.drain(self.rx_a)
        self.drain(self.rx_b)
        self.probe(forward=True)
        self.probe(forward=False)
        self.ping()
        self.assert_clean()

    def stop(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(timeout=10) == 0, self.stderr()
        self.assert_clean()


SAN_ENV = {
    **os.environ,
    "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1",
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
}


@pytest.fixture(scope="module")
def asan_binary() -> Path:
    subprocess.run(["make", "-s", "-C", str(DELAYLINE_DIR), "asan"], check=True, timeout=120)  # if stale
    return ASAN


@pytest.fixture
def rig(no_leftovers, asan_binary, tmp_path) -> Iterator[Rig]:
    wire = Wire("fz")
    with wire:
        r = Rig(wire, tmp_path)
        try:
            yield r
        finally:
            r.close()
    left = [ns for ns in (wire.a, wire.d, wire.b) if os.path.exists(f"/run/netns/{ns}")]
    assert not left, f"namespaces left behind: {left}"


def test_runt_frames(rig):
    """0..13 bytes (the kernel refuses them at the sender), then a bare Ethernet header up to 41 bytes."""
    rig.start("-f", "1000", "-r", "1000")
    rng = random.Random(1401)
    full = rig.eth(ETH_P_IP, udp("10.9.0.1", "10.9.0.2", bytes(64)))
    runts = [bytes(rng.getrandbits(8) for _ in range(n)) for n in range(14)]
    rig.send(runts)  # Linux refuses them (EINVAL): shorter than the device's minimum header
    truncated = [full[:n] for n in range(14, 42)]  # Ethernet header, then a cut IPv4 header
    truncated += [
        rig.eth(t, full[14:n]) for t in (ETH_P_ARP, ETH_P_IPV6, ETH_P_QINQ1, 0x0000, 0xFFFF) for n in (14, 30)
    ]
    rig.drain(rig.rx_b)
    sent = rig.send(truncated)
    got = rig.received(lambda g: all(f in g for f in sent), 5)
    missing = [f.hex() for f in sent if f not in got]
    assert not missing, f"runts not forwarded unchanged: {missing}"
    for f in sent:  # and the reverse direction, which keys on the destination address
        rig.send([f[6:12] + f[:6] + f[12:]], forward=False)
    rig.assert_healthy()
    rig.stop()


def test_vlan_tagged_frames_keep_their_tags(rig):
    """802.1Q and QinQ frames leave tagged as they came (the kernel strips the outer tag on input)."""
    # A per-host delay tells whether the IPv4 header behind the tags was found.
    mapfile = rig.tmp / "map.txt"
    mapfile.write_text("10.9.0.3 60000 60000\n")
    rig.start("-f", "1000", "-r", "1000", "-m", str(mapfile))
    inner = udp("10.9.0.1", "10.9.0.2", b"vlan-tagged")
    slow = udp("10.9.0.3", "10.9.0.2", b"vlan-tagged-slow")
    q = struct.pack("!HH", 5, ETH_P_IP)
    qinq = struct.pack("!HHHH", 7, ETH_P_8021Q, 5, ETH_P_IP)
    frames = [
        rig.eth(ETH_P_8021Q, q + inner),
        rig.eth(ETH_P_8021Q, struct.pack("!HH", 0, ETH_P_IP) + inner),  # priority tag, VLAN 0
        rig.eth(ETH_P_8021AD, qinq + inner),
        rig.eth(ETH_P_8021Q, struct.pack("!HHHH", 7, ETH_P_8021Q, 5, ETH_P_IP) + inner),  # 802.1Q in 802.1Q
        rig.eth(ETH_P_QINQ1, qinq + inner),  # old QinQ type: the kernel leaves it in place
        rig.eth(ETH_P_8021Q, struct.pack("!HH", 5, ETH_P_ARP) + bytes(28)),
        rig.eth(ETH_P_8021Q, q + inner[:10]),  # tag, then a cut IPv4 header
        rig.eth(ETH_P_8021Q, q + b"\0\0"),  # tag and two bytes
        rig.eth(ETH_P_8021AD, qinq),  # two tags, nothing behind them
        # The kernel drops these on input (its untagging wants 6 bytes past the Ethernet header).
        rig.eth(ETH_P_8021Q, q),
        rig.eth(ETH_P_8021Q, struct.pack("!H", 5)),
        rig.eth(ETH_P_8021Q, q + bytes(1500 - 4 - len(q))),  # a full-size tagged frame (1518 bytes)
    ]
    rig.drain(rig.rx_b)
    sent = rig.send(frames)
    expected = [f for f in sent if len(f) >= 20]
    got = rig.received(lambda g: all(f in g for f in expected), 5)
    missing = [f.hex() for f in expected if f not in got]
    assert not missing, f"tagged frames not forwarded as sent: {missing}"
    # Behind two tags too, the per-host delay applies: the slow host's frame takes 60 ms.
    for tags, ethertype in ((q, ETH_P_8021Q), (qinq, ETH_P_8021AD)):
        frame = rig.eth(ethertype, tags + slow)
        t0 = time.monotonic()
        rig.send([frame])
        assert frame in rig.received(lambda g, f=frame: f in g, 5)
        assert time.monotonic() - t0 >= 0.059, "the IPv4 header behind the VLAN tags was not found"
    rig.assert_healthy()
    rig.stop()


def test_other_ethertypes_and_bad_ipv4_headers(rig):
    rig.start("-f", "50000", "-r", "1000")
    ok = udp("10.9.0.1", "10.9.0.2", b"x" * 40)
    bad = []
    for ihl in (0, 1, 4, 5, 15):
        bad.append(bytes([0x40 | ihl]) + ok[1:])
    for total in (0, 1, 19, 21, 1500, 65535):
        bad.append(ok[:2] + struct.pack("!H", total) + ok[4:])
    bad.append(bytes([0x65]) + ok[1:])  # version 6 under the IPv4 type
    frames = [rig.eth(ETH_P_IP, b) for b in bad]
    frames += [rig.eth(t, ok) for t in (ETH_P_ARP, ETH_P_IPV6, 0x0000, 0x05DC, 0x0600, 0x88CC, 0xFFFF)]
    rig.drain(rig.rx_b)
    sent = rig.send(frames)
    got = rig.received(lambda g: all(f in g for f in sent), 5)
    assert all(f in got for f in sent), "a malformed frame was not forwarded unchanged"
    # Source 0.0.0.0 (a DHCP client) has no map entry: it gets the default 50 ms, not 0.
    frame = rig.eth(ETH_P_IP, udp("0.0.0.0", "255.255.255.255", b"dhcp"))
    t0 = time.monotonic()
    rig.send([frame])
    assert frame in rig.received(lambda g: frame in g, 5)
    assert time.monotonic() - t0 >= 0.049, "0.0.0.0 was taken for a map entry"
    rig.assert_healthy()
    rig.stop()


def test_oversize_frames(rig):
    """Frames at and above the MTU and the pool's 2048-byte slots: forwarded, or dropped and counted."""
    for ns, dev in ((rig.wire.a, "e0"), (rig.wire.d, "da")):  # so the sender can hand the delay line jumbo frames
        subprocess.run(["ip", "-n", ns, "link", "set", dev, "mtu", "9000"], check=True)
    rig.start("-f", "1000", "-r", "1000")
    payload = udp("10.9.0.1", "10.9.0.2", b"")

    def frame(size: int, tagged: bool = False) -> bytes:
        head = rig.eth(ETH_P_8021Q, struct.pack("!HH", 9, ETH_P_IP)) if tagged else rig.eth(ETH_P_IP, b"")
        return head + (payload + bytes(size))[: size - len(head)]

    fits = [frame(1514), frame(1518, tagged=True)]  # db's MTU is 1500: these go on
    too_big_for_db = [frame(1515), frame(2000), frame(FRAME_MAX), frame(FRAME_MAX, tagged=True)]
    oversize = [frame(FRAME_MAX + 1), frame(FRAME_MAX + 1, tagged=True), frame(4000), frame(9014)]
    before = rig.stats()["forward"]
    rig.drain(rig.rx_b)
    assert rig.send(fits + too_big_for_db + oversize) == fits + too_big_for_db + oversize
    got = rig.received(lambda g: all(f in g for f in fits), 5)
    assert all(f in got for f in fits)
    want = (len(oversize), len(too_big_for_db))

    def dropped(s: dict) -> tuple[int, int]:
        f = s["forward"]
        return f["drop_oversize"] - before["drop_oversize"], f["drop_send_error"] - before["drop_send_error"]

    s = rig.wait_stats(lambda s: dropped(s) == want)
    assert dropped(s) == want, s
    rig.assert_healthy()
    rig.stop()


def test_full_pool(rig):
    """A burst far above a 16-frame pool held for 200 ms: the overflow is counted, then it recovers."""
    rig.start("-f", "200000", "-r", "1000", "-n", "16")
    burst = [rig.eth(ETH_P_IP, udp("10.9.0.1", "10.9.0.2", b"burst%d" % i)) for i in range(500)]
    rig.send(burst)
    s = rig.wait_stats(lambda s: s["forward"]["drop_pool_full"] > 0)["forward"]
    assert s["drop_pool_full"] > 0 and s["max_held"] == 16, s
    rig.assert_healthy()
    rig.stop()
    s = json.loads(rig.stats_path.read_text())["forward"]
    assert s["rx_frames"] == s["tx_frames"] + s["drop_pool_full"] + s["drop_oversize"] + s["drop_send_error"]


def random_frames(rng: random.Random, rig: Rig, forward: bool, count: int) -> Iterator[bytes]:
    """Random bytes, often behind a plausible header so the parsing paths are reached."""
    types = (ETH_P_IP, ETH_P_8021Q, ETH_P_8021AD, ETH_P_ARP, ETH_P_IPV6, rng.getrandbits(16))
    for _ in range(count):
        n = rng.choice((rng.randint(14, 64), rng.randint(14, 1514)))
        body = bytearray(rng.getrandbits(8) for _ in range(n))
        kind = rng.random()
        if kind < 0.7:  # addressed to the far end, with a chosen ethertype
            body[:14] = rig.eth(rng.choice(types), b"", forward)
        if kind < 0.35 and n >= 34:  # a likely IPv4 header, addresses those of the map
            off = 14 + 4 * rng.randint(0, 2)
            body[off : off + 1] = bytes([0x40 | rng.randint(0, 15)])
            for a in (off + 12, off + 16):
                if a + 4 <= n:
                    body[a : a + 4] = socket.inet_aton(rng.choice(("10.9.0.1", "10.9.0.2", "10.9.0.3", "0.0.0.0")))
        yield bytes(body)


def test_random_frames(rig):
    """A few thousand seeded random frames each way; bounded in time."""
    mapfile = rig.tmp / "map.txt"
    mapfile.write_text("10.9.0.1 2000 1000\n10.9.0.3 500 0\n10.9.0.2 100 3000\n")
    # A pool large enough that most frames are held and sent, not dropped (test_full_pool drops).
    rig.start("-f", "1000", "-r", "1000", "-n", "4096", "-m", str(mapfile))
    rng = random.Random(14_06)
    deadline = time.monotonic() + 15
    sent = 0
    for batch in range(40):
        for forward in (True, False):
            sent += len(rig.send(random_frames(rng, rig, forward, 50), forward))
        if batch % 10 == 9:
            assert rig.proc.poll() is None, rig.stderr()
        if time.monotonic() > deadline:
            break
    assert sent >= 2000
    rig.assert_healthy()
    rig.stop()


VALID = "10.9.0.1 2000 1000\n"
# (name, content, starts): starts=False means refused with a message and exit status 2.
MAPS: list[tuple[str, bytes, bool]] = [
    ("empty", b"", True),
    ("comments and blank lines", b"# hosts\n\n   \n\t# indented\n" + VALID.encode(), True),
    ("trailing comment", b"10.9.0.1 2000 1000  # host a\n", True),
    ("CRLF line ends", b"10.9.0.1 2000 1000\r\n10.9.0.3 5 5\r\n", True),
    ("no final newline", b"10.9.0.1 2000 1000", True),
    ("same host twice, same delays", (VALID * 2).encode(), True),
    ("very long comment", b"#" + b"x" * 100_000 + b"\n" + VALID.encode(), True),
    ("4096 hosts", b"".join(b"10.%d.%d.1 1 1\n" % (i // 256, i % 256) for i in range(4096)), True),
    ("garbage", b"garbage\n", False),
    ("binary", bytes(range(1, 256)) * 4, False),
    ("NUL inside a line", b"10.9.0.1 2000 1000\x00 junk\n", False),
    ("non-ASCII address", "１０.9.0.1 5 5\n".encode(), False),
    ("non-ASCII delay", "10.9.0.1 ５ 5\n".encode(), False),
    ("Latin-1 junk", b"10.9.0.1 5 5 \xe9\xff\n", False),
    ("missing rev", b"10.9.0.1 2000\n", False),
    ("address only", b"10.9.0.1\n", False),
    ("no address", b"2000 1000\n", False),
    ("extra field", b"10.9.0.1 2000 1000 7\n", False),
    ("junk after a number", b"10.9.0.1 2000x 1000\n", False),
    ("negative fwd", b"10.9.0.1 -5 1000\n", False),
    ("negative rev", b"10.9.0.1 5 -1e-3\n", False),
    ("huge", b"10.9.0.1 1e30 1000\n", False),
    ("huge integer", b"10.9.0.1 5 99999999999999999999999999\n", False),
    ("just above an hour", b"10.9.0.1 3600000001 0\n", False),
    ("overflowing double", b"10.9.0.1 1e999 0\n", False),
    ("nan", b"10.9.0.1 nan 1000\n", False),
    ("inf", b"10.9.0.1 5 inf\n", False),
    ("address 0.0.0.0", b"0.0.0.0 5 5\n", False),
    ("address out of range", b"10.9.0.256 5 5\n", False),
    ("very long line", b"10.9.0.1 " + b"1" * 100_000 + b" 5\n", False),
    ("very long address", b"1" * 300 + b" 5 5\n", False),
    ("same host twice, other delays", (VALID + "10.9.0.1 1 1\n").encode(), False),
    ("4097 hosts", b"".join(b"10.%d.%d.1 1 1\n" % (i // 256, i % 256) for i in range(4097)), False),
]


def mutate(rng: random.Random, text: bytes) -> bytes:
    """A valid map with a few random bytes flipped, inserted or removed."""
    b = bytearray(text)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(b) + 1)
        op = rng.random()
        if op < 0.4 and i < len(b):
            b[i] = rng.choice((rng.getrandbits(8), *b"-.e# \t\n0x9"))
        elif op < 0.8:
            b[i:i] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 8)))
        else:
            del b[i : i + rng.randint(1, 6)]
    return bytes(b)


def test_malformed_map_files(rig):
    """Each map is refused with a message and exit status 2, or the delay line starts and works."""
    rng = random.Random(14_6)
    base = b"# host fwd rev\n10.9.0.1 2000 1000\n10.9.0.3 40000.5 40000\n10.9.0.2 0 0\n"
    cases = [(n, c, s) for n, c, s in MAPS] + [(f"random {i}", mutate(rng, base), None) for i in range(25)]
    cases.append(("a directory", None, False))
    failures = []
    for name, content, starts in cases:
        path = rig.tmp / "map.txt"
        if content is None:
            path = rig.tmp
        else:
            path.write_bytes(content)
        with open(rig.stderr_path, "w") as err:
            p = subprocess.Popen(
                rig.argv("-f", "1000", "-r", "1000", "-n", "64", "-m", str(path)),
                stdout=subprocess.PIPE, stderr=err, text=True, env=SAN_ENV,
            )  # fmt: skip
        rig.proc = p
        ready = p.stdout.readline().strip() == "ready"
        if ready:
            try:
                rig.assert_healthy()
                rig.stop()
            except AssertionError as e:
                failures.append(f"{name}: started but {e}")
                p.kill()
                p.wait()
        else:
            code = p.wait(timeout=10)
            err_text = rig.stderr()
            if (
                code not in (1, 2)
                or not err_text.startswith("bsz-delayline: ")
                or any(m in err_text for m in SANITIZER_MARKS)
            ):
                failures.append(f"{name}: exit {code}, stderr {err_text[:2000]!r}")
        if starts is not None and ready != starts:
            failures.append(f"{name}: {'started' if ready else 'refused'}, expected the other ({rig.stderr()[:300]!r})")
    assert not failures, "\n".join(failures)

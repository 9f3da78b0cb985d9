"""The TCP sockets of a namespace, from the kernel's sock_diag netlink interface (the one `ss` reads).

One netlink socket made inside the namespace (netns.NamespaceSockets), one dump request, the
replies parsed here: no `ip netns exec ss` process per look, which the flow checks did every 50 ms
while hundreds of flows came up (bench/sockdiag_vs_ss.py has the measured difference).
Both families are asked: the dumbbell is IPv4, but a server that listens on a dual-stack socket
(iperf3 does, on `::`) holds its connections as IPv6 sockets with IPv4-mapped addresses, which are
reported here as the IPv4 addresses they are (as `ss` would name them without the ::ffff: prefix).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from dataclasses import dataclass

from bufsize.topologies.netns import NamespaceSockets

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST, NLM_F_DUMP = 0x1, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
INET_DIAG_INFO, INET_DIAG_CONG = 2, 4
TCP_ESTABLISHED, TCP_LISTEN = 1, 10

_NLMSG = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_REQ = struct.Struct("=BBBxI")  # inet_diag_req_v2: family, protocol, extensions, states
_SOCKID = struct.Struct(">HH16s16s4x8x")  # sport, dport (big-endian), src, dst; interface, cookie unused
_MSG = struct.Struct("=BBBB")  # inet_diag_msg: family, state, timer, retransmits (then the sock id)
_MSG_LEN = _MSG.size + _SOCKID.size + 5 * 4  # ... expires, rqueue, wqueue, uid, inode
_RTA = struct.Struct("=HH")
# struct tcp_info (linux/tcp.h): tcpi_snd_cwnd is the 19th u32, after 8 bytes of u8 fields;
# then 24 u32 in all; then the u64s pacing_rate, max_pacing_rate (bytes/s; ~0: no cap set) and
# bytes_acked (since Linux 4.1).
_CWND_AT, _PACING_AT, _BYTES_ACKED_AT = 8 + 4 * 18, 104, 120  # max_pacing_rate sits between (112)


@dataclass(frozen=True)
class TcpSocket:
    state: int  # TCP_ESTABLISHED, TCP_LISTEN, ...
    local: str  # address:port, as ss prints it
    remote: str
    cc: str | None = None  # congestion control (asked with info=True)
    cwnd: int | None = None  # packets
    bytes_acked: int | None = None
    pacing_rate: int | None = None  # bytes/s, what TCP would pace at (computed whether it paces or not)
    max_pacing_rate: int | None = None  # bytes/s: SO_MAX_PACING_RATE, 2**64 - 1 when not set

    @property
    def sport(self) -> int:
        return int(self.local.rsplit(":", 1)[1])

    @property
    def dport(self) -> int:
        return int(self.remote.rsplit(":", 1)[1])


class SockDiagError(OSError):
    pass


def request(states: int, info: bool, seq: int = 1, family: int = socket.AF_INET) -> bytes:
    ext = (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1)) if info else 0
    body = _REQ.pack(family, socket.IPPROTO_TCP, ext, states) + bytes(_SOCKID.size)
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP, seq, 0) + body


def parse(data: bytes) -> tuple[list[TcpSocket], bool]:
    """The sockets in one recv()'s worth of replies, and whether the dump is done."""
    out: list[TcpSocket] = []
    at = 0
    while at + _NLMSG.size <= len(data):
        length, kind, _flags, _seq, _pid = _NLMSG.unpack_from(data, at)
        if length < _NLMSG.size or at + length > len(data):
            raise SockDiagError(f"sock_diag: a reply of {length} bytes at {at} of {len(data)}")
        body = data[at + _NLMSG.size : at + length]
        at += (length + 3) & ~3
        if kind == NLMSG_DONE:
            return out, True
        if kind == NLMSG_ERROR:
            (err,) = struct.unpack_from("=i", body) if len(body) >= 4 else (-1,)
            raise SockDiagError(-err, f"sock_diag: {os.strerror(-err) if err < 0 else 'error reply'}")
        if kind != SOCK_DIAG_BY_FAMILY or len(body) < _MSG_LEN:
            continue
        family, state, _timer, _retr = _MSG.unpack_from(body)
        sport, dport, src, dst = _SOCKID.unpack_from(body, _MSG.size)
        cc = cwnd = acked = pacing = max_pacing = None
        pos = _MSG_LEN
        while pos + _RTA.size <= len(body):
            alen, atype = _RTA.unpack_from(body, pos)
            if alen < _RTA.size:
                break
            value = body[pos + _RTA.size : pos + alen]
            if atype == INET_DIAG_CONG:
                cc = value.split(b"\0", 1)[0].decode(errors="replace")
            elif atype == INET_DIAG_INFO:
                if len(value) >= _CWND_AT + 4:
                    (cwnd,) = struct.unpack_from("=I", value, _CWND_AT)
                if len(value) >= _BYTES_ACKED_AT + 8:
                    pacing, max_pacing, acked = struct.unpack_from("=QQQ", value, _PACING_AT)
            pos += (alen + 3) & ~3
        local, remote = f"{address(family, src)}:{sport}", f"{address(family, dst)}:{dport}"
        out.append(TcpSocket(state, local, remote, cc, cwnd, acked, pacing, max_pacing))
    return out, False


def address(family: int, raw: bytes) -> str:
    """An IPv4 address, an IPv4-mapped IPv6 address as the IPv4 address, or an IPv6 one in brackets."""
    if family == socket.AF_INET:
        return socket.inet_ntoa(raw[:4])
    v6 = ipaddress.IPv6Address(raw[:16])
    return str(v6.ipv4_mapped) if v6.ipv4_mapped else f"[{v6}]"


def tcp_sockets(ns: str, states: tuple[int, ...] = (TCP_ESTABLISHED,), info: bool = False) -> list[TcpSocket]:
    """Every TCP socket of namespace `ns` (IPv4 and IPv6) in one of `states`; with info, its
    congestion control, cwnd, bytes acknowledged and pacing rates too."""
    sockets = NamespaceSockets()
    try:
        s = sockets.socket(ns, socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    finally:
        sockets.close()
    found: list[TcpSocket] = []
    with s:
        s.settimeout(5.0)
        for seq, family in enumerate((socket.AF_INET, socket.AF_INET6), start=1):
            s.sendto(request(sum(1 << st for st in states), info, seq, family), (0, 0))
            done = False
            while not done:
                batch, done = parse(s.recv(1 << 20))
                found += batch
    return found

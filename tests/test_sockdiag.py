"""TCP sockets from sock_diag netlink (topologies/sockdiag.py): the parser on crafted replies, and
the whole path on a real namespace against what `ss` reports for the same connection."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time

import pytest

from bufsize.topologies import netns
from bufsize.topologies.sockdiag import (
    _BYTES_ACKED_AT,
    _CWND_AT,
    _NLMSG,
    INET_DIAG_CONG,
    INET_DIAG_INFO,
    NLMSG_DONE,
    NLMSG_ERROR,
    SOCK_DIAG_BY_FAMILY,
    TCP_ESTABLISHED,
    TCP_LISTEN,
    SockDiagError,
    parse,
    request,
    tcp_sockets,
)


def packed(addr: str) -> bytes:
    return socket.inet_pton(socket.AF_INET6, addr) if ":" in addr else socket.inet_aton(addr) + bytes(12)


def reply(state: int, src: str, sport: int, dst: str, dport: int, cc: bytes | None, info: bytes | None) -> bytes:
    family = socket.AF_INET6 if ":" in src else socket.AF_INET
    body = struct.pack("=BBBB", family, state, 0, 0)
    body += struct.pack(">HH", sport, dport) + packed(src) + packed(dst)
    body += bytes(12) + bytes(20)  # interface, cookie; expires, queues, uid, inode
    for kind, value in ((INET_DIAG_CONG, cc), (INET_DIAG_INFO, info)):
        if value is not None:
            attr = struct.pack("=HH", 4 + len(value), kind) + value
            body += attr + bytes(-len(attr) % 4)
    return _NLMSG.pack(_NLMSG.size + len(body), SOCK_DIAG_BY_FAMILY, 2, 1, 0) + body


def tcp_info(cwnd: int, acked: int) -> bytes:
    info = bytearray(232)
    struct.pack_into("=I", info, _CWND_AT, cwnd)
    struct.pack_into("=Q", info, _BYTES_ACKED_AT, acked)
    return bytes(info)


def test_parse_reads_addresses_cc_cwnd_and_bytes_acked_until_done():
    done = _NLMSG.pack(_NLMSG.size + 4, NLMSG_DONE, 2, 1, 0) + bytes(4)
    data = reply(1, "10.0.0.1", 41000, "10.1.0.1", 5001, b"cubic\0", tcp_info(17, 123456789))
    data += reply(10, "10.1.0.1", 5001, "0.0.0.0", 0, None, None) + done
    data = data[: len(data) - len(done)] + reply(1, "::ffff:10.1.0.1", 5201, "::ffff:10.0.0.1", 41004, None, None)
    data += reply(10, "::", 5201, "::", 0, None, None) + done
    socks, finished = parse(data)
    assert finished
    assert [(s.local, s.remote) for s in socks[2:]] == [("10.1.0.1:5201", "10.0.0.1:41004"), ("[::]:5201", "[::]:0")]
    socks = socks[:2]
    assert [(s.state, s.local, s.remote, s.cc, s.cwnd, s.bytes_acked) for s in socks] == [
        (1, "10.0.0.1:41000", "10.1.0.1:5001", "cubic", 17, 123456789),
        (10, "10.1.0.1:5001", "0.0.0.0:0", None, None, None),
    ]
    assert socks[0].sport == 41000 and socks[0].dport == 5001
    assert parse(data[: len(data) - len(done)])[1] is False  # more to come


def test_parse_refuses_errors_and_truncated_replies():
    error = _NLMSG.pack(_NLMSG.size + 4, NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -1)
    with pytest.raises(SockDiagError, match="not permitted"):
        parse(error)
    whole = reply(1, "10.0.0.1", 1, "10.0.0.2", 2, b"reno\0", tcp_info(1, 1))
    with pytest.raises(SockDiagError, match="reply of"):
        parse(whole[:-8])


def test_request_asks_for_a_dump_of_the_states_and_the_info():
    req = request((1 << TCP_ESTABLISHED) | (1 << TCP_LISTEN), info=True)
    length, kind, flags, _, _ = _NLMSG.unpack_from(req)
    assert length == len(req) == 16 + 56 and kind == SOCK_DIAG_BY_FAMILY and flags == 0x301
    family, proto, ext, states = struct.unpack_from("=BBBxI", req, 16)
    assert (family, proto, states) == (socket.AF_INET, socket.IPPROTO_TCP, (1 << 1) | (1 << 10))
    assert ext == (1 << (INET_DIAG_INFO - 1)) | (1 << (INET_DIAG_CONG - 1))
    assert struct.unpack_from("=BBBxI", request(1 << 1, info=False), 16)[2] == 0


SERVER = """
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
c = socket.create_connection(s.getsockname()); a, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"reno")
c.sendall(b"x" * 200000); time.sleep(0.5)
# A dual-stack listener, as iperf3's: an IPv4 client's connection is an IPv6 socket on its side.
s6 = socket.socket(socket.AF_INET6); s6.bind(("::", 0)); s6.listen()
c6 = socket.create_connection(("127.0.0.1", s6.getsockname()[1])); a6, _ = s6.accept()
print(s.getsockname()[1], c.getsockname()[1], s6.getsockname()[1], flush=True); time.sleep(30)
"""


def test_a_real_namespace_reads_as_ss_reads_it(root):
    name = f"{netns.PREFIX}sd{time.monotonic_ns() % 10**6}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    proc = None
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        proc = subprocess.Popen(["ip", "netns", "exec", name, sys.executable, "-c", SERVER], stdout=subprocess.PIPE,
                                text=True)  # fmt: skip
        assert proc.stdout is not None
        port, client, port6 = map(int, proc.stdout.readline().split())
        socks = tcp_sockets(name, (TCP_ESTABLISHED, TCP_LISTEN), info=True)
        listen = [s for s in socks if s.state == TCP_LISTEN]
        sender = next(s for s in socks if s.state == TCP_ESTABLISHED and s.sport == client)
        assert sorted(s.local for s in listen) == sorted([f"127.0.0.1:{port}", f"[::]:{port6}"])
        accepted = [s for s in socks if s.state == TCP_ESTABLISHED and s.sport == port6]
        assert [s.local for s in accepted] == [f"127.0.0.1:{port6}"]  # IPv4-mapped, shown as IPv4
        ss = subprocess.run(["ip", "netns", "exec", name, "ss", "-Htin", "state", "established", f"sport = :{client}"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
        fields = dict(f.split(":", 1) for f in ss.split() if f.startswith(("cwnd:", "bytes_acked:")))
        assert sender.cc == "reno" and " reno " in f" {ss} "
        assert sender.cwnd == int(fields["cwnd"]) and 0 < sender.bytes_acked == int(fields["bytes_acked"])
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        subprocess.run(["ip", "netns", "del", name], check=False)

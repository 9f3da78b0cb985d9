"""The monitors' parsers on generated input: what the kernel writes is read back exactly, and anything
else is refused with the parser's own error, never a crash of another kind (Hypothesis).

- the cwnd trace (monitors/cwnd.py): tcp_probe lines of any values, among lines of other events;
- the TCP counters of /proc/net/snmp and netstat (monitors/tcpstats.py);
- sock_diag's netlink replies (topologies/sockdiag.py): any bytes, and replies of any sockets.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from test_sockdiag import reply, tcp_info

from bufsize.monitors.cwnd import parse as parse_cwnd
from bufsize.monitors.tcpstats import parse_proc_counters
from bufsize.topologies.sockdiag import SockDiagError
from bufsize.topologies.sockdiag import parse as parse_sockdiag
from bufsize.topologies.tracefs import TraceFormatError

CASES = settings(max_examples=300, deadline=None)
u32 = st.integers(0, 2**32 - 1)
ports = st.integers(1, 65535)
ipv4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))


def probe_line(t: float, src: str, cwnd: int, ssthresh: int, srtt: int) -> bytes:
    return (f"   bsz-delayline-4477    [001] ..s2.  {t:.6f}: tcp_probe: family=AF_INET src={src} "
            f"dest=10.0.0.1:5001 mark=0x0 data_len=0 snd_nxt=0x1 snd_una=0x1 snd_cwnd={cwnd} "
            f"ssthresh={ssthresh} snd_wnd=198656 srtt={srtt} rcv_wnd=64512\n").encode()  # fmt: skip


events = st.tuples(st.floats(0, 1e6, allow_nan=False), st.tuples(ipv4, ports).map(lambda a: f"{a[0]}:{a[1]}"),
                   u32, u32, u32)  # fmt: skip
other_lines = st.lists(st.sampled_from([b"garbage line\n", b"  <idle>-0 [000] d.h. 1.0: sched_wakeup: comm=x\n",
                                        b"\n"]), max_size=3)  # fmt: skip


@CASES
@given(st.lists(events, max_size=20), other_lines)
def test_every_tcp_probe_line_is_read_back_exactly(evs, others):
    chunk = b"".join(probe_line(*e) for e in evs) + b"".join(others)
    got = parse_cwnd(chunk)
    assert [(g.flow, g.cwnd, g.ssthresh, g.srtt_us) for g in got] == [(e[1], e[2], e[3], e[4]) for e in evs]
    assert all(abs(g.t - round(e[0], 6)) < 1e-6 * max(1.0, e[0]) for g, e in zip(got, evs, strict=True))


@CASES
@given(st.binary(max_size=400).map(lambda b: b + b": tcp_probe: " + b))
def test_a_tcp_probe_line_of_another_format_is_refused_by_name(data):
    try:
        parse_cwnd(data)
    except TraceFormatError as e:
        assert "tcp_probe" in str(e)


names = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)


@CASES
@given(st.dictionaries(names, st.dictionaries(names, st.integers(-(2**63), 2**64), min_size=1, max_size=8),
                       min_size=1, max_size=4))  # fmt: skip
def test_proc_counters_are_read_back_exactly(sections):
    text = "".join(f"{s}: {' '.join(f)}\n{s}: {' '.join(map(str, f.values()))}\n" for s, f in sections.items())
    assert parse_proc_counters(text) == sections


@CASES
@given(st.text(max_size=300))
def test_proc_counters_of_any_text_are_read_or_refused_as_a_value_error(text):
    try:
        parsed = parse_proc_counters(text)
    except ValueError:
        return
    assert all(isinstance(v, int) for fields in parsed.values() for v in fields.values())


@CASES
@given(st.binary(max_size=600))
def test_any_netlink_bytes_are_parsed_or_refused_as_a_sock_diag_error(data):
    try:
        socks, done = parse_sockdiag(data)
    except SockDiagError:
        return
    assert isinstance(done, bool) and all(s.local and s.remote for s in socks)


@CASES
@given(st.lists(st.tuples(st.integers(1, 11), ipv4, ports, ipv4, ports, st.sampled_from([b"reno\0", b"cubic\0", None]),
                          st.one_of(st.none(), st.tuples(u32, st.integers(0, 2**64 - 1)))),
                max_size=8))  # fmt: skip
def test_replies_of_any_sockets_are_read_back_exactly(socks):
    data = b"".join(
        reply(st_, s, sp, d, dp, cc, tcp_info(*info) if info else None) for st_, s, sp, d, dp, cc, info in socks
    )
    data += struct.pack("=IHHII", 20, 3, 2, 1, 0) + bytes(4)  # NLMSG_DONE
    got, done = parse_sockdiag(data)
    assert done
    assert [(g.state, g.local, g.remote, g.cc, g.cwnd, g.bytes_acked) for g in got] == [
        (st_, f"{s}:{sp}", f"{d}:{dp}", cc.rstrip(b"\0").decode() if cc else None, info[0] if info else None,
         info[1] if info else None)
        for st_, s, sp, d, dp, cc, info in socks
    ]  # fmt: skip

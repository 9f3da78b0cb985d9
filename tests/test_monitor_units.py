"""Monitor logic that needs no network: fidelity summaries and drop accounting."""

from __future__ import annotations

import pytest

from monitors.fidelity import EVENT_BYTES, MIN_BUFFER_KB, FidelityUnavailable, summarize, trace_buffer_kb
from topologies import FRAME_BYTES
from topologies.tracefs import instance_overruns

IDEAL_S = FRAME_BYTES * 8 / 62.5e6


def test_perfect_pacing_has_no_gaps_off():
    times = [i * IDEAL_S for i in range(1000)]
    s = summarize(times, 62.5)
    assert s["median_gap_us"] == pytest.approx(193.8, abs=0.1)
    assert s["frac_gt10"] == 0 and s["gaps_busy"] == 999


def test_clumps_are_counted_and_idle_gaps_excluded():
    # Pairs of back-to-back frames every two frame times: half the gaps ~0, half ~2x ideal.
    times = []
    t = 0.0
    for _ in range(500):
        times += [t, t + 1e-6]
        t += 2 * IDEAL_S
    times.append(t + 1.0)  # one long idle spell: not a busy-period gap
    s = summarize(times, 62.5)
    assert s["gaps_idle_excluded"] == 1
    assert s["frac_gt50"] == pytest.approx(1.0, abs=0.01)
    assert s["frac_gt100"] == pytest.approx(0.0, abs=0.01)


def test_idle_link_is_refused_not_invented():
    with pytest.raises(FidelityUnavailable, match="not busy"):
        summarize([0.0, 1.0, 2.0], 62.5)
    with pytest.raises(FidelityUnavailable):
        summarize([], 62.5)


def test_trace_buffer_holds_twice_the_departures_and_grows_with_rate_and_time():
    for rate, seconds in ((62.5, 2.0), (155, 2.0), (1000, 2.0), (62.5, 10.0)):
        departures = rate * 1e6 / (FRAME_BYTES * 8) * seconds
        assert trace_buffer_kb(rate, seconds) * 1024 >= 2 * departures * EVENT_BYTES
    assert trace_buffer_kb(1000, 2.0) > 8 * trace_buffer_kb(62.5, 2.0)
    assert trace_buffer_kb(62.5, 10.0) > 4 * trace_buffer_kb(62.5, 2.0)
    # The paper's link: about a megabyte and a half, not the 64 MB per CPU allocated mid-run before.
    assert MIN_BUFFER_KB <= trace_buffer_kb(62.5, 2.0) <= 2048
    assert trace_buffer_kb(1, 0.5) == MIN_BUFFER_KB


def test_overruns_are_summed_over_cpus_and_missing_stats_read_zero(tmp_path):
    assert instance_overruns(tmp_path) == 0
    for cpu, n in ((0, 3), (1, 4)):
        d = tmp_path / "per_cpu" / f"cpu{cpu}"
        d.mkdir(parents=True)
        (d / "stats").write_text(f"entries: 10\noverrun: {n}\ncommit overrun: 9\nbytes: 100\n")
    assert instance_overruns(tmp_path) == 7


# ---- queue statistics, tcp_probe parsing, netlink decoding, plots ---------------------------------

LINE = (
    b"   bsz-delayline-4477    [001] ..s2.  8556.007407: tcp_probe: family=AF_INET src=10.0.1.1:48060 "
    b"dest=10.0.0.1:5001 mark=0x0 data_len=0 snd_nxt=0x175c604d snd_una=0x175c05cd snd_cwnd=16 ssthresh=16 "
    b"snd_wnd=198656 srtt=22124 rcv_wnd=64512 sock_cookie=335b skbaddr=00000000a191a138 skaddr=000000004801ef33\n"
)


def test_tcp_probe_lines_parse_into_windows():
    from monitors.cwnd import parse

    other = LINE.replace(b"48060", b"48062").replace(b"snd_cwnd=16", b"snd_cwnd=200").replace(b"8556.007407", b"8556.1")
    events = parse(LINE + other + b"garbage line\n")
    assert [(e.flow, e.cwnd, e.ssthresh, e.srtt_us) for e in events] == [
        ("10.0.1.1:48060", 16, 16, 22124),
        ("10.0.1.1:48062", 200, 16, 22124),
    ]
    assert events[1].t == pytest.approx(8556.1)


def test_queue_stats_between_times():
    from monitors.recorder import queue_stats
    from topologies.qdisc_stats import QdiscSample

    samples = [
        QdiscSample(i / 100, 0, 0, q, q * FRAME_BYTES, i // 50, 10 * FRAME_BYTES)
        for i, q in enumerate([0] * 50 + [8] * 50)
    ]
    whole = queue_stats(samples)
    assert whole["samples"] == 100 and whole["empty_fraction"] == 0.5 and whole["max_packets"] == 8
    assert whole["mean_packets"] == 4 and whole["drops"] == 1 and whole["max_sample_gap_ms"] == pytest.approx(10)
    late = queue_stats(samples, 0.5, 0.99)
    assert late["empty_fraction"] == 0 and late["mean_packets"] == 8 and late["drops"] == 0
    assert queue_stats(samples, 5, 6) == {"samples": 0}


def test_netlink_qdisc_answer_decodes_and_errors_raise():
    import struct

    from topologies import netlink as nl
    from topologies import qdisc_stats as q

    def nla(kind: int, payload: bytes) -> bytes:
        pad = (4 - len(payload) % 4) % 4
        return nl.NLA.pack(nl.NLA.size + len(payload), kind) + payload + b"\0" * pad

    stats = nla(q.TCA_STATS_BASIC, q.BASIC.pack(123456, 99)) + nla(
        q.TCA_STATS_QUEUE, q.QUEUE.pack(7, 7 * 1514, 3, 0, 0)
    )
    attrs = nla(q.TCA_KIND, b"bfifo\0") + nla(q.TCA_OPTIONS, struct.pack("=I", 151400)) + nla(q.TCA_STATS2, stats)
    body = q.TCMSG.pack(0, 5, 0x100000, 0x10001, 0) + attrs
    msg = nl.NLMSG.pack(nl.NLMSG.size + len(body), q.RTM_NEWQDISC, 0, 1, 0) + body
    s = q.decode(msg, 1.5)
    assert (s.bytes, s.packets, s.qlen, s.backlog, s.drops, s.limit, s.t) == (123456, 99, 7, 10598, 3, 151400, 1.5)
    err = nl.NLMSG.pack(nl.NLMSG.size + 4, nl.NLMSG_ERROR, 0, 1, 0) + struct.pack("=i", -2)
    with pytest.raises(OSError, match="No such file"):
        q.decode(err, 0)


def test_cwnd_histogram_uses_the_buffer_asked_for_when_sampled():
    from monitors.plots import hist_limit

    rows = [{"limit_bytes": "1514"}] * 30 + [{"limit_bytes": "3028"}] * 50
    assert hist_limit(rows, 1514) == 1514  # the answer's buffer, sampled enough
    assert hist_limit(rows, 4542) == 3028  # not sampled: the most sampled one
    assert hist_limit([{"limit_bytes": "None"}], None) is None


def test_netlink_link_answer_decodes_stats64():
    from topologies import counters as c
    from topologies import netlink as nl

    stats = c.STATS64.pack(10, 20, 1000, 30280, 0, 0, 3, 4)
    attr = nl.NLA.pack(nl.NLA.size + 4, 3) + b"eth\0" + nl.NLA.pack(nl.NLA.size + len(stats), c.IFLA_STATS64) + stats
    body = c.IFINFOMSG.pack(0, 1, 7, 0, 0) + attr
    msg = nl.NLMSG.pack(nl.NLMSG.size + len(body), c.RTM_NEWLINK, 0, 1, 0) + body
    s = c.decode_link(msg, 2.0)
    assert (s.tx_bytes, s.tx_packets, s.tx_dropped, s.rx_bytes, s.rx_dropped, s.t) == (30280, 20, 4, 1000, 3, 2.0)

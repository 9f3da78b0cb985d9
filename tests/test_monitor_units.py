"""Monitor logic that needs no network: fidelity summaries and drop accounting."""

from __future__ import annotations

import random

import pytest

from bufsize.monitors.fidelity import (
    EVENT_BYTES,
    MIN_BUFFER_KB,
    FidelityUnavailable,
    departure_lags,
    summarize,
    trace_buffer_kb,
)
from bufsize.monitors.tcpstats import counter_delta, parse_proc_counters, pick_counters, recovery_shares, twin_counters
from bufsize.topologies import FRAME_BYTES
from bufsize.topologies.tracefs import instance_overruns

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


# ---- lag behind the ideal service curve, in frames ------------------------------------------------

GIGABIT_S = FRAME_BYTES * 8 / 1e9
TRACE_T0 = 8556.007407  # trace timestamps are seconds since boot: large next to a frame time


def test_lag_of_perfect_pacing_is_zero_even_far_from_time_zero():
    for rate, ideal in ((62.5, IDEAL_S), (1000, GIGABIT_S)):
        s = summarize([TRACE_T0 + k * ideal for k in range(250_000 if rate == 1000 else 1000)], rate)
        assert (s["lag_p50_frames"], s["lag_p99_frames"], s["lag_max_frames"]) == (0, 0, 0), s
        assert s["busy_periods"] == 1 and s["lag_departures"] == s["departures"]


def test_lag_of_back_to_back_pairs_is_about_one_frame():
    # HTB clumps: two frames 1 us apart, then a wait of two frame times. The first of each pair is
    # a frame behind the curve anchored at the early second one, the second is on it.
    times = []
    for i in range(500):
        times += [i * 2 * IDEAL_S, i * 2 * IDEAL_S + 1e-6]
    lags, periods = departure_lags(times, 62.5)
    assert periods == 1 and len(lags) == 1000
    assert lags[2::2] == pytest.approx([1 - 1e-6 / IDEAL_S] * 499, abs=1e-6)
    assert lags[1::2] == pytest.approx([0] * 500, abs=1e-9)
    s = summarize(times, 62.5)
    assert s["lag_max_frames"] == pytest.approx(1, abs=0.01) and s["lag_p99_frames"] == pytest.approx(1, abs=0.01)
    assert 0 <= s["lag_p50_frames"] <= 1


def test_lag_grows_through_the_busy_period_of_a_slow_link():
    # At 0.99 of C each departure falls 1/0.99 - 1 = 0.0101 frame further behind: 10.09 at the 1000th.
    times = [k * IDEAL_S / 0.99 for k in range(1000)]
    lags, _ = departure_lags(times, 62.5)
    assert all(b > a for a, b in zip(lags, lags[1:], strict=False))
    s = summarize(times, 62.5)
    assert s["lag_max_frames"] == pytest.approx(999 * (1 / 0.99 - 1), abs=0.01)
    assert s["lag_p50_frames"] == pytest.approx(s["lag_max_frames"] / 2, abs=0.02)
    assert s["lag_p99_frames"] == pytest.approx(0.99 * s["lag_max_frames"], abs=0.01)
    assert s["frac_gt10"] == 0  # every gap is only 1 % long: the gap fractions cannot see it


def test_a_late_departure_shows_its_lag_until_it_is_caught_up():
    # Departure 500 leaves three frame times late, the next three go 1 us apart behind it, and from
    # 504 on the link is on time again: lag 3, 2, 1, ~0, then 0.
    times = [k * IDEAL_S for k in range(1000)]
    times[500] = 503 * IDEAL_S
    for j, k in enumerate((501, 502, 503), 1):
        times[k] = 503 * IDEAL_S + j * 1e-6
    lags, _ = departure_lags(times, 62.5)
    assert lags[499:505] == pytest.approx([0, 3, 2, 1, 0, 0], abs=0.02)
    assert max(lags[504:]) == 0 and max(lags[:500]) == 0
    s = summarize(times, 62.5)
    assert s["lag_max_frames"] == pytest.approx(3, abs=0.001)
    assert s["lag_p99_frames"] == s["lag_p50_frames"] == 0  # 4 late departures in 1000: under the 1 %


def test_lag_restarts_in_each_busy_period_and_lone_departures_are_left_out():
    # Three busy periods 1 s apart (slow, perfect, slow) and a lone departure between two of them.
    # Carried over an idle gap, the anchor would read the second period as ~5000 frames behind.
    times: list[float] = []
    for start, speed in ((0.0, 0.99), (1.0, 1.0), (2.0, 0.99)):
        times += [start + k * IDEAL_S / speed for k in range(300)]
    times.insert(600, 1.5)
    lags, periods = departure_lags(times, 62.5)
    assert periods == 3 and len(lags) == 900
    assert lags[300:600] == pytest.approx([0] * 300, abs=1e-6)
    assert lags[0] == lags[300] == lags[600] == 0
    s = summarize(times, 62.5)
    assert s["lag_max_frames"] == pytest.approx(299 * (1 / 0.99 - 1), abs=0.01)
    assert (s["busy_periods"], s["lag_departures"], s["gaps_idle_excluded"]) == (3, 900, 3)


def test_lag_stays_under_a_frame_where_timestamp_noise_swamps_the_gap_fractions():
    # 1 Gb/s, each departure up to 2 us early or late and the timestamp rounded to the microsecond
    # as ftrace prints it: ~40 % of gaps read more than 10 % (1.2 us) off, four times the flag's
    # threshold, on a link that keeps C; its lag is bounded by (4 + 1) us / 12.1 us = 0.41 frame.
    rng = random.Random(29)
    times = [round(TRACE_T0 + k * GIGABIT_S + rng.uniform(-2e-6, 2e-6), 6) for k in range(20_000)]
    s = summarize(times, 1000)
    assert s["frac_gt10"] > 0.3
    assert s["lag_max_frames"] <= 0.42 and s["busy_periods"] == 1


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
    from bufsize.monitors.cwnd import parse

    other = LINE.replace(b"48060", b"48062").replace(b"snd_cwnd=16", b"snd_cwnd=200").replace(b"8556.007407", b"8556.1")
    events = parse(LINE + other + b"garbage line\n")
    assert [(e.flow, e.cwnd, e.ssthresh, e.srtt_us) for e in events] == [
        ("10.0.1.1:48060", 16, 16, 22124),
        ("10.0.1.1:48062", 200, 16, 22124),
    ]
    assert events[1].t == pytest.approx(8556.1)


def test_a_tcp_probe_format_the_parser_does_not_know_stops_the_trace_with_the_line():
    from bufsize.monitors.cwnd import parse
    from bufsize.topologies.tracefs import TraceFormatError, check_all_parsed

    renamed = LINE.replace(b"snd_cwnd=", b"cwnd=")  # a kernel that renamed one field
    with pytest.raises(TraceFormatError, match=r"1 of 2 trace lines .* the first: .*cwnd=16") as e:
        parse(LINE + renamed)
    assert "snd_cwnd" not in str(e.value).split("the first:")[1]
    check_all_parsed(b"", "tcp_probe", 0)  # no events at all is no format problem
    with pytest.raises(TraceFormatError, match="net_dev_xmit: 1 of 1"):
        check_all_parsed("  x-1 [000] 5.0: net_dev_xmit: dev=eth0 len=1514 rc=0\n", "net_dev_xmit", 0)


def test_queue_stats_between_times():
    from bufsize.monitors.recorder import queue_stats
    from bufsize.topologies.qdisc_stats import QdiscSample

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

    from bufsize.topologies import netlink as nl
    from bufsize.topologies import qdisc_stats as q

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
    from bufsize.monitors.plots import hist_limit

    rows = [{"limit_bytes": "1514"}] * 30 + [{"limit_bytes": "3028"}] * 50
    assert hist_limit(rows, 1514) == 1514  # the answer's buffer, sampled enough
    assert hist_limit(rows, 4542) == 3028  # not sampled: the most sampled one
    assert hist_limit([{"limit_bytes": "None"}], None) is None


def test_netlink_link_answer_decodes_stats64():
    from bufsize.topologies import counters as c
    from bufsize.topologies import netlink as nl

    stats = c.STATS64.pack(10, 20, 1000, 30280, 0, 0, 3, 4)
    attr = nl.NLA.pack(nl.NLA.size + 4, 3) + b"eth\0" + nl.NLA.pack(nl.NLA.size + len(stats), c.IFLA_STATS64) + stats
    body = c.IFINFOMSG.pack(0, 1, 7, 0, 0) + attr
    msg = nl.NLMSG.pack(nl.NLMSG.size + len(body), c.RTM_NEWLINK, 0, 1, 0) + body
    s = c.decode_link(msg, 2.0)
    assert (s.tx_bytes, s.tx_packets, s.tx_dropped, s.rx_bytes, s.rx_dropped, s.t) == (30280, 20, 4, 1000, 3, 2.0)


def test_the_progress_line_names_the_shaper_gaps_and_lag_or_why_there_are_none():
    from bufsize.scaffold.experiment import describe_fidelity

    fid = {"available": True, "frac_gt10": 0.0123, "frac_gt25": 0.004, "lag_p50_frames": 0.0,
           "lag_p99_frames": 0.25, "lag_max_frames": 3.5}  # fmt: skip
    line = describe_fidelity(fid, "line")
    assert "(line)" in line and "1.2% of busy gaps >10 % off" in line and "0.00/0.25/3.50 frames" in line
    old = {k: v for k, v in fid.items() if not k.startswith("lag")}  # results from before the lag
    assert "lag" not in describe_fidelity(old, "htb")
    assert "not measured: no trace" in describe_fidelity({"available": False, "reason": "no trace"}, "htb")


SNMP = """Ip: Forwarding DefaultTTL
Ip: 2 64
Tcp: RtoAlgorithm RtoMin OutSegs RetransSegs
Tcp: 1 200 5000 120
"""
NETSTAT = """TcpExt: SyncookiesSent TCPTimeouts TCPLossProbes TCPSackRecovery
TcpExt: 0 7 3 40
IpExt: InNoRoutes
IpExt: 0
"""


def test_tcp_counters_are_read_by_name_and_a_field_this_kernel_lacks_reads_zero():
    got = pick_counters({"snmp": SNMP, "netstat": NETSTAT})
    assert got == {"out_segs": 5000, "retrans_segs": 120, "timeouts": 7, "loss_probes": 3, "sack_recoveries": 40,
                   "reno_recoveries": 0, "spurious_rtos": 0}  # fmt: skip
    shares = recovery_shares(got)
    assert shares == {"timeouts_per_retrans": 0.0583, "probes_per_retrans": 0.025, "recoveries_per_retrans": 0.3333}
    assert recovery_shares(dict.fromkeys(got, 0))["timeouts_per_retrans"] is None  # nothing sent again
    before = dict.fromkeys(got, 1)
    assert counter_delta(before, got)["timeouts"] == 6


@pytest.mark.parametrize(
    "text",
    ["Tcp: OutSegs RetransSegs\nTcp: 5\n", "Tcp: OutSegs\nUdp: 5\n"],
)
def test_tcp_counter_lines_that_do_not_pair_up_are_refused(text):
    with pytest.raises(ValueError, match="unexpected /proc counter lines"):
        parse_proc_counters(text)


def test_the_twins_counts_take_the_kernels_names():
    ivs = [{"out_segs": 10, "retrans_segs": 2, "timeouts": 1, "recoveries": 1}, {"out_segs": 5, "retrans_segs": 1,
           "timeouts": 0, "recoveries": 2}]  # fmt: skip
    assert twin_counters(ivs) == {"out_segs": 12, "retrans_segs": 3, "timeouts": 1, "loss_probes": 0,
                                  "sack_recoveries": 3}  # fmt: skip


def test_steal_is_its_own_share_and_part_of_busy():
    """The hypervisor's steal counts as busy (the emulation's CPU did not get it) and is recorded apart."""
    from collections import namedtuple

    from bufsize.monitors.cpu import share_between

    Times = namedtuple("Times", "user system idle iowait softirq steal")
    share = share_between(Times(0, 0, 0, 0, 0, 0), Times(50, 10, 25, 5, 4, 6))
    assert share.idle == pytest.approx(0.30) and share.busy == pytest.approx(0.70)
    assert share.steal == pytest.approx(0.06) and share.softirq == pytest.approx(0.04)
    assert share.to_dict() == {"busy": 0.7, "softirq": 0.04, "idle": 0.3, "steal": 0.06}
    NoSteal = namedtuple("NoSteal", "user system idle")  # a kernel or platform without the field
    assert share_between(NoSteal(0, 0, 0), NoSteal(1, 1, 2)).steal == 0.0


def test_a_probe_names_the_hypervisors_steal_only_from_the_threshold():
    """The progress line's steal note: absent up to STEAL_LIMIT (where a result's caution starts too)
    and in results recorded before steal was."""
    from bufsize.monitors.cpu import STEAL_LIMIT, steal_note
    from bufsize.scaffold.cautions import MAX_STEAL_SHARE

    assert MAX_STEAL_SHARE == STEAL_LIMIT
    assert steal_note({"busy": 0.8, "steal": STEAL_LIMIT}) == ""
    assert steal_note({"busy": 0.8}) == ""
    assert steal_note({"busy": 0.8, "steal": 0.051}) == ", hypervisor steal 5.1%"
    assert steal_note({"steal": STEAL_LIMIT * 1.01}) != ""


def test_the_machines_idle_per_second_is_the_mean_over_cores_within_the_window():
    """One reader of the recorder's per-core rows (t, core, busy, softirq, idle, steal) for the run
    summary and the short-flow runs' CPU flag: a short-flow copy unpacking five values broke when
    steal was added."""
    from bufsize.monitors.recorder import idle_per_second

    rows = [(1.0, 0, 0.6, 0.1, 0.4, 0.02), (1.0, 1, 1.0, 0.0, 0.0, 0.0),
            (2.0, 0, 0.8, 0.1, 0.2, 0.05), (2.0, 1, 0.9, 0.0, 0.1, 0.0), (3.0, 0, 0.0, 0.0, 1.0, 0.0)]  # fmt: skip
    assert idle_per_second(rows) == pytest.approx([0.2, 0.15, 1.0])
    assert idle_per_second(rows, 1.5, 2.5) == pytest.approx([0.15])
    assert idle_per_second(rows, 5.0, 6.0) == []

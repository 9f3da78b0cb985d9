"""The Fig 10 series: its points, its refusal of other settings, and its table from results."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from bufsize.shortflows.fig10 import Fig10Spec, fig10_rows, write_fig10_report
from bufsize.shortflows.series import EmulatedPoints, open_series
from bufsize.topologies.errors import UsageError


def test_points_cover_every_rate_and_length_at_the_asked_load() -> None:
    spec = Fig10Spec(rates_mbps=[5, 10], lengths=[2, 14])
    pts = spec.points()
    assert [p[0] for p in pts] == ["r5-l2", "r5-l14", "r10-l2", "r10-l14"]
    for _name, cfg, buffer_bytes, opts in pts:
        assert opts.workload.load == 0.8 and opts.initcwnd == 2 and opts.long_flows == 0
        assert opts.workload.duration_s == spec.warmup_s + spec.duration_s
        assert cfg.hosts == 10 and buffer_bytes == 2000 * 1514
    assert pts[1][3].workload.sizes == "fixed:14"


def test_bad_lengths_are_refused() -> None:
    with pytest.raises(UsageError):
        Fig10Spec(lengths=[0]).validate()
    with pytest.raises(UsageError):
        Fig10Spec(lengths=[]).validate()


def test_a_series_directory_refuses_other_settings(tmp_path) -> None:
    open_series(tmp_path, Fig10Spec(), EmulatedPoints("delayline"))
    open_series(tmp_path, Fig10Spec(), EmulatedPoints("delayline"))  # the same settings resume
    with pytest.raises(UsageError, match="other settings"):
        open_series(tmp_path, Fig10Spec(duration_s=10), EmulatedPoints("delayline"))


def test_a_series_made_before_a_setting_existed_resumes_at_its_default_only(tmp_path) -> None:
    from bufsize.shortflows.transfer import TransferSpec

    made = asdict(TransferSpec())
    for k in ("initcwnd", "max_window"):  # a transfer series from before these two settings
        del made[k]
    (tmp_path / "series.json").write_text(json.dumps({"experiment": "transfer", "spec": made}))
    open_series(tmp_path, TransferSpec(), EmulatedPoints("delayline"))
    for changed in (TransferSpec(max_window=20), TransferSpec(initcwnd=2)):
        with pytest.raises(UsageError, match="other settings"):
            open_series(tmp_path, changed, EmulatedPoints("delayline"))


def test_transfer_points_carry_the_initial_window_and_the_window_cap() -> None:
    from bufsize.shortflows.transfer import TransferSpec

    plain = TransferSpec().points()
    assert {(o.initcwnd, o.max_window, o.max_window_bytes()) for *_, o in plain} == {(None, None, 0)}
    capped = TransferSpec(initcwnd=2, max_window=20).points()
    assert len(capped) == len(plain) == 4
    assert {(o.initcwnd, o.max_window, o.max_window_bytes()) for *_, o in capped} == {(2, 20, 20 * 1448)}
    for bad in (1, 1001):
        with pytest.raises(UsageError, match="--max-window"):
            TransferSpec(max_window=bad).validate()


def fake_result(mean_q: float, f10: float) -> dict:
    return {
        "model": {"initial_window": 2, "mean_queue_packets_f10": f10, "kappa_f11": 0.2},
        "fct_by_size": [{"packets": "14", "median_s": 0.05}],
        "transfers": {
            "offered_load_in_window": 0.79,
            "in_window": {"done": 500},
            "open_loop_lateness": {"p99_s": 0.001},
        },
        "utilization": 0.8,
        "queue": {"mean_packets": mean_q + 1, "mean_bytes": mean_q * 1514},
        "queue_tail_kappa": 0.25,
        "loss_rate": 0.0,
        "valid": True,
    }


def test_table_puts_measurement_beside_the_model(tmp_path) -> None:
    spec = Fig10Spec(rates_mbps=[5], lengths=[14, 30])
    (tmp_path / "r5-l14").mkdir()
    (tmp_path / "r5-l14" / "result.json").write_text(json.dumps(fake_result(9.0, 10.0)))
    rows = fig10_rows(tmp_path, spec)  # r5-l30 has no result yet: skipped, not invented
    assert len(rows) == 1 and rows[0]["packets"] == 14 and rows[0]["fct_median_ms"] == 50.0
    write_fig10_report(tmp_path, rows, spec)
    table = (tmp_path / "table.md").read_text()
    assert "| 5 | 14 | 2 | 0.790 | 500 | 9.0 | 10.0 | 0.90 | 0.25 | 0.2 | 1.25 |" in table
    assert (tmp_path / "figure.png").stat().st_size > 1000


def test_loss_points_reproduce_seed_001_traffic() -> None:
    from bufsize.shortflows.loss import SEED001_RTTS_MS, LossSpec

    spec = LossSpec(buffers=[18, 500])
    pts = {name: (cfg, b, o) for name, cfg, b, o in spec.points()}
    assert list(pts) == ["P-b18", "P-b500", "C-b18", "C-b500", "O-b18", "O-b500"]
    cfg, b, p = pts["P-b18"]
    assert cfg.rate_mbps == 50 and cfg.hosts == 18 and b == 18 * 1514
    assert min(SEED001_RTTS_MS) == 30 and max(SEED001_RTTS_MS) == 530
    assert 18 / sum(1 / r for r in SEED001_RTTS_MS) == pytest.approx(60, abs=0.5)  # harmonic mean
    assert p.long_flows == 200 and p.workload.sizes == "uniform:3:25" and p.workload.load == 0.05
    c, o = pts["C-b18"][2], pts["O-b500"][2]
    assert c.long_flows == 0 and c.workload.users == 600 and c.workload.think_s == 5 and c.workload.load == 0
    assert o.workload.load == 0.95 and o.workload.users == 0 and o.workload.sizes == c.workload.sizes
    assert {o.max_window for *_, o in spec.points()} == {None}
    capped = LossSpec(workloads=["C", "O"], buffers=[18], max_window=20)
    assert {(n, o.max_window) for n, _, _, o in capped.points()} == {("C-b18", 20), ("O-b18", 20)}
    with pytest.raises(UsageError, match="P's persistent flows"):
        LossSpec(max_window=20).validate()


def test_loss_table_sets_measurement_beside_seed_001_and_f16(tmp_path) -> None:
    from bufsize.shortflows.loss import LossSpec, loss_rows, write_loss_report

    spec = LossSpec(workloads=["P", "O"], buffers=[18])
    for name, loss in (("P-b18", 0.09), ("O-b18", 0.15)):
        (tmp_path / name).mkdir()
        r = fake_result(1, 1) | {
            "loss_rate": loss,
            "flows_in_congestion_avoidance": {"mean": 150.0, "active_mean": 190.0},
        }
        (tmp_path / name / "result.json").write_text(json.dumps(r))
    rows = loss_rows(tmp_path, spec)
    assert [(r["workload"], r["published_loss"]) for r in rows] == [("P", 0.075), ("O", 0.12)]
    assert rows[0]["f16_loss"] == pytest.approx((0.87 * 200) ** 2 / 268**2, abs=1e-4) and rows[1]["f16_loss"] is None
    write_loss_report(tmp_path, rows, spec)
    table = (tmp_path / "table.md").read_text()
    assert "| P | 18 | 9.00% | 7.5% | 42.1% |" in table and "| O | 18 | 15.00% | 12.0% | - |" in table
    assert (tmp_path / "figure.png").exists()


def test_transfer_table_compares_the_two_buffers_per_size(tmp_path) -> None:
    from bufsize.shortflows.transfer import TransferSpec, transfer_rows

    spec = TransferSpec(rtts_ms=[60.0])
    assert [spec.buffer_packets(60, k) for k in ("normal", "sqrtn")] == [495, 22]  # 100 Mb/s x 60 ms, / sqrt(500)
    for kind, median in (("normal", 0.1), ("sqrtn", 0.15)):
        (tmp_path / f"rtt60-{kind}").mkdir()
        bins = [{"packets": "4-7", "packets_lo": 4, "transfers": 100, "median_s": median, "p95_s": 2 * median,
                 "with_retrans": 0.1}]  # fmt: skip
        r = fake_result(1, 1) | {"fct_by_size": bins, "loss_rate": 0.01}
        (tmp_path / f"rtt60-{kind}" / "result.json").write_text(json.dumps(r))
    rows = transfer_rows(tmp_path, spec)
    assert [(r["buffer"], r["buffer_packets"]) for r in rows] == [("normal", 495), ("sqrtn", 22)]
    assert spec.report(tmp_path) == 2
    table = (tmp_path / "table.md").read_text()
    assert "| 60 | 4-7 | 100, 0.100 / 0.200, 10% | 100, 0.150 / 0.300, 10% | 1.50 |" in table
    assert (tmp_path / "figure.png").exists()


def test_mix_points_and_table(tmp_path) -> None:
    from bufsize.shortflows.mix import MixSpec, mix_rows

    spec = MixSpec(long_flows=[100])
    pts = spec.points()
    assert [(p[0], p[2] // 1514) for p in pts] == [("n100-sqrtn", 52), ("n100-bdp", 516)]  # 62.5 Mb/s x 100 ms
    opts = pts[0][3]
    assert opts.long_flows == 100 and opts.initcwnd == 2 and opts.workload.sizes == "fixed:14"
    assert opts.workload.load == 0.2
    for name, afct in (("n100-sqrtn", 0.3), ("n100-bdp", 0.6)):
        (tmp_path / name).mkdir()
        bins = [{"packets": "14", "transfers": 300, "mean_s": afct, "median_s": afct, "p95_s": 2 * afct}]
        r = fake_result(1, 1) | {"fct_by_size": bins, "flows_in_congestion_avoidance": {"mean": 80.0}}
        (tmp_path / name / "result.json").write_text(json.dumps(r))
    rows = mix_rows(tmp_path, spec)
    assert [(r["buffer"], r["afct_s"]) for r in rows] == [("sqrtn", 0.3), ("bdp", 0.6)]
    assert spec.report(tmp_path) == 2
    table = (tmp_path / "table.md").read_text()
    assert "| 100 | RTT*C/sqrt(n) | 52 | 0.8000 | 0.000% | 300 | 0.300 |" in table
    assert "Cautioned" not in table
    # A point whose run the hypervisor took CPU from is named under the table; the rows stay as they were.
    r = json.loads((tmp_path / "n100-bdp" / "result.json").read_text())
    r["cautions"] = [{"check": "hypervisor_steal", "value": 0.05, "limit": 0.02, "why": "..."}]
    (tmp_path / "n100-bdp" / "result.json").write_text(json.dumps(r))
    assert spec.report(tmp_path) == 2
    again = (tmp_path / "table.md").read_text()
    assert again.startswith(table.rstrip("\n"))
    assert again.rstrip().splitlines()[-1].startswith("Cautioned runs (n100-bdp) are valid, but the hypervisor")


def test_fig12_answer_is_the_smallest_buffer_with_every_larger_step_within() -> None:
    from bufsize.shortflows.fig12 import smallest_within

    steps = [(400, 1.0), (200, 1.05), (100, 1.10), (50, 1.2), (30, 1.0)]  # 30 passes again: noise, not an answer
    assert smallest_within(steps, 1.125) == 100
    assert smallest_within([(400, 1.3)], 1.125) is None
    assert smallest_within([(400, None), (200, 1.0)], 1.125) is None


def test_fig12_points_step_down_a_ladder_and_report(tmp_path) -> None:
    from bufsize.shortflows.fig12 import Fig12Spec

    spec = Fig12Spec(rates_mbps=[10], lengths=[14], ladder=[100, 40])
    ((name, _cfg, b, opts),) = spec.points()
    assert name == "r10-l14" and b == 2000 * 1514 and opts.ladder_packets == [100, 40]
    assert opts.workload.duration_s >= opts.warmup_s + opts.ladder_seconds()
    with pytest.raises(UsageError, match="ladder"):
        Fig12Spec(ladder=[40, 100]).validate()
    (tmp_path / name).mkdir()
    bins = lambda a: [{"packets": "14", "mean_s": a, "median_s": a, "p95_s": a}]  # noqa: E731
    r = fake_result(1, 1) | {
        "fct_by_size": bins(0.100),
        "ladder": [
            {"buffer_packets": 100, "fct_by_size": bins(0.105)},
            {"buffer_packets": 40, "fct_by_size": bins(0.2)},
        ],
        "model": {
            "available": True,
            "initial_window": 2,
            "load": 0.8,
            "burst_moments": {"e1": 4.667, "e2": 28.0, "e3": 194.67},
        },
    }
    (tmp_path / name / "result.json").write_text(json.dumps(r))
    assert spec.report(tmp_path) == 1
    table = (tmp_path / "table.md").read_text()
    # 14 packets from IW 2 at load 0.8: E[X^2]/E[X] = 6; F11 at 1 %: ln(100) x 0.8/0.4 x 6 / 2 = 55.3 packets.
    assert "| 10 | 14 | 2 | 0.790 | 0.1000 | 100 | 55.3 |" in table


def test_neither_link_resumes_the_others_series(tmp_path) -> None:
    """A series directory names its link: the emulated command refuses the twin's and the twin's
    the emulated one, and the twin's refuses one run with another TCP."""
    from bufsize.shortflows.loss import LossSpec
    from bufsize.sim.shortexp import TwinPoints, TwinTcp

    twin, emulated = tmp_path / "twin", tmp_path / "emulated"
    twin.mkdir()
    emulated.mkdir()
    open_series(twin, LossSpec(), TwinPoints(LossSpec()))
    open_series(twin, LossSpec(), TwinPoints(LossSpec()))  # the same link and settings resume
    open_series(emulated, LossSpec(), EmulatedPoints("delayline"))
    for d, on in ((twin, EmulatedPoints("delayline")), (emulated, TwinPoints(LossSpec())),
                  (twin, TwinPoints(LossSpec(), TwinTcp(iw=2)))):  # fmt: skip
        with pytest.raises(UsageError, match="other settings"):
            open_series(d, LossSpec(), on)

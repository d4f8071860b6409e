"""lp-io parsers: known CODES bugs handled explicitly, windowed traffic vs end-of-run totals, per-rank totals."""

from __future__ import annotations


import numpy as np
import pytest

from codes_bridge.conf import parse_conf
from codes_bridge.parsers.common import CodesParseError, CodesWarning
from codes_bridge.parsers.lpio import (KnownCodesBug, parse_cn_stats, parse_link_stats, parse_model_net_category,
                                       parse_mpi_replay_stats, parse_router_busytime_sample,
                                       parse_router_traffic_sample, parse_snapshots)
from refdata import CODES

B = CODES / "B-72node-milc" / "hf-seq"


def test_local_link_lines_are_skipped_with_a_warning():
    sink = []
    with pytest.warns(CodesWarning, match="skipped 108 local"):
        ls = parse_link_stats(B / "lp-io" / "dragonfly-link-stats", warnings=sink)
    assert len(sink) == 1 and ls.local_skipped == 108
    assert set(ls.link_type.tolist()) == {"CN", "G"}
    assert len(ls.src) == 72 + 72 + 72  # T->R CN, R->T CN, R->R G
    kept = parse_link_stats(B / "lp-io" / "dragonfly-link-stats", keep_local=True)
    assert (kept.link_type == "L").sum() == 108


def test_busytime_sample_is_refused():
    with pytest.raises(KnownCodesBug, match="corrupted by a CODES bug"):
        parse_router_busytime_sample(B / "lp-io" / "dragonfly-router-busytime-sample.gz")


def test_traffic_sample_totals_equal_link_stats():
    c = parse_conf(B / "dfdally-72-milc.conf")
    ps = parse_router_traffic_sample(B / "lp-io" / "dragonfly-router-traffic-sample.gz", c.shape(), c.bandwidths(),
                                     interval=50e3)
    assert ps.features == ("bytes", "util_pct") and ps.values.shape == (200, 252, 2)
    assert ps.t_end[0] == 50000.0 and ps.t_end[-1] == 1e7
    with pytest.warns(CodesWarning):
        tot = parse_link_stats(B / "lp-io" / "dragonfly-link-stats").router_port_totals(c.topology(B))
    ok = ~np.isnan(tot["traffic"])
    assert np.array_equal(ps.feature("bytes").astype(np.float64).sum(axis=0)[ok], tot["traffic"][ok])
    # 5.25 GiB/s local/terminal links over 50 us
    b = ps.feature("bytes")[:, 5]
    np.testing.assert_allclose(ps.feature("util_pct")[:, 5], b / (5.25 * 2**30 / 1e9 * 50e3) * 100, rtol=1e-6)


def test_per_terminal_and_per_rank_totals_match_vt_samples():
    from codes_bridge.importer import read_codes_run

    run = read_codes_run(B)
    cn = parse_cn_stats(B / "lp-io" / "dragonfly-cn-stats")
    mr = parse_mpi_replay_stats(B / "lp-io" / "mpi-replay-stats")
    assert len(cn["terminal_id"]) == 72 and len(mr["nw_id"]) == 72
    t, n = run.terminal_samples(), run.rank_samples()
    assert t["data_size"].sum() == cn["data_received"].sum()
    assert t["fin_chunks"].sum() == cn["packets_finished"].sum()  # packet = chunk = 4096 B
    assert n["num_bytes_sent"].sum() == mr["bytes_sent"].sum() == 1510077440
    assert n["num_sends"].sum() == mr["sends"].sum()
    mnc = parse_model_net_category(B / "lp-io" / "model-net-category-all")
    assert mnc["send_bytes"].sum() == cn["data_sent"].sum()


def test_snapshots_and_their_errors(tmp_path):
    t, rid, vc = parse_snapshots(CODES / "A-72node-synthetic-uniform" / "seq" / "lp-io" / "dragonfly-snapshots.csv", 7)
    assert vc.shape == (7 * 36, 7, 4)
    assert sorted(set(t.tolist())) == [250e3 * k for k in range(1, 8)]
    assert (vc % 4096 == 0).all() and vc.max() <= 16384 * 2
    bad = tmp_path / "snap.csv"
    hdr = "#Time of snapshot,Router ID," + ",".join(f"Port {p} VC {v}" for p in range(7) for v in range(4))
    bad.write_text(hdr + "\n250000.0, 0, " + ", ".join(["0"] * 28) + "\n250000.0, 1, 0, 0\n")
    with pytest.raises(CodesParseError, match=r"snap.csv:3: expected 30 fields, got 4"):
        parse_snapshots(bad, 7)


def test_truncated_stats_line_is_located(tmp_path):
    lines = (B / "lp-io" / "mpi-replay-stats").read_text().splitlines()
    p = tmp_path / "mpi-replay-stats"
    p.write_text("\n".join(lines[:5]) + "\n" + lines[5][:20] + "\n")
    with pytest.raises(CodesParseError, match=r"mpi-replay-stats:6: expected 13 fields, got"):
        parse_mpi_replay_stats(p)
    p.write_text(lines[0] + "\n 0 0 0 0 x 1 1 1 1 1 1 1 1\n")
    with pytest.raises(CodesParseError, match=r"mpi-replay-stats:2: bad value"):
        parse_mpi_replay_stats(p)

"""ROSS VT sample decoding: the binary reader against CODES' own CSV decoding, the worked example of
docs/codes-formats.md §4 (the worked example), framing errors, and port samples against dragonfly-link-stats."""

from __future__ import annotations

import gzip
import struct

import numpy as np
import pytest

from codes_bridge.conf import parse_conf
from codes_bridge.parsers.common import CodesParseError, CodesWarning
from codes_bridge.parsers.lpio import parse_link_stats
from codes_bridge.parsers.ross_vt import read_vt_bin, read_vt_csv, router_port_samples
from hybridsim_common.records import PORT_FEATURES
from hybridsim_common.topology import DragonflyShape
from refdata import CODES, REFERENCE_CODES

A = CODES / "A-72node-synthetic-uniform" / "seq"
RAW = A / "ross-stats-raw"


@pytest.fixture(scope="module")
def conf_a():
    return parse_conf(A / "dfdally-72-synthetic.conf")


@pytest.fixture(scope="module")
def kinds_a(conf_a):
    return {lp: name for name, lps in conf_a.lp_layout().items() for lp in lps}


@pytest.fixture(scope="module")
def bin_a(kinds_a):
    return read_vt_bin(RAW / "ross-stats-analysis-lps.bin.gz", kinds_a, radix=7)


def test_binary_equals_codes_csv_decoding(bin_a):
    csv = read_vt_csv(RAW)
    for kind, n in (("router", 684), ("terminal", 1368), ("nwlp", 1368)):
        b, c = getattr(bin_a, kind), getattr(csv, kind)
        assert len(b["ts"]) == len(c["ts"]) == n
        assert set(b) == set(c), kind
        for col in c:
            # CODES prints floats with Python's shortest repr, so doubles must match exactly
            assert np.array_equal(np.asarray(b[col], np.float64), np.asarray(c[col], np.float64)), (kind, col)
    assert sorted(set(bin_a.router["ts"])) == [100000.0 * k for k in range(1, 20)]
    assert not bin_a.truncated


def test_other_nwlp_csv_layout_is_renamed_to_the_same_columns(bin_a):
    dec = read_vt_csv(A / "ross-stats-decoded")
    for col in dec.nwlp:
        assert np.array_equal(np.asarray(dec.nwlp[col], float), np.asarray(bin_a.nwlp[col], float)), col


def test_worked_example_records(bin_a):
    r = bin_a.router
    i = np.nonzero((r["ts"] == 100000.0) & (r["lpid"] == 24))[0][0]
    assert r["router_id"][i] == 4 and r["fwd_events"][i] == 576
    assert [r[f"link_traffic_p{k}"][i] for k in range(7)] == [118784, 102400, 122880, 139264, 118784, 81920, 110592]
    assert [r[f"vc_occupancy_sum_p{k}"][i] for k in range(7)] == [4096, 4096, 4096, 12288, 12288, 0, 4096]
    t = bin_a.terminal
    i = np.nonzero((t["ts"] == 100000.0) & (t["lpid"] == 8))[0][0]
    assert (t["terminal_id"][i], t["fin_chunks"][i], t["data_size"][i], t["fin_hops"][i]) == (3, 23, 94208, 76.0)
    assert t["fin_chunks_time_ns"][i] == 438513.6476445534
    n = bin_a.nwlp
    i = np.nonzero((n["ts"] == 100000.0) & (n["lpid"] == 40))[0][0]
    assert (n["nw_id"][i], n["app_id"][i], n["local_rank"][i], n["num_sends"][i], n["num_recvs"][i]) == (16, 0, 16, 25, 21)
    assert n["avg_msg_time"][i] == 23127.479808696746


def test_lpid_layout_matches_model_ids(bin_a):
    # 72-node layout (docs/codes-formats.md §4): router_id = lpid div 5, terminal_id = 2*(lpid div 5) + mod - 2
    r, t, n = bin_a.router, bin_a.terminal, bin_a.nwlp
    assert np.array_equal(r["router_id"], r["lpid"] // 5)
    assert np.array_equal(t["terminal_id"], 2 * (t["lpid"] // 5) + t["lpid"] % 5 - 2)
    assert np.array_equal(n["nw_id"], 2 * (n["lpid"] // 5) + n["lpid"] % 5)


def _raw():
    with gzip.open(RAW / "ross-stats-analysis-lps.bin.gz", "rb") as fh:
        return fh.read()


def test_truncated_binary_drops_last_record_with_warning(tmp_path, kinds_a):
    data = _raw()
    p = tmp_path / "ross-stats-analysis-lps.bin"
    p.write_bytes(data[:-100])
    sink = []
    with pytest.warns(CodesWarning, match="ends inside record 3419"):
        vt = read_vt_bin(p, kinds_a, radix=7, warnings=sink)
    assert vt.truncated and len(sink) == 1
    assert len(vt.router["ts"]) + len(vt.terminal["ts"]) + len(vt.nwlp["ts"]) == 3419


def test_bad_flag_and_wrong_radix_are_located(tmp_path, kinds_a):
    data = bytearray(_raw())
    # second record starts at 0xc8; corrupt its flag
    struct.pack_into("<i", data, 0xC8 + 44, 7)
    p = tmp_path / "bad.bin"
    p.write_bytes(bytes(data))
    with pytest.raises(CodesParseError, match=r"record 1 at byte offset 200: bad header \(flag 7"):
        read_vt_bin(p, kinds_a, radix=7)
    with pytest.raises(CodesParseError, match="payload size 296"):
        read_vt_bin(RAW / "ross-stats-analysis-lps.bin.gz", kinds_a, radix=8)


def test_port_samples_util_is_bytes_over_bandwidth_times_interval(bin_a, conf_a):
    ps = router_port_samples(bin_a.router, conf_a.shape(), conf_a.bandwidths(), 100000.0)
    assert ps.features == PORT_FEATURES and ps.radix == 7 and ps.values.shape == (19, 36 * 7, 6)
    # A's links are 2 GiB/s: 2 * 2^30 B/s = 2.147483648 B/ns -> one 100 us window carries 214748.3648 B
    b = ps.feature("bytes")
    assert b[0, 4 * 7 + 3] == 139264
    np.testing.assert_allclose(ps.feature("util_pct"), b / 214748.3648 * 100, rtol=1e-6)
    assert np.array_equal(ps.feature("vc_occ")[0, 4 * 7:5 * 7], [4096, 4096, 4096, 12288, 12288, 0, 4096])


def test_util_uses_the_class_bandwidth():
    shape = DragonflyShape(2, 2, 1, 1)  # radix 3: port 0 local, 1 global, 2 terminal
    cols = {"ts": np.array([1000.0]), "router_id": np.array([0]), "lpid": np.array([0])}
    for k, v in enumerate((1000, 2000, 3000)):
        cols[f"link_traffic_p{k}"] = np.array([v])
        for f in ("busy_time_ns", "stalled_chunks", "vc_occupancy_sum", "queued_count"):
            cols[f"{f}_p{k}"] = np.array([0])
    with pytest.warns(CodesWarning, match="3 of 4 .* rows are missing"):
        ps = router_port_samples(cols, shape, (1.0, 2.0, 4.0), 1000.0)
    gib_ns = 2**30 / 1e9
    np.testing.assert_allclose(ps.feature("util_pct")[0, :3],
                               [1000 / (1 * gib_ns * 1000) * 100, 2000 / (2 * gib_ns * 1000) * 100,
                                3000 / (4 * gib_ns * 1000) * 100], rtol=1e-6)
    assert np.isnan(ps.feature("bytes")[0, 3:]).all()


@pytest.mark.parametrize("run,conf", [("B-72node-milc/hf-seq", "dfdally-72-milc.conf"),
                                      pytest.param("C-1056node-milc-lammps-nn/hf-random-seq", "dfdally-1056.conf",
                                                   marks=pytest.mark.reference_data)])
def test_vt_port_byte_totals_equal_link_stats(run, conf):
    d = (REFERENCE_CODES if run.startswith("C-") else CODES) / run  # run C's VT tables are not in tests/data
    c = parse_conf(d / conf)
    vt = read_vt_csv(d / "ross-stats-decoded", kinds=("router",))
    ps = router_port_samples(vt.router, c.shape(), c.bandwidths())
    with pytest.warns(CodesWarning, match="local .L. router->router lines"):
        ls = parse_link_stats(d / "lp-io" / "dragonfly-link-stats")
    tot = ls.router_port_totals(c.topology(d))
    ok = ~np.isnan(tot["traffic"])
    a, h, p = c.shape().routers_per_group, c.shape().global_channels_per_router, c.shape().terminals_per_router
    assert ok.sum() == c.shape().groups * a * (h + p)  # every global and terminal port, no local port
    sums = ps.feature("bytes").astype(np.float64).sum(axis=0)
    assert np.array_equal(sums[ok], tot["traffic"][ok])
    assert tot["traffic"][ok].sum() > 1e9
    # busy (credit-blocked) time and stalled chunks agree too (busy stored as float32)
    assert np.array_equal(ps.feature("stalled").astype(np.float64).sum(axis=0)[ok], tot["stalled"][ok])
    np.testing.assert_allclose(ps.feature("busy_ns").astype(np.float64).sum(axis=0)[ok], tot["busy"][ok],
                               rtol=1e-5, atol=0.05)


def test_tailing_the_binary_while_ross_writes(tmp_path, kinds_a, bin_a):
    from codes_bridge.parsers.ross_vt import VtBinTail

    data = _raw()
    p = tmp_path / "ross-stats-analysis-lps.bin"
    tail = VtBinTail(p, kinds_a, radix=7)
    assert tail.poll() is None  # not created yet
    got = {"router": [], "terminal": [], "nwlp": []}
    cuts = [0, 1000, 1001, 50_000, 333_333, 700_000, len(data)]  # arbitrary, mostly mid-record
    p.write_bytes(b"")
    for a, b in zip(cuts, cuts[1:]):
        with open(p, "ab") as fh:
            fh.write(data[a:b])
        block = tail.poll()
        if block is not None:
            for k in got:
                if getattr(block, k) is not None:
                    got[k].append(getattr(block, k))
    assert not tail.finish()
    assert tail.records == 3420
    for k, parts in got.items():
        ref = getattr(bin_a, k)
        order = np.lexsort((np.concatenate([c["lpid"] for c in parts]), np.concatenate([c["ts"] for c in parts])))
        for col in ref:
            merged = np.concatenate([c[col] for c in parts])
            assert np.array_equal(merged[order], ref[col]), (k, col)
    with open(p, "ab") as fh:
        fh.write(data[:30])
    with pytest.warns(CodesWarning, match="ends inside record 3420"):
        assert tail.finish()


def test_malformed_csv_rows_are_located(tmp_path):
    lines = gzip.open(RAW / "vt-router.csv.gz", "rt").read().splitlines()
    p = tmp_path / "vt-router.csv"
    p.write_text("\n".join(lines[:10] + [lines[10][:50]] + lines[11:20]) + "\n")
    with pytest.raises(CodesParseError, match=r"vt-router.csv:11: expected 46 columns, got 9"):
        read_vt_csv(tmp_path)
    row = lines[12].split(",")
    row[20] = "1.5"  # a byte counter that is not an integer
    p.write_text("\n".join(lines[:12] + [",".join(row)] + lines[13:20]) + "\n")
    with pytest.raises(CodesParseError, match=r"vt-router.csv:13: .*invalid value '1.5'"):
        read_vt_csv(tmp_path)
    p.unlink()
    raw = (RAW / "vt-router.csv.gz").read_bytes()
    (tmp_path / "vt-router.csv.gz").write_bytes(raw[: len(raw) // 2])  # a gzip cut short
    with pytest.raises(CodesParseError, match=r"vt-router.csv.gz"):
        read_vt_csv(tmp_path)

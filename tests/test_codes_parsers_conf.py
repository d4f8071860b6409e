"""CODES .conf and workload-list parsing with file:line errors."""

from __future__ import annotations


import pytest

from codes_bridge.conf import (ConfError, job_names_from_workloads, parse_conf, parse_conf_text,
                               parse_workloads_conf)
from refdata import CODES



def test_reference_confs():
    c = parse_conf(CODES / "C-1056node-milc-lammps-nn" / "hf-random-seq" / "dfdally-1056.conf")
    assert c.shape().radix == 15 and c.shape().groups == 33
    assert c.bandwidths() == (5.25, 4.7, 5.25)
    assert c.get("modelnet_order") == ["dragonfly_dally", "dragonfly_dally_router"]
    assert c.get_str("df-dally-vc") == "1"
    lay = c.lp_layout()
    # docs/codes-formats.md: for 1,056 nodes lpid = 9*rep + k, k=0..3 nw-lps, 4..7 terminals, 8 router
    assert lay["nw-lp"][:5] == [0, 1, 2, 3, 9] and lay["modelnet_dragonfly_dally"][:5] == [4, 5, 6, 7, 13]
    assert lay["modelnet_dragonfly_dally_router"][:3] == [8, 17, 26] and len(lay["nw-lp"]) == 1056
    s = parse_conf(CODES / "B-72node-milc" / "surrogate-patched-seq" / "dfdally-72-milc-surrogate.conf")
    assert s.get("director_num_ns", section="APPLICATION_SURROGATE") == "500e3"
    assert s.where("routing").endswith("dfdally-72-milc-surrogate.conf:30")


@pytest.mark.parametrize("text,line,msg", [
    ('PARAMS\n{\n   a="1";\n   b="2"\n}\n', 4, "missing ';'"),
    ('PARAMS\n{\n   a="1;\n}\n', 3, "unterminated string"),
    ('PARAMS\n{\n   a="1";\n   a="2";\n}\n', 4, "duplicate key 'a'"),
    ('PARAMS\n{\n   a=( "x", "y" ;\n}\n', 3, "expected a list item"),
    ('PARAMS\n{\n   a="1";\n', 3, "missing '}'"),
    ('PARAMS\n{\n   a ! "1";\n}\n', 3, "unexpected character"),
])
def test_syntax_errors_have_file_and_line(text, line, msg):
    with pytest.raises(ConfError) as ei:
        parse_conf_text(text, "x.conf")
    assert ei.value.line == line and msg in ei.value.message
    assert str(ei.value).startswith(f"x.conf:{line}:")


def test_value_errors_name_the_line():
    c = parse_conf_text('PARAMS\n{\n # comment\n   num_groups="nine";\n}\n', "y.conf")
    with pytest.raises(ConfError, match=r"y.conf:4: num_groups: expected a number"):
        c.get_int("num_groups")
    c = parse_conf_text('PARAMS\n{\n   num_groups="9";\n}\n', "y.conf")
    with pytest.raises(ConfError, match="PARAMS lacks required key 'num_routers'"):
        c.shape()


def test_workloads_file(tmp_path):
    wl = parse_workloads_conf(CODES / "E-72node-milc-lammps-syn" / "hf-random-seq" / "workloads.conf")
    assert [(w.ranks, w.app, w.mean_interval) for w in wl] == [(36, "./milc-36.json", 0.0),
                                                                (32, "./lammps-32.json", 0.0),
                                                                (4, "synthetic1", 4000.0)]
    assert job_names_from_workloads(wl) == ["milc-36", "lammps-32", "synthetic1"]
    p = tmp_path / "w.conf"
    p.write_text("4 ./a.json 0 0\nfour ./b.json 0 0\n")
    with pytest.raises(ConfError, match=r"w.conf:2: bad number"):
        parse_workloads_conf(p)
    p.write_text("4 ./a.json 0 0\n4 ./a.json 0 0\n")
    assert job_names_from_workloads(parse_workloads_conf(p)) == ["a-0", "a-1"]

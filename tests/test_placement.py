import numpy as np
import pytest

from hybridsim.placement import PlacementError, place, read_alloc_file, write_alloc_file
from hybridsim_common.topology import Dragonfly, DragonflyShape

T72 = Dragonfly(DragonflyShape(9, 4, 2, 2))


def test_contiguous_fills_in_order():
    p = place("contiguous", [36, 20], T72)
    assert p[0].tolist() == list(range(36)) and p[1].tolist() == list(range(36, 56))


@pytest.mark.parametrize("policy", ["random", "random-router", "random-group"])
def test_random_policies_deterministic_and_disjoint(policy):
    a = place(policy, [30, 30], T72, seed=7)
    b = place(policy, [30, 30], T72, seed=7)
    c = place(policy, [30, 30], T72, seed=8)
    assert all((x == y).all() for x, y in zip(a, b))
    assert any((x != y).any() for x, y in zip(a, c))
    allt = np.concatenate(a)
    assert len(set(allt.tolist())) == 60 and allt.min() >= 0 and allt.max() < 72


def test_random_router_keeps_routers_whole():
    p = place("random-router", [8], T72, seed=3)[0]
    routers = p // 2
    # 8 ranks fill exactly 4 routers, both terminals of each
    assert len(set(routers.tolist())) == 4


def test_random_group_keeps_groups_whole():
    p = place("random-group", [16], T72, seed=3)[0]
    assert len(set((p // 8).tolist())) == 2


def test_file_roundtrip_and_errors(tmp_path):
    f = tmp_path / "alloc.conf"
    write_alloc_file([np.array([5, 3, 1]), np.array([0, 2])], f)
    assert read_alloc_file(f) == [[5, 3, 1], [0, 2]]
    assert place("file", [3, 2], T72, alloc=read_alloc_file(f))[0].tolist() == [5, 3, 1]
    with pytest.raises(PlacementError, match="overlapping"):
        place("file", [2, 2], T72, alloc=[[1, 2], [2, 3]])
    with pytest.raises(PlacementError, match="outside"):
        place("file", [1], T72, alloc=[[72]])
    with pytest.raises(PlacementError, match="needs 3"):
        place("file", [3], T72, alloc=[[1, 2]])
    f.write_text("1 2 x\n")
    with pytest.raises(PlacementError, match=":1: node id 'x'"):
        read_alloc_file(f)


def test_too_many_ranks():
    with pytest.raises(PlacementError):
        place("contiguous", [70, 3], T72)


def test_codes_reference_alloc_file(codes_data):
    alloc = read_alloc_file(codes_data / "C-1056node-milc-lammps-nn/hf-random-seq/alloc-random.conf")
    t = Dragonfly(DragonflyShape(33, 8, 4, 4))
    p = place("file", [512, 256, 256], t, alloc=alloc)
    assert [len(x) for x in p] == [512, 256, 256]

"""CODES' collective expansions, checked against hand-derived partner schedules."""

import pytest

from hybridsim.workloads import (ALLREDUCE_TAG, BARRIER_TAG, IRECV, ISEND, RECV, SEND, WAITALL, Program,
                                 allreduce_partners, allreduce_schedule, barrier_schedule)


def test_allreduce_p8_recursive_doubling_partners():
    # P = 8 is a power of two: partners r^1, r^2, r^4, one Sendrecv each
    assert allreduce_partners(0, 8) == [1, 2, 4]
    assert allreduce_partners(5, 8) == [4, 7, 1]
    assert allreduce_partners(7, 8) == [6, 5, 3]
    for r in range(8):
        assert allreduce_schedule(r, 8, 8) == [("sendrecv", r ^ m, 8) for m in (1, 2, 4)]


def test_allreduce_p36_fold_unfold():
    # P = 36: pof2 = 32, rem = 4. Even r < 8 fold into r+1 and sit out; odd r < 8 have newrank r/2;
    # the others newrank r-4; a partner newrank d maps back to 2d+1 if d < 4 else d+4.
    assert allreduce_schedule(0, 36, 8) == [("send", 1, 8), ("recv", 1)]
    assert allreduce_schedule(6, 36, 8) == [("send", 7, 8), ("recv", 7)]
    assert allreduce_schedule(1, 36, 8) == [("recv", 0)] + [("sendrecv", p, 8) for p in (3, 5, 8, 12, 20)] + \
        [("send", 0, 8)]
    assert allreduce_schedule(3, 36, 8) == [("recv", 2)] + [("sendrecv", p, 8) for p in (1, 7, 9, 13, 21)] + \
        [("send", 2, 8)]
    assert allreduce_partners(8, 36) == [9, 10, 1, 16, 24]
    assert allreduce_partners(35, 36) == [34, 33, 31, 27, 19]
    # partners are mutual in every step
    for r in range(36):
        for step, s in enumerate(x for x in allreduce_schedule(r, 36, 8) if x[0] == "sendrecv"):
            other = [x for x in allreduce_schedule(s[1], 36, 8) if x[0] == "sendrecv"]
            assert other[step][1] == r


def test_allreduce_expands_to_codes_ops():
    p = Program(1, 36)
    p.allreduce(8)
    ops = p.ops
    assert ops[0] == (RECV, 0, ALLREDUCE_TAG)
    # a Sendrecv is Irecv(peer) + blocking Send(peer) + Wait
    assert ops[1:4] == [(IRECV, 3, ALLREDUCE_TAG, 0), (SEND, 3, 8, ALLREDUCE_TAG), (WAITALL, (0,))]
    assert ops[-1] == (SEND, 0, 8, ALLREDUCE_TAG)
    assert len(ops) == 1 + 5 * 3 + 1
    assert not any(op[0] == ISEND for op in ops)


@pytest.mark.parametrize("p,count", [(8, 8192), (36, 65536), (12, 10001), (5, 4099)])
def test_rabenseifner_long_messages(p, count):
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    total_rs = 0
    for r in range(p):
        steps = allreduce_schedule(r, p, count)
        sr = [s for s in steps if s[0] == "sendrecv"]
        if r < 2 * rem and r % 2 == 0:
            assert sr == []
            continue
        assert len(sr) == 2 * (pof2.bit_length() - 1)  # log2(pof2) halving + log2(pof2) doubling steps
        k = len(sr) // 2
        total_rs += sum(s[2] for s in sr[:k])
        if count % pof2 == 0:
            # equal blocks: count/2, count/4, ... then back up
            halves = [count >> (i + 1) for i in range(k)]
            assert [s[2] for s in sr] == halves + halves[::-1]
    # every block ends at exactly one rank: the reduce-scatter moves pof2*count - count bytes in all
    assert total_rs == pof2 * count - count


def test_short_threshold_is_2048_bytes():
    assert all(s[2] == 2048 for s in allreduce_schedule(8, 36, 2048) if s[0] == "sendrecv")
    assert any(s[2] != 2049 for s in allreduce_schedule(8, 36, 2049) if s[0] == "sendrecv")
    # count < pof2 also takes recursive doubling
    assert all(s[2] == 20 for s in allreduce_schedule(3, 36, 20) if s[0] == "sendrecv")


def test_dissemination_barrier():
    assert barrier_schedule(0, 5) == [(1, 4), (2, 3), (4, 1)]
    assert barrier_schedule(3, 8) == [(4, 2), (5, 1), (7, 7)]
    p = Program(0, 5)
    p.barrier()
    assert p.ops[:3] == [(IRECV, 4, BARRIER_TAG, 0), (SEND, 1, 0, BARRIER_TAG), (WAITALL, (0,))]
    assert len(p.ops) == 9

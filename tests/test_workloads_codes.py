"""Workload generators against CODES: recorded op traces (message by message) and per-rank MPI totals of whole runs.

Independent expectations: ``optrace/r*/mpi-op-logs.gz`` (every MPI op CODES executed, in order), the traces'
per-step averages (docs/workloads.md §4), and ``lp-io/mpi-replay-stats`` of the reference runs (per-rank sends, receives, bytes, compute).
"""

from collections import defaultdict
from pathlib import Path

import pytest

from hybridsim.scenario import Job
from hybridsim.workloads import (COMPUTE, IRECV, ISEND, RECV, SEND, build_workload, from_codes_json)
from hybridsim.workloads.optrace import read_iteration_marks, read_optrace, split_iterations, trace_form
from refdata import CODES, REFERENCE_CODES

OPT = CODES / "optrace"


def job_from_json(path: Path, ranks: int, name: str = "j") -> Job:
    kind, params, iterations = from_codes_json(path)
    return Job.model_validate(dict(name=name, ranks=ranks, iterations=iterations, workload=dict(kind=kind, **params)))


def compare_trace(run: str, job_index: int, job: Job, opt: Path = OPT) -> int:
    """Assert every complete (rank, iteration) of the trace equals the generated ops; return how many were compared."""
    trace = read_optrace(opt / run / "mpi-op-logs.gz", job_index)
    marks = read_iteration_marks(opt / run / "iteration-logs" / "pe=0.txt", job_index)
    wl = build_workload(job, job_index, 1)
    n = 0
    for rank in range(job.ranks):
        for it, recorded in enumerate(split_iterations(trace[rank], marks.get(rank, []))):
            mine = trace_form(wl.ops(rank, it))
            if mine != recorded:
                first = next((i for i, (a, b) in enumerate(zip(mine, recorded)) if a != b), min(len(mine),
                                                                                              len(recorded)))
                pytest.fail(f"{run} job {job_index} rank {rank} iteration {it}: op #{first} differs: generated "
                            f"{mine[first:first + 3]} recorded {recorded[first:first + 3]} "
                            f"(lengths {len(mine)} / {len(recorded)})")
            n += 1
    return n


def test_milc_36_matches_optrace_op_by_op():
    job = job_from_json(OPT / "milc-36-2it.json", 36)
    assert compare_trace("r72", 0, job) == 36 * 2


def test_lammps_32_matches_optrace_op_by_op_all_12_steps():
    # covers the plain steps, the neigh_check allreduces (steps 5-9) and the neighbour exchange (step 10)
    job = job_from_json(OPT / "lammps-32-12st.json", 32)
    assert compare_trace("r72", 1, job) == 32 * 12


@pytest.mark.reference_data
def test_milc_512_and_lammps_256_match_optrace():
    full = REFERENCE_CODES / "optrace"  # the 1,056-node op trace (6 MB) is not in tests/data
    assert compare_trace("r1056", 0, job_from_json(OPT / "milc-512-2it.json", 512), full) == 512 * 2
    # the run was stopped in step 2: steps 0-1 of every rank plus the ranks that finished step 2
    n = compare_trace("r1056", 1, job_from_json(OPT / "lammps-256-12st.json", 256), full)
    assert n >= 256 * 2


def _per_step_averages(wl, steps):
    out = []
    for it in range(steps):
        msgs = nbytes = coll = 0
        for r in range(wl.n_ranks):
            for op in wl.ops(r, it):
                if op[0] in (ISEND, SEND):
                    msgs += 1
                    nbytes += op[2]
                    coll += op[3] == 1235
        out.append((msgs / wl.n_ranks, nbytes / wl.n_ranks, coll / wl.n_ranks))
    return out


def test_lammps_32_per_step_summary():
    """The optrace per-step summary (docs/workloads.md §4): msgs/rank, bytes/rank and collective msgs/rank per step."""
    wl = build_workload(job_from_json(OPT / "lammps-32-12st.json", 32))
    avg = _per_step_averages(wl, 12)
    for it in (0, 1, 2, 3, 4, 11):
        assert avg[it] == (pytest.approx(145.38, abs=0.005), 2857366.0, 25.0)
    for it in range(5, 10):
        assert avg[it] == (pytest.approx(150.38, abs=0.005), 2857386.0, 30.0)
    assert avg[10] == (pytest.approx(191.38, abs=0.005), 3803913.0, 55.0)


def _replay_stats(path: Path, job: int) -> dict[int, tuple]:
    out = {}
    for line in path.read_text().splitlines():
        p = line.split()
        if not p or p[0].startswith("#") or int(p[2]) != job:
            continue
        out[int(p[3])] = (int(p[4]), int(p[5]), int(p[6]), int(p[7]), float(p[10]))
    return out


def _totals(wl, iterations):
    sends = defaultdict(int)
    recvs = defaultdict(int)
    bsent = defaultdict(int)
    brecv = defaultdict(int)
    comp = defaultdict(float)
    for it in range(iterations):
        for r in range(wl.n_ranks):
            for op in wl.ops(r, it):
                k = op[0]
                if k in (ISEND, SEND):
                    sends[r] += 1
                    bsent[r] += op[2]
                    brecv[op[1]] += op[2]
                elif k in (IRECV, RECV):
                    recvs[r] += 1
                elif k == COMPUTE:
                    comp[r] += op[1]
    return {r: (sends[r], recvs[r], bsent[r], brecv[r], comp[r]) for r in range(wl.n_ranks)}


@pytest.mark.parametrize("run,conf", [
    ("C-1056node-milc-lammps-nn/hf-random-seq", {0: ("milc-512.json", 512), 1: ("lammps-256.json", 256),
                                                  2: ("nn-256.json", 256)}),
    ("E-72node-milc-lammps-syn/hf-random-seq", {0: ("milc-36.json", 36), 1: ("lammps-32.json", 32)}),
])
def test_whole_run_per_rank_mpi_totals(run, conf):
    """lp-io/mpi-replay-stats: sends, receives, bytes sent/received and compute time of every rank over the whole run
    (C: 6 iterations of MILC 512, LAMMPS 256, nearest_neighbor 256; E: MILC 36 x 1,600 and LAMMPS 32 x 230 steps)."""
    d = CODES / run
    for job_index, (fname, ranks) in conf.items():
        job = job_from_json(d / fname, ranks)
        wl = build_workload(job, job_index, 1)
        want = _replay_stats(d / "lp-io" / "mpi-replay-stats", job_index)
        assert len(want) == ranks
        got = _totals(wl, wl.iterations)
        for r in range(ranks):
            s, rc, bs, br, comp = got[r]
            ws, wr, wbs, wbr, wcomp = want[r]
            assert (s, rc, bs, br) == (ws, wr, wbs, wbr), f"{run} job {job_index} rank {r}"
            assert comp == pytest.approx(wcomp, abs=1e-6), f"{run} job {job_index} rank {r} compute"

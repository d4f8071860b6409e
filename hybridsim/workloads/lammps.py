"""SWM LAMMPS skeleton (``SWM/lammps/lammps.cpp``, ``lammps.h``, ``lammps_model.h``; docs/workloads.md
§4), re-implemented in Python with C's integer/float semantics so message sizes and compute cycles come
out bit-identical (validated message by message against CODES op traces in ``tests/test_workloads_codes.py``).

One time step::

    Compute(start); Allreduce(48); Allreduce(48)
    if neigh_check(): doNeighExch()   else: doP2P(ghost forward)
    doP2P(k-space pre); doFFT(13 transposes); doP2P(k-space post)
    Compute(k_energy); Allreduce(48)
    doP2P(ghost reverse); doP2P(fix)
    Compute(final); Allreduce(8); Allreduce(48)

``doP2P`` entry: Compute(cyc); Irecv(r_target, tag 0); blocking Send(s_target, size, tag 0); Wait.
``doFFT`` transpose: Compute(cyc); Irecv from every overlapping rank; Isend to every overlapping rank;
Waitall(recvs); Waitall(sends). ``neigh_check``: nothing for the first 5 calls after a reset, then Compute +
Allreduce(4) per call, accumulating ``neigh_check_avg``; past 1.0 it returns true (first at step 10).
Compute cycles: ``max(0, (long)((a*V + b) * CPI * router_freq / cpu_freq / cpu_sim_speedup + 0.5))``; the glue turns
cycles into ns with cpu_freq.

Why one module of this size: it follows SWM's LAMMPS skeleton step by step (decomposition, PPPM grid, the exchange
phases of a step), so a reader checks it against the C++ side by side.

Over 600 lines: LAMMPS' decomposition, neighbour exchange and op stream reproduce CODES' generator step by step,
which reads best in one module.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from .base import JobWorkload, WorkloadCost, WorkloadError, allreduce_ops, cycles_to_ns, packets_of
from .collectives import Program

# lammps.h
GHOST_SKIN_CUTOFF = 12.0
FFT_SKIN_CUTOFF = 2.0
N_ATOMS_BASE = 32000
NEIGH_DELAY = 5
NEIGH_EVERY = 1
XLO_BASE, XHI_BASE = -27.5, 27.5
YLO_BASE, YHI_BASE = -38.5, 38.5
ZLO_BASE, ZHI_BASE = -36.3646, 36.3615
GEWALD = 0.243177
FFT_ACCURACY = 0.033206
NUM_TRANSPOSE = 13
NUM_NEIGH_ALLREDUCE = 5
PI = 3.14159265358979323846

# lammps_model.h: message byte factors and fitted instruction-count models (a*V + b instructions, CPI)
MSG_GHOST_FW = 2.48839990371
MSG_GHOST_RW = 2.48841071356
MSG_K_PRE = 8.0
MSG_K_POST = 24.0
MSG_FIX = 2.48841071356
MSG_NEIGH_EXCH = 3.08673789851
MSG_NEIGH_BORDER = 6.63563071593
INS_START = ([8.51937488057], [1544.46231029], 0.843141163755)
INS_NEIGH_CHECK = ([89.6202085326], [195042.694781], 0.951841661097)
INS_NEIGH_EXCH_SR = ([11.5746361748, 1.3778877165, 1.34223584427],
                     [438096.47233, 4800.95420873, 8838.30958016], 1.58963777201)
INS_NEIGH_BORDER_SR = ([1.8243979135, 2.03810250649, 3.06679631198, 3.0870981696, 3.58608401984, 2.7521157202],
                       [32382.7816726, 51218.9714454, 83557.2150064, 99920.5231836, 248049.508775, 357653.369027],
                       1.75604132297)
INS_NEIGH_END = ([1.21665755465, 6595.30712353, 29.6655250587, 58.3229990241, 1.69059035676],
                 [139153.690154, 11183101.9944, 44150.0262654, 91071.0968296, 2057.50606924], 0.784053776222)
INS_K_PRE = ([43360.7612799, 0.780443563075, 0.999500801383, 1.23253340415, 1.11044737418, 0.813347233046],
             [-8151826.36712, 12652.2538632, 10478.6380748, 5362.54935036, 4946.43943567, 2809.82745824],
             0.897392796161)
INS_K_FFT = ([12.7660165971, 49.5132610315, 36.7957959, 48.6517835605, 102.611869648, 36.7771213175, 48.6352484315,
              71.1465535394, 36.7760281598, 48.624983362, 71.1461101858, 36.7661712493, 48.6196591605],
             [2755.32405875, -14031.7206559, -268.944769389, -34509.6094468, -15768.811004, 468.975498509,
              -34540.223738, -23736.2087919, -119.26574367, -34526.5937504, -23716.4687588, 130.351010748,
              -34514.7315393], 0.700575655531)
INS_K_POST = ([15.7888010275, 1.98489719387, 2.63496119567, 3.00664450319, 2.41731560611, 1.9085386988],
              [390.234582372, 6358.92071557, 11170.1400931, 12661.0465342, 24102.3020575, 30456.6591775],
              1.72457235374)
INS_K_ENERGY = ([5476.95439615], [-1073884.00556], 0.475585305054)
INS_GHOST_FW = ([43.2730897193, 0.0, 9.23745386168e-09, 2.35234627328e-08, 2.00592476871e-08, 1.33019109126e-07],
                [96380.315439, 313.368687371, 313.346132312, 313.327974814, 313.346666244, 313.3420572],
                0.924608655408)
INS_GHOST_RW = ([0.0, 0.31849027582, 0.316224042474, 0.513934022608, 0.501449013036, 0.298131697301],
                [566.574947244, 81855.4482201, 82072.2144336, 18124.8399648, 22463.1938402, 12639.7445334],
                1.91339519762)
INS_FIX = ([6.31029520441, 0.519042043438, 0.699422916624, 0.862615710189, 0.708782029108, 0.552896821411],
           [25475.6674291, 22357.989938, 30827.99377, 38715.8802264, 89865.0435751, 140845.450888], 1.96053897728)
INS_FINAL = ([43.3348975221], [141841.44285], 1.56863134534)
NEIGH_CHECK_AVG = 0.196428571429


def _ctrunc(x: float) -> int:
    """C's (int)/(long) conversion of a double: truncation toward zero."""
    return int(x)


def _cmod(a: int, b: int) -> int:
    """C's % on ints (sign of the dividend)."""
    return int(math.fmod(a, b))


def _round10(x: float) -> float:
    """lammps.cpp's static round(x, 10) = floor(x*10^10 + 0.5) / 10^10."""
    return math.floor(x * math.pow(10, 10) + 0.5) / math.pow(10, 10)


def proc_decomposition(n: int, prd: list[float]) -> list[int]:
    """Process grid with the smallest total surface; the first minimum wins (lammps.cpp 455-489)."""
    area = [prd[0] * prd[1], prd[0] * prd[2], prd[1] * prd[2]]
    best = 2 * (area[0] + area[1] + area[2])
    out = [0, 0, 0]
    for i in range(1, n + 1):
        if n % i == 0:
            for j in range(1, n // i + 1):
                if (n // i) % j == 0:
                    k = n // i // j
                    tmp = area[0] / i / j + area[1] / i / k + area[2] / j / k
                    if tmp < best:
                        best = tmp
                        out = [i, j, k]
    return out


def _pppm_error(h: float, p: float, n: int, prd: list[float]) -> float:
    acons = [1.0 / 23232.0, 7601.0 / 13628160.0, 143.0 / 69120.0, 517231.0 / 106536960.0,
             106640677.0 / 11737571328.0]
    q2 = 19.426017 * math.sqrt(n * prd[0] * prd[1] * prd[2])
    s = 0.0
    for i in range(5):
        s += acons[i] * math.pow(h * GEWALD, 2.0 * i)
    return q2 * math.pow(h * GEWALD, 5) * math.sqrt(GEWALD * p * math.sqrt(2 * PI) * s / n) / (p * p)


def _factorable(n: int) -> bool:
    while n > 1:
        for f in (2, 3, 5):
            if n % f == 0:
                n //= f
                break
        else:
            return False
    return True


def next_factorable(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= ``n`` (what lammps.cpp's ``while (!factorable(n)) n++`` finds, in O(log^2 n)
    steps instead of one per integer)."""
    if n <= 1:
        return n
    best = None
    p5 = 1
    while True:
        p35 = p5
        while True:
            # the smallest power of two that lifts p35 to n or above
            v = p35 if p35 >= n else p35 << (-(-n // p35) - 1).bit_length()
            if best is None or v < best:
                best = v
            if p35 >= n:
                break
            p35 *= 3
        if p5 >= n:
            break
        p5 *= 5
    return best


def _first_grid(h0: float, p: float, n: int, prd: list[float], g0: float) -> float:
    """lammps.cpp's error loop for one dimension, in closed steps: the loop starts at grid ``g0`` and ``h0``, and
    ends one step past the first grid g > g0 whose spacing p/g meets FFT_ACCURACY (the error falls as g grows), so
    the grid is found by doubling and bisection instead of one step per grid point."""
    if _pppm_error(h0, p, n, prd) <= FFT_ACCURACY:
        return g0

    def ok(k: int) -> bool:
        return _pppm_error(p / (g0 + k), p, n, prd) <= FFT_ACCURACY

    hi = 1
    while not ok(hi):
        hi *= 2
    lo = hi // 2  # ok(lo) is false (or lo = 0, which the loop never tests)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return g0 + hi + 1


def pppm_decomposition(n: int, prd: list[float]) -> list[float]:
    """PPPM FFT grid (lammps.cpp 491-516), as doubles holding integers: per dimension the first grid whose spacing
    meets the accuracy (see :func:`_first_grid`), then the next 2-3-5 factorable size."""
    h0 = 1.0 / GEWALD
    grid = [float(_ctrunc(prd[i] / h0) + 1) for i in range(3)]
    grid = [_first_grid(h0, prd[i], n, prd, grid[i]) for i in range(3)]
    return [float(next_factorable(_ctrunc(g))) for g in grid]


def _pppm_decomposition_loop(n: int, prd: list[float]) -> list[float]:
    """lammps.cpp 491-516 as written (one step per grid point): the reference :func:`pppm_decomposition` is tested
    against."""
    h = [1.0 / GEWALD] * 3
    grid = [float(_ctrunc(prd[i] / h[i]) + 1) for i in range(3)]
    for i in range(3):
        err = _pppm_error(h[i], prd[i], n, prd)
        while err > FFT_ACCURACY:
            err = _pppm_error(h[i], prd[i], n, prd)
            grid[i] += 1
            h[i] = prd[i] / grid[i]
    for i in range(3):
        while not _factorable(_ctrunc(grid[i])):
            grid[i] += 1
    return grid


def _cyc(v: float, a: float, b: float, cpi: float, rf: float, cf: float, sp: float) -> int:
    return max(0, _ctrunc((v * a + b) * cpi * rf / cf / sp + 0.5))


def _cyc_of_long(ins: int, cpi: float, rf: float, cf: float, sp: float) -> int:
    return max(0, _ctrunc(ins * cpi * rf / cf / sp + 0.5))


def _extent_problem(n_ranks: int, prd: list[float], pn: list[int]) -> str | None:
    for i in range(3):
        if _ctrunc(FFT_SKIN_CUTOFF / (prd[i] / pn[i]) + 1) != 1:
            return (f"LAMMPS: {n_ranks} ranks give a process grid {pn} whose local extent in dimension {i} "
                    f"({prd[i] / pn[i]:.3f}) is not larger than the FFT cutoff {FFT_SKIN_CUTOFF} (CODES asserts, "
                    f"lammps.cpp k_pre_setup); use more replicas or fewer ranks")
    return None


def decomposition_problem(n_ranks: int, x_rep: int, y_rep: int, z_rep: int) -> str | None:
    """Why ``n_ranks`` cannot run this LAMMPS problem (the message :class:`LammpsModel` raises), or ``None``."""
    prd = [x_rep * (XHI_BASE - XLO_BASE), y_rep * (YHI_BASE - YLO_BASE), z_rep * (ZHI_BASE - ZLO_BASE)]
    return _extent_problem(n_ranks, prd, proc_decomposition(n_ranks, prd))


class LammpsModel:
    """Everything ``modelInit`` computes, per job (grids) and per rank (exchange lists, cycle counts)."""

    def __init__(self, n_ranks: int, x_rep: int, y_rep: int, z_rep: int, router_freq: float, cpu_freq: float,
                 cpu_sim_speedup: float, fft_layouts: bool = True):
        self.P = n_ranks
        self.rf, self.cf, self.sp = float(router_freq), float(cpu_freq), float(cpu_sim_speedup)
        self.prd = [x_rep * (XHI_BASE - XLO_BASE), y_rep * (YHI_BASE - YLO_BASE), z_rep * (ZHI_BASE - ZLO_BASE)]
        self.procs = proc_decomposition(n_ranks, self.prd)
        self.grid = pppm_decomposition(N_ATOMS_BASE * x_rep * y_rep * z_rep, self.prd)
        prd, pn, g = self.prd, self.procs, self.grid
        self.t_vol = prd[0] / pn[0] * prd[1] / pn[1] * prd[2] / pn[2]
        self.f_vol = g[0] / pn[0] * g[1] / pn[1] * g[2] / pn[2]
        problem = _extent_problem(n_ranks, prd, pn)
        if problem:
            raise WorkloadError(problem)
        # O(P) per job; :func:`cost` does without them (it needs no FFT exchange list)
        self._fft_layouts = self._all_fft_layouts() if fft_layouts else None
        c = self._c
        tv, fv = self.t_vol, self.f_vol
        self.start_cyc = c(tv, INS_START, 0)
        self.k_energy_cyc = c(fv, INS_K_ENERGY, 0)
        self.final_cyc = c(tv, INS_FINAL, 0)
        self.neigh_check_cyc = c(tv, INS_NEIGH_CHECK, 0)
        self.neigh_end_cyc = [c(tv, INS_NEIGH_END, i) for i in range(NUM_NEIGH_ALLREDUCE)]
        self.fft_cyc = [c(fv, INS_K_FFT, i) for i in range(NUM_TRANSPOSE)]

    def _c(self, vol: float, model, i: int) -> int:
        a, b, cpi = model
        return _cyc(vol, a[i], b[i], cpi, self.rf, self.cf, self.sp)

    # ---------------------------------------------------------------------------------------------- geometry
    def rank_to_xyz(self, rank: int) -> list[int]:
        p = self.procs
        return [rank // p[2] // p[1] % p[0], rank // p[2] % p[1], rank % p[2]]

    def xyz_to_rank(self, c: list[int]) -> int:
        p = self.procs
        m = [c[i] % p[i] for i in range(3)]
        return m[0] * p[1] * p[2] + m[1] * p[2] + m[2]

    def neighbors(self, rank: int) -> list[int]:
        """(x+1, x-1, y+1, y-1, z+1, z-1), periodic."""
        c = self.rank_to_xyz(rank)
        out = []
        for d in range(3):
            for delta in (1, -1):
                t = list(c)
                t[d] += delta
                out.append(self.xyz_to_rank(t))
        return out

    # ---------------------------------------------------------------------------------------------- ghost lists
    def ghost_lists(self, rank: int):
        """Forward, reverse, fix and neigh-border lists: each a list of (r_target, s_target, size, cycles)."""
        prd, pn, cut = self.prd, self.procs, GHOST_SKIN_CUTOFF
        nc = [_ctrunc(cut / (prd[i] / pn[i]) + 1) for i in range(3)]
        n = self.neighbors(rank)
        r_t, s_t, sizes = [], [], []
        for d in range(3):
            for _ in range(nc[d]):
                r_t += [n[2 * d], n[2 * d + 1]]
        e = [prd[i] / pn[i] for i in range(3)]
        full = [(e[1] + 0 * cut) * (e[2] + 0 * cut) * prd[0] / pn[0],
                (prd[0] / pn[0] + 2 * cut) * (prd[2] / pn[2] + 0 * cut) * prd[1] / pn[1],
                (prd[0] / pn[0] + 2 * cut) * (prd[1] / pn[1] + 2 * cut) * prd[2] / pn[2]]
        maxv = [(prd[1] / pn[1] + 0 * cut) * (prd[2] / pn[2] + 0 * cut) * cut,
                (prd[0] / pn[0] + 2 * cut) * (prd[2] / pn[2] + 0 * cut) * cut,
                (prd[0] / pn[0] + 2 * cut) * (prd[1] / pn[1] + 2 * cut) * cut]
        for d in range(3):
            tmp = 0.0
            for i in range(nc[d]):
                if i < nc[d] - 1:
                    sz = _ctrunc(full[d])
                    tmp = tmp + sz
                else:
                    sz = _ctrunc(maxv[d] - tmp)
                s_t += [n[2 * d + 1], n[2 * d]]
                sizes += [sz, sz]
        L = len(r_t)
        rw_idx = []
        for i in range(L - 2, -1, -2):
            rw_idx += [i, i + 1]
        tv = self.t_vol
        fw_ins, fix_ins, nb_ins = [], [], []
        for d in range(3):
            for _ in range(nc[d]):
                for k in (2 * d, 2 * d + 1):
                    fw_ins.append(_ctrunc(tv * INS_GHOST_FW[0][k] + INS_GHOST_FW[1][k]))
                    fix_ins.append(_ctrunc(tv * INS_FIX[0][k] + INS_FIX[1][k]))
                    nb_ins.append(_ctrunc(tv * INS_NEIGH_BORDER_SR[0][k] + INS_NEIGH_BORDER_SR[1][k]))
        rw_ins = []
        for d in (2, 1, 0):
            for _ in range(nc[d]):
                for k in (2 * d, 2 * d + 1):
                    rw_ins.append(_ctrunc(tv * INS_GHOST_RW[0][k] + INS_GHOST_RW[1][k]))
        rf, cf, sp = self.rf, self.cf, self.sp

        def conv(ins, cpi):
            return [_cyc_of_long(x, cpi, rf, cf, sp) for x in ins]

        def scale(szs, f):
            return [_ctrunc(s * f + 0.5) for s in szs]

        fw = list(zip(r_t, s_t, scale(sizes, MSG_GHOST_FW), conv(fw_ins, INS_GHOST_FW[2])))
        rw = list(zip([r_t[i] for i in rw_idx], [s_t[i] for i in rw_idx],
                      scale([sizes[i] for i in rw_idx], MSG_GHOST_RW), conv(rw_ins, INS_GHOST_RW[2])))
        fix = list(zip(r_t, s_t, scale(sizes, MSG_FIX), conv(fix_ins, INS_FIX[2])))
        nb = list(zip(r_t, s_t, scale(sizes, MSG_NEIGH_BORDER), conv(nb_ins, INS_NEIGH_BORDER_SR[2])))
        return fw, rw, fix, nb

    # ---------------------------------------------------------------------------------------------- k-space lists
    def _ext(self, d: int, c: list[int]) -> int:
        g, pn = self.grid, self.procs
        return _ctrunc(g[d] / pn[d] * (c[d] + 1)) - _ctrunc(g[d] / pn[d] * c[d])

    def _rs(self, c: list[int]) -> list[int]:
        prd, pn, g, cut = self.prd, self.procs, self.grid, FFT_SKIN_CUTOFF
        rs = []
        for d in range(3):
            hi_out = _ctrunc(((c[d] + 1) * prd[d] / pn[d] + cut / 2.0) * g[d] / prd[d] + 0.5)
            hi_in = _ctrunc((c[d] + 1) * prd[d] / pn[d] * g[d] / prd[d]) - 1
            lo_out = _ctrunc((c[d] * prd[d] / pn[d] - cut / 2.0) * g[d] / prd[d] + 0.5)
            lo_in = _ctrunc(c[d] * prd[d] / pn[d] * g[d] / prd[d])
            rs.append(abs(lo_out - lo_in) + 2 + abs(hi_out - hi_in) + 2)
        return rs

    def k_pre_list(self, rank: int):
        prd, pn, g, cut = self.prd, self.procs, self.grid, FFT_SKIN_CUTOFF
        n = self.neighbors(rank)
        c = self.rank_to_xyz(rank)
        rs = self._rs(c)
        ext = [self._ext(d, c) for d in range(3)]
        other = {2: (ext[0] + rs[0]) * (ext[1] + rs[1]), 1: (ext[0] + rs[0]) * ext[2], 0: ext[1] * ext[2]}
        sizes = []
        for d in (2, 1, 0):
            lo_out = _ctrunc(_round10(((c[d] + 1) * prd[d] / pn[d] + cut / 2.0) * g[d] / prd[d] + 0.5))
            lo_in = _ctrunc(_round10((c[d] + 1) * prd[d] / pn[d] * g[d] / prd[d])) - 1
            hi_out = _ctrunc(_round10((c[d] * prd[d] / pn[d] - cut / 2.0) * g[d] / prd[d] + 0.5))
            hi_in = _ctrunc(_round10(c[d] * prd[d] / pn[d] * g[d] / prd[d]))
            sizes += [(abs(hi_out - hi_in) + 2) * other[d], (abs(lo_out - lo_in) + 2) * other[d]]
        r_t = [n[4], n[5], n[2], n[3], n[0], n[1]]
        s_t = [n[5], n[4], n[3], n[2], n[1], n[0]]
        sizes = [_ctrunc(s * MSG_K_PRE + 0.5) for s in sizes]
        cyc = [self._c(self.f_vol, INS_K_PRE, i) for i in range(6)]
        return list(zip(r_t, s_t, sizes, cyc))

    def k_post_list(self, rank: int):
        prd, pn, g, cut = self.prd, self.procs, self.grid, FFT_SKIN_CUTOFF
        n = self.neighbors(rank)
        c = self.rank_to_xyz(rank)
        rs = self._rs(c)
        ext = [self._ext(d, c) for d in range(3)]
        other = {0: ext[1] * ext[2], 1: (ext[0] + rs[0]) * ext[2], 2: (ext[0] + rs[0]) * (ext[1] + rs[1])}
        sizes = []
        for d in (0, 1, 2):
            cm = _cmod(c[d] - 1, pn[d]) + 1
            cp = (c[d] + 1) % pn[d]
            lo_out = _ctrunc(_round10((cm * prd[d] / pn[d] + cut / 2.0) * g[d] / prd[d] + 0.5))
            lo_in = _ctrunc(_round10(cm * prd[d] / pn[d] * g[d] / prd[d])) - 1
            hi_out = _ctrunc(_round10((cp * prd[d] / pn[d] - cut / 2.0) * g[d] / prd[d] + 0.5))
            hi_in = _ctrunc(_round10(cp * prd[d] / pn[d] * g[d] / prd[d]))
            sizes += [(abs(lo_out - lo_in) + 2) * other[d], (abs(hi_out - hi_in) + 2) * other[d]]
        r_t = [n[0], n[1], n[2], n[3], n[4], n[5]]
        s_t = [n[1], n[0], n[3], n[2], n[5], n[4]]
        sizes = [_ctrunc(s * MSG_K_POST + 0.5) for s in sizes]
        cyc = [self._c(self.f_vol, INS_K_POST, i) for i in range(6)]
        return list(zip(r_t, s_t, sizes, cyc))

    def neigh_e_list(self, rank: int):
        prd, pn = self.prd, self.procs
        n = self.neighbors(rank)
        face = [_ctrunc(_ctrunc(prd[1] / pn[1]) * (prd[2] / pn[2])),
                _ctrunc(_ctrunc(prd[0] / pn[0]) * (prd[2] / pn[2])),
                _ctrunc(_ctrunc(prd[0] / pn[0]) * (prd[1] / pn[1]))]
        out = []
        for d in range(3):
            size = _ctrunc(face[d] * MSG_NEIGH_EXCH + 0.5)
            cyc = self._c(self.t_vol, INS_NEIGH_EXCH_SR, d)
            out.append((n[2 * d], n[2 * d + 1], size, cyc))
            if n[2 * d] != n[2 * d + 1]:
                out.append((n[2 * d + 1], n[2 * d], size, 0))
        return out

    # ---------------------------------------------------------------------------------------------- FFT
    def _best_2d_mapping(self, nx: int, ny: int) -> tuple[int, int]:
        P = self.P
        bestsurf, bestx, besty = 2 * (nx + ny), 0, 0
        px = py = 0
        for ipx in range(1, P + 1):
            if P % ipx == 0:
                ipy = P // ipx
                boxx = nx // ipx + (1 if nx % ipx else 0)
                boxy = ny // ipy + (1 if ny % ipy else 0)
                surf = boxx + boxy
                if surf < bestsurf or (surf == bestsurf and boxx * boxy > bestx * besty):
                    bestsurf, bestx, besty = surf, boxx, boxy
                    px, py = ipx, ipy
        return px, py

    def _bifactor(self, n: int) -> tuple[int, int]:
        f1 = int(math.sqrt(n))
        f2 = 0
        while f1 > 0:
            f2 = n // f1
            if f1 * f2 == n:
                return f1, f2
            f1 -= 1
        return f1, f2

    def _all_fft_layouts(self) -> dict[str, np.ndarray]:
        """nx[10] of every rank for the four pencil layouts (in, fft, mid1, mid2), as (P, 10) int arrays."""
        P, g, pn = self.P, self.grid, self.procs
        lay = {k: np.zeros((P, 10), dtype=np.int64) for k in ("in", "fft", "mid1", "mid2")}
        if g[2] > P:
            py, pz = 1, P
        else:
            py, pz = self._best_2d_mapping(_ctrunc(g[1]), _ctrunc(g[2]))
        f1, f2 = self._bifactor(P)
        g0, g1, g2 = _ctrunc(g[0]), _ctrunc(g[1]), _ctrunc(g[2])
        for r in range(P):
            c = self.rank_to_xyz(r)
            nx = [_ctrunc(float(c[0]) / pn[0] * g[0]), _ctrunc(float(c[0] + 1) / pn[0] * g[0]) - 1,
                  _ctrunc(float(c[1]) / pn[1] * g[1]), _ctrunc(float(c[1] + 1) / pn[1] * g[1]) - 1,
                  _ctrunc(float(c[2]) / pn[2] * g[2]), _ctrunc(float(c[2] + 1) / pn[2] * g[2]) - 1]
            lay["in"][r] = nx + nx[:4]
            me_y, me_z = r % py, r // py
            nx = [0, _ctrunc(g[0] - 1), _ctrunc(me_y * g[1] / py), _ctrunc((me_y + 1) * g[1] / py - 1),
                  _ctrunc(me_z * g[2] / pz), _ctrunc((me_z + 1) * g[2] / pz - 1)]
            lay["fft"][r] = nx + nx[:4]
            ip1, ip2 = r % f1, r // f1
            nx = [ip1 * g0 // f1, (ip1 + 1) * g0 // f1 - 1, 0, g1 - 1, ip2 * g2 // f2, (ip2 + 1) * g2 // f2 - 1]
            lay["mid1"][r] = nx + nx[:4]
            nx = [ip1 * g0 // f1, (ip1 + 1) * g0 // f1 - 1, ip2 * g1 // f2, (ip2 + 1) * g1 // f2 - 1, 0, g2 - 1]
            lay["mid2"][r] = nx + nx[:4]
        return lay

    #: the 13 transposes: (from layout, shift, to layout, shift, bytes per grid point)
    TRANSPOSES = ([("in", 0, "fft", 0, 8), ("fft", 0, "mid1", 0, 16), ("mid1", 2, "mid2", 2, 16),
                   ("mid2", 4, "fft", 4, 16)]
                  + [("fft", 0, "mid1", 0, 16), ("mid1", 2, "mid2", 2, 16), ("mid2", 4, "in", 4, 16)] * 3)

    def _overlap(self, a: np.ndarray, b: np.ndarray):
        """Overlap sizes (points) of box a (6,) with each box in b (P, 6); 0 where they do not overlap."""
        lo0 = np.maximum(a[0], b[:, 0]); hi0 = np.minimum(a[1], b[:, 1])
        lo1 = np.maximum(a[2], b[:, 2]); hi1 = np.minimum(a[3], b[:, 3])
        lo2 = np.maximum(a[4], b[:, 4]); hi2 = np.minimum(a[5], b[:, 5])
        ok = (lo0 <= hi0) & (lo1 <= hi1) & (lo2 <= hi2)
        return ok, (hi0 - lo0 + 1) * (hi1 - lo1 + 1) * (hi2 - lo2 + 1)

    def fft_lists(self, rank: int):
        """Per transpose: (recv peers, [(send peer, bytes)], cycles). Peers in CODES' order (rank+1, rank+2, ...)."""
        P = self.P
        order = (rank + np.arange(1, P)) % P
        out = []
        for t, (lin, sin, lout, sout, bpp) in enumerate(self.TRANSPOSES):
            all_in = self._fft_layouts[lin][:, sin:sin + 6]
            all_out = self._fft_layouts[lout][:, sout:sout + 6]
            s_ok, s_sz = self._overlap(all_in[rank], all_out[order])
            r_ok, _ = self._overlap(all_out[rank], all_in[order])
            sends = [(int(r), bpp * int(s)) for r, s in zip(order[s_ok], s_sz[s_ok])]
            recvs = [int(r) for r in order[r_ok]]
            out.append((recvs, sends, self.fft_cyc[t]))
        return out


#: bytes per grid point moved by the 13 transposes together (LammpsModel.TRANSPOSES)
_FFT_BYTES_PER_POINT = sum(t[4] for t in LammpsModel.TRANSPOSES)


def cost(n_ranks: int, w, packet_size: int) -> WorkloadCost:
    """Per rank-iteration of a plain step, from the job's geometry (process grid, PPPM grid and rank 0's ghost and
    k-space exchange lists: no FFT layout, no op list is built): the ghost and k-space messages as they are, the 13
    FFT transposes as a rank's share of the grid (``grid points / P`` x their bytes per point, the part that stays on
    the rank left out) over sqrt(P) peers each (a pencil transpose spans at least a row of the process grid; the
    real count is nearer P / 3). The largest message is at least the largest ghost or k-space message to another rank,
    and at least a transpose's average message: 16 B x (grid points / P) / P. Raises :class:`WorkloadError` when the
    ranks cannot decompose the problem (as building the workload would). The replica counts set every size: the
    largest message's field is the largest of them."""
    return _cost(n_ranks, (w.num_x_replicas, w.num_y_replicas, w.num_z_replicas), float(w.router_freq),
                 float(w.cpu_freq), float(w.cpu_sim_speedup), packet_size)


@lru_cache(maxsize=256)  # a job stream repeats the same few shapes
def _cost(n_ranks: int, reps: tuple, router_freq: float, cpu_freq: float, cpu_sim_speedup: float,
          packet_size: int) -> WorkloadCost:
    problem = decomposition_problem(n_ranks, *reps)
    if problem is not None:
        raise WorkloadError(problem)
    m = LammpsModel(n_ranks, *reps, router_freq, cpu_freq, cpu_sim_speedup, fft_layouts=False)
    fw, rw, fix, _nb = m.ghost_lists(0)
    p2p = fw + rw + fix + m.k_pre_list(0) + m.k_post_list(0)
    remote = [size for _r, s_t, size, _c in p2p if s_t != 0]
    P = n_ranks
    points = m.grid[0] * m.grid[1] * m.grid[2] / P
    fft_bytes = _FFT_BYTES_PER_POINT * points * (P - 1) / P
    ar_ops, ar_steps = allreduce_ops(P, 48)
    peers = min(P - 1, math.sqrt(P))
    cycles = (m.start_cyc + m.k_energy_cyc + m.final_cyc + sum(m.fft_cyc) + sum(c for *_x, c in p2p))
    fft_message = int(max(t[4] for t in m.TRANSPOSES) * points / P) if P > 1 else 0
    field = ("num_x_replicas", "num_y_replicas", "num_z_replicas")[reps.index(max(reps))]
    return WorkloadCost(ops=4 * len(p2p) + 5 * ar_ops + len(m.TRANSPOSES) * (3 + 2 * peers),
                        packets=sum(packets_of(s, packet_size) for s in remote) + fft_bytes / packet_size
                        + 5 * ar_steps, max_message=max(remote + [fft_message]), message_field=field,
                        compute_ns=cycles_to_ns(cycles, cpu_freq))


@lru_cache(maxsize=16)
def lammps_model(n_ranks: int, x_rep: int, y_rep: int, z_rep: int, router_freq: float, cpu_freq: float,
                 cpu_sim_speedup: float) -> LammpsModel:
    return LammpsModel(n_ranks, x_rep, y_rep, z_rep, router_freq, cpu_freq, cpu_sim_speedup)


def neigh_check_schedule(n_steps: int) -> list[tuple[bool, bool]]:
    """Per step: (neigh_check does Compute + Allreduce(4), neighbour exchange replaces ghost forward)."""
    out = []
    count, cum = 0, 0.0
    for _ in range(n_steps):
        if count < NEIGH_DELAY:
            count += 1
            out.append((False, False))
            continue
        if (count - NEIGH_DELAY) % NEIGH_EVERY:
            count += 1
            out.append((False, False))
            continue
        cum += NEIGH_CHECK_AVG
        if cum > 1.0:
            cum -= 1.0
            count = 0
            out.append((True, True))
        else:
            count += 1
            out.append((True, False))
    return out


class LammpsJob(JobWorkload):
    kind = "lammps"

    def __init__(self, name: str, n_ranks: int, iterations: int, w):
        super().__init__(name, n_ranks, iterations)
        self.cpu_freq = float(w.cpu_freq)
        self.model = lammps_model(n_ranks, w.num_x_replicas, w.num_y_replicas, w.num_z_replicas,
                                  float(w.router_freq), float(w.cpu_freq), float(w.cpu_sim_speedup))
        self.schedule = neigh_check_schedule(iterations)
        self._cache: dict[tuple[int, int], tuple] = {}
        self._lists: dict[int, tuple] = {}

    def _ns(self, cycles: int) -> float:
        return cycles_to_ns(cycles, self.cpu_freq)

    def rank_lists(self, rank: int) -> tuple:
        t = self._lists.get(rank)
        if t is None:
            m = self.model
            fw, rw, fix, nb = m.ghost_lists(rank)
            t = (fw, rw, fix, nb, m.k_pre_list(rank), m.k_post_list(rank), m.neigh_e_list(rank), m.fft_lists(rank))
            if len(self._lists) > 4096:
                self._lists.clear()
            self._lists[rank] = t
        return t

    def _p2p(self, p: Program, lst) -> None:
        for r_t, s_t, size, cyc in lst:
            p.compute(self._ns(cyc))
            h = p.irecv(r_t, 0)
            p.send(s_t, size, 0)
            p.wait(h)

    def _build(self, rank: int, variant: int) -> tuple:
        fw, rw, fix, nb, kpre, kpost, ne, fft = self.rank_lists(rank)
        m = self.model
        p = Program(rank, self.n_ranks)
        p.compute(self._ns(m.start_cyc))
        p.allreduce(48)
        p.allreduce(48)
        if variant >= 1:  # neigh_check does work
            p.compute(self._ns(m.neigh_check_cyc))
            p.allreduce(4)
        if variant == 2:  # doNeighExch
            i = 0
            while i < len(ne):
                r_t, s_t, size, cyc = ne[i]
                p.compute(self._ns(cyc))
                p.sendrecv(r_t, 4, s_t, 0)
                if r_t != s_t:
                    p.sendrecv(s_t, 4, r_t, 0)
                h = p.irecv(r_t, 0)
                p.send(s_t, size, 0)
                p.wait(h)
                i += 1
                if i < len(ne) and ne[i - 1][0] != ne[i - 1][1]:
                    r2, s2, size2, _ = ne[i]
                    h = p.irecv(r2, 0)
                    p.send(s2, size2, 0)
                    p.wait(h)
                    i += 1
            for r_t, s_t, size, cyc in nb:
                p.compute(self._ns(cyc))
                p.sendrecv(r_t, 4, s_t, 0)
                h = p.irecv(r_t, 0)
                p.send(s_t, size, 0)
                p.wait(h)
            for k in range(NUM_NEIGH_ALLREDUCE):
                p.compute(self._ns(m.neigh_end_cyc[k]))
                p.allreduce(4)
        else:
            self._p2p(p, fw)
        self._p2p(p, kpre)
        for recvs, sends, cyc in fft:
            p.compute(self._ns(cyc))
            rh = [p.irecv(r, 0) for r in recvs]
            sh = [p.isend(s, nbytes, 0) for s, nbytes in sends]
            p.waitall(rh)
            p.waitall(sh)
        self._p2p(p, kpost)
        p.compute(self._ns(m.k_energy_cyc))
        p.allreduce(48)
        self._p2p(p, rw)
        self._p2p(p, fix)
        p.compute(self._ns(m.final_cyc))
        p.allreduce(8)
        p.allreduce(48)
        return tuple(p.ops)

    def step_variant(self, iteration: int) -> int:
        """0: plain step; 1: neigh_check does a Compute + Allreduce(4); 2: plus the neighbour exchange."""
        check, exch = self.schedule[iteration]
        return 2 if exch else (1 if check else 0)

    def iteration_ops(self, rank: int, iteration: int) -> list[tuple]:
        self._check(rank, iteration)
        key = (rank, self.step_variant(iteration))
        t = self._cache.get(key)
        if t is None:
            if len(self._cache) > 8192:
                self._cache.clear()
            t = self._cache[key] = self._build(rank, key[1])
        return list(t)

"""Port sampling: every ``sampling.interval`` of virtual time, one row of features per router port.

Features (see :data:`hybridsim_common.records.PORT_FEATURES` for the core six), per window ``[t0, t1)``:

* ``bytes``: bytes sent out of the port; ``util_pct`` = bytes / (nominal bandwidth x window) x 100;
* ``busy_ns``: time blocked on credits, as CODES' ``busy_time``: an interval opens when a packet finds its downstream
  buffer full and none is open, and closes at the port's next credit or next send;
* ``stalled``: packets that found their downstream (port, VC) buffer full;
* ``vc_occ`` / ``queued``: bytes accounted in the VC buffers / waiting in the overflow lists, at ``t1``;
* ``packets``: packets sent;
* per VC ``k``: ``vc{k}_occ_mean`` (time-weighted mean occupancy in bytes), ``vc{k}_occ_last`` (at ``t1``),
  ``vc{k}_credits`` (free downstream buffer bytes at ``t1``).
"""

from __future__ import annotations

import numpy as np

from hybridsim_common.records import PORT_FEATURES, PortSamples


class PortSampler:
    """Turns the network's running counters into :class:`PortSamples` blocks (one window each)."""

    def __init__(self, net, interval: float):
        self.net = net
        self.interval = float(interval)
        NV = net.nv
        self.features = tuple(PORT_FEATURES) + ("packets",) + tuple(
            f"vc{k}_{name}" for k in range(NV) for name in ("occ_mean", "occ_last", "credits"))
        n = net.n_ports
        self.bw = np.asarray(net.bw_bpns, dtype=np.float64)
        self.cap = np.repeat(np.asarray(net.cap, dtype=np.float64)[:, None], NV, axis=1)
        self.prev_bytes = np.zeros(n)
        self.prev_pkts = np.zeros(n)
        self.prev_busy = np.zeros(n)
        self.prev_stalled = np.zeros(n)
        self.prev_int = np.zeros((n, NV))
        self.t0 = 0.0
        self.blocks: list[PortSamples] = []

    def sample(self, t: float) -> PortSamples:
        net = self.net
        NV, P = net.nv, net.P
        win = t - self.t0
        if win <= 0:
            raise ValueError("empty sampling window")
        c = net.counters()  # one read of every counter (the native core copies them all per call)
        by = np.asarray(c["bytes"], dtype=np.float64)
        pk = np.asarray(c["pkts"], dtype=np.float64)
        bs = np.asarray(c["busy_start"], dtype=np.float64)
        busy = np.asarray(c["busy_acc"], dtype=np.float64) + np.where(bs >= 0, t - bs, 0.0)
        st = np.asarray(c["stalled"], dtype=np.float64)
        occ = np.asarray(c["occ"], dtype=np.float64).reshape(-1, NV)
        occ_t = np.asarray(c["occ_t"], dtype=np.float64).reshape(-1, NV)
        integ = np.asarray(c["occ_int"], dtype=np.float64).reshape(-1, NV) + occ * (t - occ_t)
        d_bytes = by - self.prev_bytes
        # each feature computed in float64 and written into its float32 column (the cast astype would make; one
        # array, no stack of columns: a window is sampled every interval, pure or hybrid, so this is for performance)
        values = np.empty((1, len(by), len(self.features)), dtype=np.float32)
        v = values[0]
        v[:, 0] = d_bytes
        v[:, 1] = busy - self.prev_busy
        v[:, 2] = d_bytes / (self.bw * win) * 100.0
        v[:, 3] = st - self.prev_stalled
        tot = occ[:, 0].copy()  # the sum over VCs (whole numbers: exact in any order), cheaper than occ.sum(axis=1)
        for k in range(1, NV):
            tot += occ[:, k]
        v[:, 4] = tot * P
        v[:, 5] = np.asarray(c["qcount"], dtype=np.float64) * P
        v[:, 6] = pk - self.prev_pkts
        v[:, 7::3] = (integ - self.prev_int) / win * P   # per VC k: columns 7 + 3k (occ_mean), 8 + 3k, 9 + 3k
        v[:, 8::3] = occ * P
        v[:, 9::3] = (self.cap - occ) * P
        self.prev_bytes, self.prev_pkts, self.prev_busy, self.prev_stalled, self.prev_int = by, pk, busy, st, integ
        self.t0 = t
        block = PortSamples(np.array([t]), self.interval, net.radix, self.features, values,
                            meta={"window_ns": win})
        self.blocks.append(block)
        return block

    def combined(self) -> PortSamples | None:
        if not self.blocks:
            return None
        return PortSamples(np.concatenate([b.t_end for b in self.blocks]), self.interval, self.net.radix,
                           self.features, np.concatenate([b.values for b in self.blocks], axis=0))

    def link_totals(self, t: float) -> dict:
        """Per-port totals over the whole run (numpy arrays indexed by global port id)."""
        net = self.net
        c = net.counters()
        bs = np.asarray(c["busy_start"], dtype=np.float64)
        return {
            "radix": net.radix,
            "port_class": np.asarray(net.port_class, dtype=np.int8),
            "bytes": np.asarray(c["bytes"], dtype=np.int64),
            "packets": np.asarray(c["pkts"], dtype=np.int64),
            "busy_ns": np.asarray(c["busy_acc"], dtype=np.float64) + np.where(bs >= 0, t - bs, 0.0),
            "stalled": np.asarray(c["stalled"], dtype=np.int64),
            "util_pct": np.asarray(c["bytes"], dtype=np.float64) / (self.bw * max(t, 1e-9)) * 100.0,
        }

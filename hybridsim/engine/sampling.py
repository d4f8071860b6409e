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
    """Turns the network's running counters into :class:`PortSamples` blocks (one window each).

    ``keep=False``: the windows are taken as with their values -- the same sampling events, at the same places in
    the event order, not counted against ``limits.max_samples`` (a memory bound) -- but their values are neither
    computed nor kept
    (:meth:`combined` is None, a block has no ports): for a run whose samples nobody reads as it goes nor writes,
    where they would grow with simulated time (one ``(ports, features)`` float32 row a window: 2.4 MB on 8,320
    nodes, every 250 us)."""

    def __init__(self, net, interval: float, keep: bool = True):
        self.net = net
        self.interval = float(interval)
        self.keep = bool(keep)
        NV = net.nv
        self.features = tuple(PORT_FEATURES) + ("packets",) + tuple(
            f"vc{k}_{name}" for k in range(NV) for name in ("occ_mean", "occ_last", "credits"))
        n = net.n_ports
        self.bw = np.asarray(net.bw_bpns, dtype=np.float64)
        self.cap = np.asarray(net.cap, dtype=np.float64)
        #: the previous window's end values: bytes, packets, busy time, stalled packets (rows) per port; the VCs'
        #: occupancy integrals (n, NV)
        self.prev = np.zeros((4, n))
        self.prev_int = np.zeros((n, NV))
        # the native core computes a window's features itself (NativeNetwork.sample_ports, the numpy lines below in
        # C++, for performance); the Python network leaves them to numpy
        self._native = net.sample_ports
        self._pull = None   # the native core's sample_pull while it samples the windows itself (run_natively)
        self.t0 = 0.0
        #: the windows so far: their end times and lengths (ns); their values are the rows of one growing array,
        #: which combined() slices (no block per window to concatenate: for performance)
        self.t_end: list[float] = []
        self.win: list[float] = []
        self._rows = np.empty((8, n if self.keep else 0, len(self.features)), dtype=np.float32)

    @property
    def n_windows(self) -> int:
        return len(self.t_end)

    @property
    def blocks(self) -> list[PortSamples]:
        """The windows so far, one :class:`PortSamples` block each (as :meth:`sample` returns them)."""
        return [self._block(k) for k in range(len(self.t_end))]

    def _block(self, k: int) -> PortSamples:
        return PortSamples(np.array([self.t_end[k]]), self.interval, self.net.radix, self.features,
                           self._rows[k:k + 1], meta={"window_ns": self.win[k]})

    def _grow(self, n: int) -> None:
        """Room for ``n`` windows in the rows (doubling)."""
        if n > len(self._rows):
            k = len(self.t_end)
            rows = np.empty((max(2 * len(self._rows), n),) + self._rows.shape[1:], dtype=np.float32)
            rows[:k] = self._rows[:k]
            self._rows = rows

    def sample(self, t: float) -> PortSamples:
        net = self.net
        win = t - self.t0
        if win <= 0:
            raise ValueError("empty sampling window")
        k = len(self.t_end)
        self._grow(k + 1)
        if self.keep and self._native is not None:
            self._native(t, win, self.bw, self.cap, self.prev, self.prev_int, self._rows[k])
        elif self.keep:
            self._sample_numpy(t, win, self._rows[k])
        self.t0 = t
        self.t_end.append(t)
        self.win.append(win)
        return self._block(k)

    def _sample_numpy(self, t: float, win: float, v: np.ndarray) -> None:
        """The window ``[t0, t)``'s features into ``v`` (n_ports, F) float32; ``prev`` / ``prev_int`` move on to
        ``t``. The native core's ``sample_ports`` computes the same float64 expressions in the same order."""
        net = self.net
        NV, P = net.nv, net.P
        c = net.counters()  # one read of every counter
        by = np.asarray(c["bytes"], dtype=np.float64)
        pk = np.asarray(c["pkts"], dtype=np.float64)
        bs = np.asarray(c["busy_start"], dtype=np.float64)
        busy = np.asarray(c["busy_acc"], dtype=np.float64) + np.where(bs >= 0, t - bs, 0.0)
        st = np.asarray(c["stalled"], dtype=np.float64)
        occ = np.asarray(c["occ"], dtype=np.float64).reshape(-1, NV)
        occ_t = np.asarray(c["occ_t"], dtype=np.float64).reshape(-1, NV)
        integ = np.asarray(c["occ_int"], dtype=np.float64).reshape(-1, NV) + occ * (t - occ_t)
        prev = self.prev
        d_bytes = by - prev[0]
        # each feature computed in float64 and written into its float32 column (the cast astype would make)
        v[:, 0] = d_bytes
        v[:, 1] = busy - prev[2]
        v[:, 2] = d_bytes / (self.bw * win) * 100.0
        v[:, 3] = st - prev[3]
        tot = occ[:, 0].copy()  # the sum over VCs (whole numbers: exact in any order), cheaper than occ.sum(axis=1)
        for k in range(1, NV):
            tot += occ[:, k]
        v[:, 4] = tot * P
        v[:, 5] = np.asarray(c["qcount"], dtype=np.float64) * P
        v[:, 6] = pk - prev[1]
        v[:, 7::3] = (integ - self.prev_int) / win * P   # per VC k: columns 7 + 3k (occ_mean), 8 + 3k, 9 + 3k
        v[:, 8::3] = occ * P
        v[:, 9::3] = (self.cap[:, None] - occ) * P
        prev[0], prev[1], prev[2], prev[3] = by, pk, busy, st
        self.prev_int[...] = integ   # in place, as the native core's sample_ports (which may hold these arrays)

    def run_natively(self, first: float, max_windows: int, fallback) -> bool:
        """Let the native core take the windows from ``first`` on itself, every ``interval`` (its
        ``sample_every``: the engine's sampling event run in C++ with :meth:`sample`'s values, no Python call per
        window, for performance); ``fallback(t, None, None)``: the engine's handler, called for the window past
        ``max_windows`` (which it refuses). The windows reach :attr:`blocks` at :meth:`pull`. False where the
        network cannot (the Python core): the engine schedules its own events."""
        every = self.net.sample_every
        if every is None:
            return False
        every(float(first), self.interval, self.t0, max_windows - len(self.t_end), self.bw, self.cap, self.prev,
              self.prev_int, fallback, self.keep)
        self._pull = self.net.sample_pull
        return True

    def pull(self) -> None:
        """The windows the native core sampled since the last call, added to this sampler's."""
        if self._pull is None:
            return
        k0, k = len(self.t_end), self.net.sample_count()
        if not k:
            return
        self._grow(k0 + k + 1)   # and room for the run's last window, sampled at its end
        t_end, wins = self._pull(self._rows[k0:k0 + k])
        self.t_end += t_end
        self.win += wins
        self.t0 = t_end[-1]

    def release(self) -> None:
        """After the run: the native core's windows taken over (:meth:`pull`) and its sampling state dropped (it holds
        the engine's handler: a reference cycle through the core otherwise)."""
        if self._pull is not None:
            self.pull()
            self.net.sample_stop()
            self._pull = None

    def combined(self) -> PortSamples | None:
        if not self.t_end or not self.keep:
            return None
        return PortSamples(np.array(self.t_end), self.interval, self.net.radix, self.features,
                           self._rows[:len(self.t_end)])

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

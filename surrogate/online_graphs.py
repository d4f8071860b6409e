"""Port graphs built online, during a hybrid run, for the graph surrogates (SMART, smart-nollm, DCRNN).

Data flows one way: the engine's port-sample blocks (``on_samples``) and the simulated iteration records
(``on_record``) come in; per job and iteration, node-feature graphs go out to the graph models' contexts and online
series (:class:`surrogate.online.GraphFeed`). Nothing here talks back to the engine or the surrogate.

A simulated iteration's graph is built exactly as the offline dataset builder (``surrogate.dataset.build_dataset``)
builds it from the same run's ``ports.parquet``: the same code (:func:`surrogate.graphs.window_ranks`,
:func:`surrogate.graphs.node_features`), the same features (min/max/mean/q25/q75/last of every port feature over the
samples overlapping the iteration window and ending by its end; inactive ports use the nearest active port's window),
the same port graph (``Dragonfly(shape)``, CODES' arrangement, as offline) and the same normalisation
``x = (slog1p(raw) - mean) / std`` -- with mean/std fitted once, at the surrogate's fit, on the graphs of the warm-up
iterations (where the offline builder uses its training split), and never refitted on later data.

Timing. An iteration's graph holds only samples that end by the iteration's end (causal, see
:mod:`surrogate.graphs`). Until a sample ending at or after the iteration's last rank ended has arrived, the graph is
*provisional*: computed from the samples so far, recomputed on every request. Then it is frozen (cached): samples
arrive in time order, so no later one can change it, and it equals the offline graph. The normaliser is
fitted on the frozen warm-up graphs (on the provisional ones only if none is frozen yet) that observed a window; a
graph model's fit waits (is deferred) while no simulated iteration has.

Predicted iterations simulate nothing, so they have no graph of their own: they reuse the graph of the latest
simulated iteration before them (in contexts and in the ``x`` of the series given to ``fit``/``tune``).
"""

from __future__ import annotations

import numpy as np

from .graphs import fit_normaliser, node_features, normalise, window_ranks


class OnlineGraphError(RuntimeError):
    """The graphs a graph surrogate needs cannot be built (no port samples streamed, iteration not simulated)."""


class _Job:
    __slots__ = ("name", "rank_port", "mask", "wrank", "start", "end", "count", "frozen", "mu", "sd",
                 "norm_iterations")

    def __init__(self, name: str, rank_port: np.ndarray, n_ports: int, wrank: np.ndarray, n_iterations: int):
        R = len(rank_port)
        self.name = name
        self.rank_port = rank_port
        self.mask = np.zeros(n_ports, bool)
        self.mask[rank_port] = True
        self.wrank = wrank
        self.start = np.full((R, n_iterations), np.nan)
        self.end = np.full((R, n_iterations), np.nan)
        self.count = np.zeros(n_iterations, np.int64)  # simulated records per iteration
        self.frozen: dict[int, np.ndarray] = {}         # iteration -> raw (P, F) float32, final
        self.mu = self.sd = None
        self.norm_iterations: list[int] = []


class OnlineGraphs:
    """Per-job node-feature graphs of the simulated iterations, from streamed port samples.

    Args:
        topology: the :class:`~hybridsim_common.topology.Dragonfly` of the graph (``Dragonfly(shape)``, as offline).
        jobs: ``{job id: (name, terminal id of each rank, n_iterations)}`` for the jobs that need graphs.
    """

    def __init__(self, topology, jobs: dict[int, tuple[str, np.ndarray, int]]):
        self.topo = topology
        self.n_ports = topology.n_ports
        self.jobs: dict[int, _Job] = {}
        for jid, (name, terms, n_it) in jobs.items():
            self.add_job(jid, name, terms, n_it)
        self.interval: float | None = None
        self.features: tuple[str, ...] | None = None
        self._t = np.zeros(0)
        self._v: np.ndarray | None = None
        self.n_samples = 0

    def add_job(self, job_id: int, name: str, terminals, n_iterations: int) -> None:
        """Build graphs for one more job (a job of a stream, when it starts on ``terminals``)."""
        topology = self.topo
        rank_port = topology.terminal_port_ids[np.asarray(terminals, dtype=np.int64)].astype(np.int64)
        wrank = window_ranks(topology, rank_port)
        if (wrank < 0).any():
            raise OnlineGraphError(f"job {name!r}: router ports not connected to any port of the job")
        self.jobs[job_id] = _Job(name, rank_port, self.n_ports, wrank, int(n_iterations))

    # ------------------------------------------------------------------------------------------------ input
    def on_samples(self, block) -> None:
        """Append a :class:`~hybridsim_common.records.PortSamples` block (one or more sampling windows, in time order)."""
        v = np.asarray(block.values, dtype=np.float32)
        S, P, F = v.shape
        if self._v is None:
            self.interval, self.features = float(block.interval), tuple(block.features)
            self._v = np.zeros((max(64, S), self.n_ports, F), np.float32)
            self._t = np.zeros(self._v.shape[0])
        if P > self.n_ports:
            raise OnlineGraphError(f"port samples have {P} ports, the topology has {self.n_ports}")
        n = self.n_samples
        if n + S > self._v.shape[0]:
            cap = max(2 * self._v.shape[0], n + S)
            v2 = np.zeros((cap, self.n_ports, F), np.float32)
            v2[:n] = self._v[:n]
            t2 = np.zeros(cap)
            t2[:n] = self._t[:n]
            self._v, self._t = v2, t2
        self._v[n:n + S, :P] = v   # ports past the sampled ones stay 0, as the offline builder pads them
        self._t[n:n + S] = block.t_end
        self.n_samples = n + S

    def on_record(self, job_id: int, rank: int, iteration: int, start: float, end: float) -> None:
        """A simulated iteration record."""
        js = self.jobs.get(job_id)
        if js is None or iteration >= js.start.shape[1]:
            return
        js.start[rank, iteration] = start
        js.end[rank, iteration] = end
        js.count[iteration] += 1

    # ------------------------------------------------------------------------------------------------ graphs
    def simulated(self, job_id: int, iteration: int) -> bool:
        """Whether every rank of the job has a simulated record of ``iteration``."""
        js = self.jobs[job_id]
        return 0 <= iteration < len(js.count) and js.count[iteration] == js.start.shape[0]

    def raw(self, job_id: int, iteration: int) -> np.ndarray:
        """Un-normalised node features ``(P, F)`` of a simulated iteration (frozen or provisional, see the module
        docstring)."""
        js = self.jobs[job_id]
        g = js.frozen.get(iteration)
        if g is not None:
            return g
        if not self.simulated(job_id, iteration):
            raise OnlineGraphError(f"job {js.name!r} iteration {iteration} was not simulated by every rank: "
                                   "it has no port graph")
        if self.n_samples == 0:
            raise OnlineGraphError(f"job {js.name!r}: no port samples have arrived by iteration {iteration}; the "
                                   "backend must stream port samples (sampling.interval shorter than the warm-up)")
        S = self.n_samples
        t = self._t[:S]
        st = js.start[:, iteration:iteration + 1]
        en = js.end[:, iteration:iteration + 1]
        g = node_features(t, self.interval, self._v[:S], js.wrank, st, en)[0]
        if t[-1] >= float(en.max()):
            js.frozen[iteration] = g
        return g

    def is_final(self, job_id: int, iteration: int) -> bool:
        js = self.jobs[job_id]
        if iteration in js.frozen:
            return True
        if not self.simulated(job_id, iteration) or self.n_samples == 0:
            return False
        return self._t[self.n_samples - 1] >= float(js.end[:, iteration].max())

    def _normaliser_iterations(self, job_id: int, iterations) -> list[int]:
        """The simulated iterations among ``iterations`` whose graph observed something (:func:`~surrogate.graphs.
        observed`): the final ones, or the provisional ones if none is final."""
        if self.n_samples == 0:  # no window has ended yet (a stream job's first iterations): nothing observed
            return []
        its = [int(i) for i in iterations if self.simulated(job_id, int(i))]
        its = [i for i in its if self.raw(job_id, i).any()]
        return [i for i in its if self.is_final(job_id, i)] or its

    def can_normalise(self, job_id: int, iterations) -> bool:
        """Whether :meth:`fit_normaliser` on ``iterations`` would fit: some simulated iteration among them observed a
        sampling window (iterations that all ended before the first window ended observed nothing)."""
        return self.jobs[job_id].mu is not None or bool(self._normaliser_iterations(job_id, iterations))

    def fit_normaliser(self, job_id: int, iterations) -> int:
        """Fit the job's normaliser once, on the simulated iterations among ``iterations`` (the warm-up) that observed
        something: on those whose graph is final (all of them if none is). Later calls keep the first fit. Returns
        the number of iterations used."""
        js = self.jobs[job_id]
        if js.mu is not None:
            return len(js.norm_iterations)
        use = self._normaliser_iterations(job_id, iterations)
        if not use:
            raise OnlineGraphError(f"job {js.name!r}: no simulated iteration that observed a sampling window to fit "
                                   "the graph normaliser on")
        js.mu, js.sd = fit_normaliser(np.stack([self.raw(job_id, i) for i in use]))
        js.norm_iterations = use
        return len(use)

    def graph(self, job_id: int, iteration: int) -> np.ndarray:
        """Normalised node features ``(P, F)`` float32 of ``iteration``; a predicted iteration reuses the graph of
        the latest simulated iteration before it."""
        js = self.jobs[job_id]
        if js.mu is None:
            raise OnlineGraphError(f"job {js.name!r}: graph requested before the normaliser was fitted")
        it = int(iteration)
        while it > 0 and not self.simulated(job_id, it):
            it -= 1
        return normalise(self.raw(job_id, it), js.mu, js.sd)

    def graphs(self, job_id: int, iterations) -> np.ndarray:
        """``(len(iterations), P, F)`` float32 graphs (each computed once per call)."""
        memo: dict[int, np.ndarray] = {}
        out = []
        for i in iterations:
            i = int(i)
            if i not in memo:
                memo[i] = self.graph(job_id, i)
            out.append(memo[i])
        return np.stack(out)

    def view(self, job_id: int, T: int) -> "GraphView":
        """The job's graphs of iterations ``0..T-1`` as a lazy ``(T, P, F)`` array (for :class:`surrogate.online.OnlineSeries` ``x``)."""
        return GraphView(self, job_id, T)

    def context_graphs(self, job_id: int, t: int, lookback: int) -> np.ndarray:
        """The ``lookback`` graphs of iterations ``t-lookback+1 .. t`` (indices below 0 clamp to 0), as
        ``surrogate.dataset.JobSeries.context`` gives them: ``(lookback, P, F)``."""
        return self.graphs(job_id, np.clip(np.arange(t - lookback + 1, t + 1), 0, None))

    def rank_port(self, job_id: int) -> np.ndarray:
        return self.jobs[job_id].rank_port

    def mask(self, job_id: int) -> np.ndarray:
        return self.jobs[job_id].mask

    @property
    def n_features(self) -> int | None:
        return None if self.features is None else len(self.features) * 6


class GraphView:
    """Read-only ``(T, P, F)`` array-like of one job's graphs: ``view[idx]`` with an int or an integer array of any
    shape gives ``idx.shape + (P, F)`` float32, computed on demand (a whole run's graphs are never materialised)."""

    def __init__(self, graphs: OnlineGraphs, job_id: int, T: int):
        self.g, self.job_id, self.T = graphs, job_id, int(T)
        self.shape = (self.T, graphs.n_ports, graphs.n_features)
        self.ndim = 3
        self.dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.T

    def __getitem__(self, idx) -> np.ndarray:
        if isinstance(idx, slice):
            idx = np.arange(self.T)[idx]
        a = np.asarray(idx, dtype=np.int64)
        flat = a.ravel()
        if flat.size and (flat.min() < -self.T or flat.max() >= self.T):
            raise IndexError(f"graph index outside 0..{self.T - 1}")
        flat = np.where(flat < 0, flat + self.T, flat)
        out = self.g.graphs(self.job_id, flat) if flat.size else np.zeros((0,) + self.shape[1:], np.float32)
        return out.reshape(a.shape + self.shape[1:])

    def __array__(self, dtype=None, copy=None):
        out = self[np.arange(self.T)]
        return out if dtype is None else out.astype(dtype)

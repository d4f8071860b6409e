"""One job's timeline in a hybrid run: :class:`JobState`, what the controller records and what the feeds read
(:class:`surrogate.online.Timeline` describes the reading side).

Per job it holds the (ranks x iterations) tables of truth (simulated iteration times), predictions and the model's
own per-rank predictions, the decided modes, and the window-edge marks. Every piece of state a decision or a
prediction reads is kept up to date as records arrive, so the controller's work per decision and per prediction does
not grow with the number of iterations a job has run (a policy's :class:`~controllers.base.JobView` reads the tables
through lazy sequences, and only the entries it looks at cost anything).

Window edges. A simulated iteration that met another job predicted for part of its time (not *clean*) carries
traffic the pure run did not have. When its contiguous simulated stretch also has clean iterations, it is an *edge*:
it stays in the job's completion time but not in what the surrogate sees, which takes the clean iterations beside it.
A stretch with no clean iteration at all (per-job schedules, where every truth window meets predicted jobs) is kept
whole. A job's iterations complete in order (each rank runs them in order), so the marks are settled as each
simulated iteration completes: an edge becomes one when the first clean iteration of its stretch completes, and stays
one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hybridsim_common.backend import Mode


class Lazy(Sequence):
    """A read-only sequence of the first ``n`` items of ``get(i)``: built in O(1), each item computed when read (a
    :class:`~controllers.base.JobView`'s per-iteration fields)."""

    __slots__ = ("_get", "_n")

    def __init__(self, get, n: int):
        self._get, self._n = get, int(n)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._get(k) for k in range(*i.indices(self._n)))
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"index {i} outside 0..{self._n - 1}")
        return self._get(i)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and len(other) == self._n and all(a == b for a, b in zip(self, other))

    def __repr__(self) -> str:
        return f"Lazy({list(self)!r})"


@dataclass
class JobState:
    """The timeline of one job (R ranks, N iterations). Arrays are (R, N) or (N,); NaN/inf where not known yet."""

    job: str
    job_id: int
    workload: str
    n_ranks: int
    n_iterations: int
    truth: np.ndarray
    pred: np.ndarray
    modes: list = field(default_factory=list)
    #: per iteration: ranks that have finished it. ``done_count``, ``lo`` and ``hi`` are Python lists: every record
    #: updates them one item at a time (tens of thousands a run), which a list does several times faster than an array
    done_count: list | None = None
    errors: list = field(default_factory=list)
    #: (iteration, signed %) of each shadow prediction at job level: (job time predicted - job time true) / true
    signed: list = field(default_factory=list)
    #: the same for the clean iterations only (no predicted co-runner distorted their truth): what a policy scores
    #: the model on, the truth of an edge being off by what the co-runners' silence did, not by the model
    clean_signed: list = field(default_factory=list)
    fitted: bool = False
    #: the fit found nothing to learn from yet (feed.can_fit); retried at the end of each truth window
    fit_deferred: bool = False
    window_start: int | None = None
    fallbacks: int = 0
    edge_shift: float = 0.0          # total time (ns) the edge corrections moved the job by
    lo: list | None = None           # per iteration: earliest start over ranks
    hi: list | None = None           # per iteration: latest end over ranks
    clean: np.ndarray | None = None  # per simulated iteration: no other job was predicted while it ran
    raw: np.ndarray | None = None    # the model's own per-rank predictions (before sync makes them durations)
    drop_edges: bool = True          # window edges are left out of what the model sees (see edges())
    info: object = None              # the job's surrogate.base.JobInfo (what it is), for models that transfer
    load: np.ndarray | None = None   # per iteration: co-runner load when it was decided (NaN: not yet)
    flow: np.ndarray | None = None   # per iteration: flow-model iteration time beside its co-runners (NaN: none)
    # ---- running state, kept as records arrive (see the module docstring)
    sim: np.ndarray | None = None        # (N,) bool: decided SIMULATE
    stretch: np.ndarray | None = None    # (N,) int: id of the run of equal modes each decided iteration is in
    edge: np.ndarray | None = None       # (N,) bool: window edges (settled as iterations complete)
    n_simulated: int = 0
    n_predicted: int = 0
    n_complete: int = 0                  # leading iterations every rank has completed
    #: simulated, complete iterations the model may see (non-edge with drop_edges), ascending
    visible: list = field(default_factory=list)
    last_col: np.ndarray | None = None   # (R,) each rank's latest simulated iteration (-1: none)
    prev_col: np.ndarray | None = None   # (R,) the one before it
    _open_stretch: int = -1              # the stretch whose simulated iterations are completing now
    _open_clean: bool = False            # ... has a clean one
    _open_dirty: list = field(default_factory=list)  # ... its dirty ones while it has no clean one

    @classmethod
    def new(cls, job: str, job_id: int, workload: str, n_ranks: int, n_iterations: int) -> "JobState":
        R, N = n_ranks, n_iterations
        return cls(job, job_id, workload, R, N,
                   truth=np.full((R, N), np.nan), pred=np.full((R, N), np.nan),
                   done_count=[0] * N, lo=[np.inf] * N, hi=[-np.inf] * N, clean=np.ones(N, bool),
                   raw=np.full((R, N), np.nan), load=np.full(N, np.nan), flow=np.full(N, np.nan),
                   sim=np.zeros(N, bool), stretch=np.zeros(N, np.int64), edge=np.zeros(N, bool),
                   last_col=np.full(R, -1, np.int64), prev_col=np.full(R, -1, np.int64))

    # ------------------------------------------------------------------------------------------------ writing
    def decide(self, mode: Mode, count: int = 1) -> None:
        """The mode of the next iteration (``len(modes)``) is decided; ``count``: of the next ``count`` ones."""
        i = len(self.modes)
        if i < self.n_iterations:
            k = min(i + count, self.n_iterations)
            self.sim[i:k] = mode == Mode.SIMULATE
            self.stretch[i:k] = self.stretch[i - 1] + (mode != self.modes[-1]) if i else 0
        if mode == Mode.SIMULATE:
            self.n_simulated += count
        else:
            self.n_predicted += count
        self.modes.extend([mode] * count)

    def record(self, rank: int, iteration: int, start: float, end: float, simulated: bool) -> bool:
        """An iteration record; returns whether it completed the iteration (every rank has finished it)."""
        lo, hi, done = self.lo, self.hi, self.done_count
        if start < lo[iteration]:
            lo[iteration] = start
        if end > hi[iteration]:
            hi[iteration] = end
        if simulated:
            self.truth[rank, iteration] = end - start
            if iteration > self.last_col[rank]:
                self.prev_col[rank] = self.last_col[rank]
                self.last_col[rank] = iteration
        n = done[iteration] = done[iteration] + 1
        if n != self.n_ranks:
            return False
        while self.n_complete < self.n_iterations and done[self.n_complete] == self.n_ranks:
            self.n_complete += 1
        return True

    def record_predicted(self, records) -> None:
        """:meth:`record` of each of ``records`` (this job's, predicted, ``IterationRecord``-like: ``rank``,
        ``iteration``, ``start``, ``end``), for a burst in one call (the native core hands most of a hybrid run's
        records over in bursts: for performance)."""
        lo, hi, done, R, N = self.lo, self.hi, self.done_count, self.n_ranks, self.n_iterations
        completed = False
        for rec in records:
            it = rec.iteration
            if it >= N:
                continue
            start, end = rec.start, rec.end
            if start < lo[it]:
                lo[it] = start
            if end > hi[it]:
                hi[it] = end
            n = done[it] = done[it] + 1
            if n == R:
                completed = True
        if completed:
            while self.n_complete < N and done[self.n_complete] == R:
                self.n_complete += 1

    def record_spans(self, spans) -> None:
        """:meth:`record_predicted` of a burst summed up per iteration: ``spans`` of this job, each ``(job_id,
        iteration, records, earliest start, latest end)`` (:meth:`~hybridsim_common.backend.Director.on_records`).
        The same lows, highs and counts; an iteration completes where its count reaches the job's ranks."""
        lo, hi, done, R, N = self.lo, self.hi, self.done_count, self.n_ranks, self.n_iterations
        completed = False
        for _, it, n, start, end in spans:
            if it >= N:
                continue
            if start < lo[it]:
                lo[it] = start
            if end > hi[it]:
                hi[it] = end
            k = done[it]
            done[it] = k + n
            if k < R <= k + n:
                completed = True
        if completed:
            while self.n_complete < N and done[self.n_complete] == R:
                self.n_complete += 1

    def settle(self, it: int) -> None:
        """Simulated iteration ``it`` is complete and ``clean[it]`` is known: settle the edge marks (module
        docstring) and what the model may see."""
        s = int(self.stretch[it])
        if s != self._open_stretch:
            self._open_stretch, self._open_clean, self._open_dirty = s, False, []
        if not self.drop_edges:
            self.visible.append(it)
        elif self.clean[it]:
            if not self._open_clean:
                self._open_clean = True
                for d in self._open_dirty:   # the stretch's dirty iterations so far are the tail of ``visible``
                    self.edge[d] = True
                del self.visible[len(self.visible) - len(self._open_dirty):]
                self._open_dirty = []
            self.visible.append(it)
        elif self._open_clean:
            self.edge[it] = True
        else:
            self._open_dirty.append(it)
            self.visible.append(it)

    # ------------------------------------------------------------------------------------------------ reading
    def simulated(self, n: int) -> np.ndarray:
        """(n,) bool: which of the first ``n`` decided iterations were simulated (a read-only view)."""
        return _ro(self.sim[:min(n, len(self.modes))])

    def series(self, upto: int, lo: int = 0) -> np.ndarray:
        """Truth where known, else the model's prediction, for iterations lo..upto-1 (R, upto - lo). The prediction
        is the model's own per-rank time, not the realised one: with sync=job a rank's realised time of the first
        predicted iteration also absorbs the skew between the ranks' starts (the job's ranks end together), which is
        no iteration time and, fed back as history, would repeat in every later prediction."""
        t = self.truth[:, lo:upto]
        return np.where(np.isnan(t), self.raw[:, lo:upto], t)

    def complete(self) -> int:
        """Number of leading iterations every rank of the job has completed."""
        return self.n_complete

    def window_edges(self, upto: int) -> np.ndarray:
        """(upto,) bool, read-only: the window edges among iterations < ``upto`` (module docstring)."""
        return _ro(self.edge[:upto])

    def edges(self, upto: int) -> np.ndarray:
        """(upto,) bool, read-only: the window edges the model must not see (none with ``drop_edges`` off)."""
        return self.window_edges(upto) if self.drop_edges else _ro(np.zeros(min(upto, self.n_iterations), bool))

    def latest_visible(self, k: int, before: int, same_stretch: bool = False) -> np.ndarray:
        """The latest ``k`` (at most) simulated, complete iterations before ``before`` the model may see, ascending;
        ``same_stretch``: only those of the latest simulated stretch among them. Costs O(k) plus the completed
        iterations at or after ``before`` (none at a decision, one at a shadow prediction)."""
        v = self.visible
        end = len(v)
        while end and v[end - 1] >= before:
            end -= 1
        cols = np.asarray(v[max(0, end - k):end], dtype=np.int64)
        if same_stretch and len(cols):
            cols = cols[self.stretch[cols] == self.stretch[cols[-1]]]
        return cols

    def last_truth_col(self, before: int, ranks: np.ndarray) -> np.ndarray:
        """(len(ranks),) each rank's latest simulated iteration before ``before`` (-1: none). Records of a rank arrive
        in iteration order, so the latest two settle almost every ``before`` the controller asks about (a prediction,
        the shadow of the iteration that just completed, the edge before a prediction); a rank further ahead is
        looked up."""
        last = self.last_col[ranks]
        newer = last >= before
        if not newer.any():  # the usual case: every rank's latest is before it
            return last
        prev = self.prev_col[ranks]
        out = np.where(newer, prev, last)
        if not (out >= before).any():   # the next usual one (a shadow prediction of the iteration that just
            return out                   # completed): every rank's latest or the one before it (for performance)
        out = np.where(last < before, last, np.where(prev < before, prev, -2))
        far = np.flatnonzero(out == -2)  # ranks two or more simulated iterations ahead (a shadow prediction's)
        if len(far) and before <= 0:
            out[far] = -1
        elif len(far):  # look back, all of them at once: the last finite truth before ``before`` (-1: none)
            ok = np.isfinite(self.truth[ranks[far], :before])
            out[far] = np.where(ok.any(axis=1), before - 1 - np.argmax(ok[:, ::-1], axis=1), -1)
        return out

    def mean(self, arr: np.ndarray, i: int) -> float | None:
        """Mean over ranks of column ``i`` of ``arr`` where known, else None."""
        col = arr[:, i]
        known = np.isfinite(col)
        if known.all():   # np.nanmean's sum and division where nothing is missing (for performance: no NaN copy)
            return float(np.add.reduce(col) / len(col))
        return float(np.nanmean(col)) if known.any() else None

    def truth_means(self, n: int) -> Lazy:
        """Mean-over-ranks truth of iterations < n (None where not simulated), computed as read."""
        return Lazy(lambda i: self.mean(self.truth, i), n)

    def predicted_means(self, n: int) -> Lazy:
        """Mean-over-ranks prediction of iterations < n (None where not predicted), computed as read."""
        return Lazy(lambda i: self.mean(self.pred, i), n)


def _ro(a: np.ndarray) -> np.ndarray:
    a = a.view()
    a.flags.writeable = False
    return a


class Silences:
    """When each job was predicted, i.e. silent on the network: the (start, end) spans of its predicted iterations
    (``spans``, in time order, and the longest, ``reach``) and, while its first rank has stopped for an iteration not
    yet predicted, since when (``pending``). A simulated iteration of another job that overlaps a silence is not
    *clean* (its truth met traffic the pure run had, missing): what makes a window edge (module docstring)."""

    def __init__(self, jobs):
        self.spans: dict[int, list[tuple[float, float]]] = {jid: [] for jid in jobs}
        self.reach: dict[int, float] = {jid: 0.0 for jid in jobs}
        self.pending: dict[int, float] = {}

    def stopped(self, job_id: int, t: float) -> None:
        """Job ``job_id``'s first rank stopped at ``t`` for an iteration not predicted yet."""
        self.pending[job_id] = t

    def predicted(self, job_id: int, spans: list[tuple[float, float]]) -> None:
        """Predicted iterations of the job, each (earliest start, latest end) over its ranks: no longer pending."""
        self.pending.pop(job_id, None)
        self.spans[job_id] += spans
        self.reach[job_id] = max(self.reach[job_id], max(e - s for s, e in spans))

    def overlaps(self, job_id: int, a: float, b: float) -> bool:
        """Whether a job other than ``job_id`` was silent at some time in (a, b)."""
        for jid, spans in self.spans.items():
            if jid == job_id:
                continue
            if self.pending.get(jid, np.inf) < b:
                return True
            reach = self.reach[jid]
            for s0, e0 in reversed(spans):
                if s0 < b and e0 > a:
                    return True
                if s0 + reach <= a:
                    break
        return False


"""``iteration-logs/pe=<PE>.txt[.gz]``: per-rank iteration marks of model-net-mpi-replay -> IterationRecord.

Lines (docs/codes-formats.md §2)::

    ITERATION <iter> node <nw_id> job <job_id> rank <local_rank> time <t_ns>
    SKIPPED TO ITERATION <iter> node <nw_id> job <job_id> rank <local_rank> time <t_ns>

``ITERATION i ... time t`` marks the END of iteration ``i`` at virtual time ``t``. Lines are written at commit time, so
they are unsorted within a file and across PE files. The iteration's start is the previous mark of the same
(job, rank), or 0 for the first one. ``SKIPPED TO ITERATION i`` (CODES' application surrogate) says the rank
fast-forwarded to iteration ``i`` and resumed at ``t``; it becomes one record for iteration ``i`` spanning the
skipped stretch with ``simulated=False`` (its duration covers several predicted iterations, so consumers should not
train on it; the importer writes it with ``mode = "predict"``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from hybridsim_common.records import IterationRecord

from .common import CodesParseError, IncrementalReader, read_text, warn

_LINE = re.compile(
    r"^(SKIPPED TO )?ITERATION (\d+) node (\d+) job (\d+) rank (\d+) time ([-+0-9.eE]+|nan|inf)\s*$")


@dataclass(frozen=True, slots=True)
class IterationMark:
    iteration: int
    node: int
    job_id: int
    rank: int
    time: float
    skipped: bool


def parse_line(line: str, path, line_no: int) -> IterationMark | None:
    """One line -> :class:`IterationMark`; blank lines -> None; anything else raises with file:line."""
    s = line.strip()
    if not s:
        return None
    m = _LINE.match(s)
    if m is None:
        raise CodesParseError(path, line_no, f"not an ITERATION / SKIPPED TO ITERATION line: {s[:120]!r}")
    t = float(m.group(6))
    if not np.isfinite(t) or t < 0:
        raise CodesParseError(path, line_no, f"bad time {m.group(6)!r}")
    return IterationMark(int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), t, bool(m.group(1)))


_FAST = re.compile(r"^(SKIPPED TO )?ITERATION (\d+) node (\d+) job (\d+) rank (\d+) time ([-+0-9.eE]+)[ \t\r]*$",
                   re.MULTILINE)


@dataclass
class IterationLogCollector:
    """Accumulates marks from any number of PE files (in any order) and turns them into records.

    Marks are kept as columns (iteration, node, job, rank, time, skipped) plus the (file, line) of each, so that
    duplicate or out-of-order marks are reported with file:line."""

    job_names: Sequence[str] | None = None
    _cols: list = field(default_factory=list)    # list of (n, 6) float64 arrays
    _where: list = field(default_factory=list)   # list of (path, line numbers array)

    def add_array(self, arr: np.ndarray, path, line_nos: np.ndarray) -> None:
        if len(arr):
            self._cols.append(arr)
            self._where.append((str(path), np.asarray(line_nos, dtype=np.int64)))

    def add(self, mark: IterationMark, path, line_no: int) -> None:
        self.add_array(np.array([[mark.iteration, mark.node, mark.job_id, mark.rank, mark.time, mark.skipped]],
                                np.float64), path, [line_no])

    def feed(self, lines: Iterable[tuple[int, str]], path) -> list[IterationMark]:
        marks, nos = [], []
        for line_no, line in lines:
            m = parse_line(line, path, line_no)
            if m is not None:
                marks.append(m)
                nos.append(line_no)
        if marks:
            self.add_array(np.array([[m.iteration, m.node, m.job_id, m.rank, m.time, m.skipped] for m in marks],
                                    np.float64), path, nos)
        return marks

    def feed_text(self, text: str, path, first_line: int = 1) -> int:
        """Parse a block of complete lines at once (fast path); on any bad line fall back to line-by-line parsing,
        which raises with file:line."""
        found = _FAST.findall(text)
        lines = text.splitlines()
        nonblank = [i for i, l in enumerate(lines) if l.strip()]
        if len(found) != len(nonblank):
            self.feed(((first_line + i, l) for i, l in enumerate(lines)), path)
            return len(nonblank)
        if not found:
            return 0
        arr = np.array([(it, nd, jb, rk, tm, 1.0 if sk else 0.0) for sk, it, nd, jb, rk, tm in found], np.float64)
        if not np.isfinite(arr[:, 4]).all() or (arr[:, 4] < 0).any():
            self.feed(((first_line + i, l) for i, l in enumerate(lines)), path)
        self.add_array(arr, path, first_line + np.asarray(nonblank))
        return len(found)

    def job_name(self, job_id: int, where: str = "<iteration-logs>") -> str:
        if self.job_names is not None:
            if not 0 <= job_id < len(self.job_names):
                raise CodesParseError(where, None,
                                      f"job id {job_id} not in the workload file ({len(self.job_names)} jobs)")
            return self.job_names[job_id]
        return f"job{job_id}"

    def records(self) -> tuple[list[IterationRecord], list[bool]]:
        """Records sorted by (job_id, rank, iteration) and the parallel ``simulated`` flags."""
        if not self._cols:
            return [], []
        arr = np.concatenate(self._cols)
        file_idx = np.concatenate([np.full(len(c), i) for i, c in enumerate(self._cols)])
        line_no = np.concatenate([w[1] for w in self._where])

        def where(i):
            return self._where[file_idx[i]][0], int(line_no[i])

        it, job, rank, t, skipped = arr[:, 0], arr[:, 2], arr[:, 3], arr[:, 4], arr[:, 5] > 0
        order = np.lexsort((it, t, rank, job))  # by job, rank, time, iteration
        it, job, rank, t, skipped = it[order], job[order], rank[order], t[order], skipped[order]
        same = np.zeros(len(order), bool)
        same[1:] = (job[1:] == job[:-1]) & (rank[1:] == rank[:-1])
        bad = np.nonzero(same[1:] & (it[1:] <= it[:-1]))[0]
        if len(bad):
            i = bad[0] + 1
            p, n = where(order[i])
            p0, n0 = where(order[i - 1])
            kind = "duplicate mark" if it[i] == it[i - 1] else "iterations out of order"
            raise CodesParseError(p, n, f"{kind}: job {int(job[i])} rank {int(rank[i])} iteration {int(it[i])} at "
                                        f"t={t[i]} after iteration {int(it[i - 1])} at t={t[i - 1]} ({p0}:{n0})")
        start = np.zeros(len(order))
        start[1:] = np.where(same[1:], t[:-1], 0.0)
        jobs = np.unique(job).astype(int)
        first = {j: int(order[np.argmax(job == j)]) for j in jobs}
        names = {j: self.job_name(j, "%s:%d" % where(first[j])) for j in jobs}
        job_l, rank_l, it_l = job.astype(int).tolist(), rank.astype(int).tolist(), it.astype(int).tolist()
        start_l, end_l = start.tolist(), t.tolist()
        recs = [IterationRecord(names[j], j, r, i, s0, e) for j, r, i, s0, e in zip(job_l, rank_l, it_l, start_l, end_l)]
        return recs, (~skipped).tolist()


def iteration_log_files(run_dir: str | os.PathLike) -> list[Path]:
    d = Path(run_dir) / "iteration-logs"
    if not d.is_dir():
        return []
    files = [p for p in d.iterdir() if re.fullmatch(r"pe=\d+\.txt(\.gz)?", p.name)]
    return sorted(files, key=lambda p: int(re.search(r"\d+", p.name).group()))


def parse_iteration_logs(files_or_run_dir, job_names: Sequence[str] | None = None, *,
                         allow_truncated_last: bool = False, warnings: list | None = None
                         ) -> tuple[list[IterationRecord], list[bool]]:
    """Parse all PE files (a run directory or a list of files) into records + ``simulated`` flags.

    A last line without its newline is accepted if it parses. If it does not (CODES stopped mid-write), it raises
    with file:line -- unless ``allow_truncated_last`` (the importer sets it for runs known to be partial), in which
    case it is dropped with a warning naming file:line. A malformed line anywhere else always raises."""
    if isinstance(files_or_run_dir, (str, os.PathLike)) and Path(files_or_run_dir).is_dir():
        files = iteration_log_files(files_or_run_dir)
    else:
        files = [Path(p) for p in files_or_run_dir]
    col = IterationLogCollector(job_names)
    for f in files:
        text = read_text(f)
        body, sep, last = text.rpartition("\n")
        if not sep:
            body, last = "", text
        col.feed_text(body, f)
        if last.strip():  # last line without newline
            n = body.count("\n") + 2 if sep else 1
            try:
                col.feed([(n, last.rstrip("\r"))], f)
            except CodesParseError:
                if not allow_truncated_last:
                    raise CodesParseError(f, n, f"truncated last line (no newline): {last[:80]!r}") from None
                warn(f"{f}:{n}: dropped the truncated last line {last[:80]!r} (CODES stopped mid-write)", warnings)
    return col.records()


class IterationLogTail:
    """Tail the iteration logs of a running CODES simulation: call :meth:`poll` periodically to get the new marks;
    :meth:`finish` parses the remaining partial lines and returns all records."""

    def __init__(self, run_dir: str | os.PathLike, job_names: Sequence[str] | None = None):
        self.dir = Path(run_dir) / "iteration-logs"
        self.collector = IterationLogCollector(job_names)
        self.readers: dict[str, IncrementalReader] = {}

    def _scan(self) -> None:
        if self.dir.is_dir():
            for p in sorted(self.dir.glob("pe=*.txt")):
                self.readers.setdefault(p.name, IncrementalReader(p))

    def poll(self) -> list[IterationMark]:
        self._scan()
        new: list[IterationMark] = []
        for r in self.readers.values():
            new += self.collector.feed(r.read_new(), r.path)
        return new

    def finish(self) -> tuple[list[IterationRecord], list[bool]]:
        self.poll()
        for r in self.readers.values():
            last = r.finish()
            if last is not None:
                self.collector.feed([last], r.path)
        return self.collector.records()

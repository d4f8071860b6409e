"""``iteration-logs/pe=<PE>.txt[.gz]``: per-rank iteration marks of model-net-mpi-replay -> IterationRecord.

Lines (FORMATS.txt)::

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

from hybridsim.records import IterationRecord

from .common import CodesParseError, IncrementalReader, open_text, warn

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


@dataclass
class IterationLogCollector:
    """Accumulates marks from any number of PE files (in any order) and turns them into records."""

    job_names: Sequence[str] | None = None
    marks: list[IterationMark] = field(default_factory=list)
    _where: dict = field(default_factory=dict)

    def add(self, mark: IterationMark, path, line_no: int) -> None:
        key = (mark.job_id, mark.rank, mark.iteration, mark.skipped)
        if key in self._where:
            p, n = self._where[key]
            raise CodesParseError(path, line_no,
                                  f"duplicate mark for job {mark.job_id} rank {mark.rank} iteration {mark.iteration} "
                                  f"(first at {p}:{n})")
        self._where[key] = (str(path), line_no)
        self.marks.append(mark)

    def feed(self, lines: Iterable[tuple[int, str]], path) -> int:
        n = 0
        for line_no, line in lines:
            m = parse_line(line, path, line_no)
            if m is not None:
                self.add(m, path, line_no)
                n += 1
        return n

    def job_name(self, job_id: int) -> str:
        if self.job_names is not None:
            if not 0 <= job_id < len(self.job_names):
                raise CodesParseError(self._first_path(job_id), None,
                                      f"job id {job_id} not in the workload file ({len(self.job_names)} jobs)")
            return self.job_names[job_id]
        return f"job{job_id}"

    def _first_path(self, job_id: int) -> str:
        for (j, *_), (p, n) in self._where.items():
            if j == job_id:
                return f"{p}:{n}"
        return "<iteration-logs>"

    def records(self) -> tuple[list[IterationRecord], list[bool]]:
        """Records sorted by (job_id, rank, iteration) and the parallel ``simulated`` flags."""
        if not self.marks:
            return [], []
        arr = np.array([(m.job_id, m.rank, m.time, m.iteration) for m in self.marks], dtype=np.float64)
        order = np.lexsort((arr[:, 3], arr[:, 2], arr[:, 1], arr[:, 0]))  # by job, rank, time, iteration
        recs: list[IterationRecord] = []
        sim: list[bool] = []
        prev_key = None
        prev_t = 0.0
        prev_it = -1
        for i in order:
            m = self.marks[i]
            key = (m.job_id, m.rank)
            if key != prev_key:
                prev_key, prev_t, prev_it = key, 0.0, -1
            if m.iteration <= prev_it:
                p, n = self._where[(m.job_id, m.rank, m.iteration, m.skipped)]
                raise CodesParseError(p, n, f"job {m.job_id} rank {m.rank}: iteration {m.iteration} at t={m.time} "
                                            f"comes after iteration {prev_it} at t={prev_t} (iterations out of order)")
            recs.append(IterationRecord(self.job_name(m.job_id), m.job_id, m.rank, m.iteration, prev_t, m.time))
            sim.append(not m.skipped)
            prev_t, prev_it = m.time, m.iteration
        return recs, sim


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
        with open_text(f) as fh:
            for n, raw in enumerate(fh, 1):
                if raw.endswith("\n"):
                    col.feed([(n, raw.rstrip("\r\n"))], f)
                    continue
                try:  # last line, no newline
                    col.feed([(n, raw.rstrip("\r"))], f)
                except CodesParseError:
                    if not allow_truncated_last:
                        raise CodesParseError(f, n, f"truncated last line (no newline): {raw[:80]!r}") from None
                    warn(f"{f}:{n}: dropped the truncated last line {raw[:80]!r} (CODES stopped mid-write)",
                         warnings)
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
        before = len(self.collector.marks)
        for r in self.readers.values():
            self.collector.feed(r.read_new(), r.path)
        return self.collector.marks[before:]

    def finish(self) -> tuple[list[IterationRecord], list[bool]]:
        self.poll()
        for r in self.readers.values():
            last = r.finish()
            if last is not None:
                self.collector.feed([last], r.path)
        return self.collector.records()

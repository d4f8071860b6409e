"""Real job traces: the Standard Workload Format (SWF) reader and its mapping to a job-stream scenario.

SWF is the Parallel Workloads Archive's format (Chapin et al. 1999; version 2.2): header lines start with ``;``
(``; Key: value``, free notes), every other non-blank line is one job of 18 whitespace-separated numbers, ``-1``
where unknown -- 1 job number, 2 submit time (s), 3 wait time (s), 4 run time (s), 5 allocated processors, 6 average
CPU time, 7 used memory, 8 requested processors, 9 requested time (s), 10 requested memory, 11 status, 12 user,
13 group, 14 application, 15 queue, 16 partition, 17 preceding job, 18 think time.

:func:`read_swf` streams a trace into an array (numpy's C parser, a chunk at a time; ``.gz`` too) and refuses a
damaged or hostile one by line and field: every field is -1 or within 0..its bound (:data:`MAX_TRACE_SECONDS`,
:data:`MAX_PROCS`, :data:`MAX_ID`), whole where it counts.

:func:`scenario_from_swf` turns a slice of a trace into a scenario for a given system (the ``hybridsim
scenario-from-swf`` command): arrivals are submit times scaled to simulated time, sizes are processor counts scaled
to the system and rounded to a rank count the job's workload template can run, the number of iterations makes the
simulated run time (iterations x the template's iteration time) the trace's run time scaled -- within a tolerance, by
choosing the time scale (:func:`choose_time_scale`), or the job is named with why (:class:`MappedJobs`'
``distortion``) -- and the walltime is the trace's requested time scaled or, where the trace has none, the estimated
run time (``exact``) or ``walltime_factor`` x it. Everything is vectorised: linear in the trace.

Why one module of this size: reading a trace, checking its fields and mapping it to a stream scenario (time scale,
iterations, distortion table) are one pipeline over the same columns.

Over 600 lines: the Standard Workload Format's reader, its checks and its faithful mapping to a stream scenario
(with each distortion named) are one format's code.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from .scheduler import StreamJob
from .workloads import ITERATION_TIME_NS as _KIND_TIME_NS

FIELDS = ("job", "submit", "wait", "run", "procs", "cpu", "mem", "req_procs", "req_time", "req_mem", "status",
          "user", "group", "app", "queue", "partition", "prev_job", "think")
COL = {name: i for i, name in enumerate(FIELDS)}


class SwfError(ValueError):
    """A trace or mapping problem; ``problems`` lists every message (``file:line: what``)."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


@dataclass
class SwfTrace:
    """A parsed trace: ``jobs[i, COL[name]]`` (float64, -1 unknown), ``lines[i]`` the 1-based line of job ``i``."""

    source: str
    header: list[str]
    jobs: np.ndarray
    lines: np.ndarray
    keys: dict[str, str] = field(default_factory=dict)

    def col(self, name: str) -> np.ndarray:
        return self.jobs[:, COL[name]]

    @property
    def max_procs(self) -> int | None:
        """``MaxProcs`` (else ``MaxNodes``) of the header."""
        for key in ("MaxProcs", "MaxNodes"):
            try:
                v = int(self.keys[key])
            except (KeyError, ValueError):
                continue
            if v > 0:
                return v
        return None


#: the largest value a field may hold (``-1``: unknown; nothing below it). Times up to 10^9 s (31.7 years), processor
#: counts up to 10^8, numbers that only identify (job, user, ...) up to 2^53; a trace past these is damaged or hostile,
#: and would turn into unloadable scenarios (297-digit iteration counts, ``arrival: 1e+294s``).
MAX_TRACE_SECONDS = 1e9
MAX_PROCS = 1e8
MAX_ID = float(2 ** 53)
_MAX = np.array([MAX_ID, MAX_TRACE_SECONDS, MAX_TRACE_SECONDS, MAX_TRACE_SECONDS, MAX_PROCS, MAX_TRACE_SECONDS, 1e15,
                 MAX_PROCS, MAX_TRACE_SECONDS, 1e15, MAX_ID, MAX_ID, MAX_ID, MAX_ID, MAX_ID, MAX_ID, MAX_ID,
                 MAX_TRACE_SECONDS])
#: fields that count or identify: whole numbers
_INTEGER = np.array([name in ("job", "procs", "req_procs", "status", "user", "group", "app", "queue", "partition",
                              "prev_job") for name in FIELDS])
_CHUNK = 65536  # job lines parsed at a time: memory stays the table plus one chunk


class _Problems:
    def __init__(self, source: str, limit: int):
        self.source, self.limit, self.n, self.msgs = source, limit, 0, []

    def add(self, lineno: int, why: str) -> None:
        self.n += 1
        if len(self.msgs) < self.limit:
            self.msgs.append(f"{self.source}:{lineno}: {why}")


def _why_line(line: str) -> str | None:
    """What is wrong with one job line's tokens (None: they are 18 finite numbers)."""
    toks = line.split()
    if len(toks) != len(FIELDS):
        return f"expected {len(FIELDS)} fields, got {len(toks)}"
    for i, t in enumerate(toks):
        if not _is_number(t):
            return f"field {i + 1} ({FIELDS[i]}) is not a number: {t[:40]!r}"
    return None


def _check_values(block: np.ndarray, lines: np.ndarray, problems: _Problems) -> np.ndarray:
    """Rows of ``block`` whose every field is finite, -1 or in 0..its maximum, whole where it counts; the others are
    reported (first bad field of each line)."""
    finite = np.isfinite(block)
    safe = np.where(finite, block, 0.0)
    bad = ~finite | (safe < -1) | ((safe < 0) & (safe != -1)) | (safe > _MAX) | (_INTEGER & (safe != np.floor(safe)))
    rows = np.flatnonzero(bad.any(axis=1))
    for r in rows[:problems.limit]:
        c = int(np.flatnonzero(bad[r])[0])
        v = block[r, c]
        if not math.isfinite(v):
            why = "is not finite"
        elif _INTEGER[c] and v != math.floor(v) and -1 <= v <= _MAX[c]:
            why = "is not a whole number"
        else:
            why = f"is out of range (-1 for unknown, else 0..{_MAX[c]:.4g})"
        problems.add(int(lines[r]), f"field {c + 1} ({FIELDS[c]}) = {v:.6g} {why}")
    problems.n += max(0, len(rows) - problems.limit)
    ok = np.ones(len(block), dtype=bool)
    ok[rows] = False
    return ok


def _parse_block(texts: list[str], lines: list[int], problems: _Problems) -> tuple[np.ndarray, np.ndarray]:
    ln = np.asarray(lines, dtype=np.int64)
    try:
        block = np.loadtxt(texts, dtype=np.float64, ndmin=2, comments=None)  # numpy's C parser
        if block.shape[1] != len(FIELDS):
            raise ValueError("wrong number of fields")
    except ValueError:  # find the broken lines one by one (only in a chunk that has one)
        keep = []
        for i, t in enumerate(texts):
            why = _why_line(t)
            if why is None:
                keep.append(i)
            else:
                problems.add(lines[i], why)
        block = (np.array([[float(x) for x in texts[i].split()] for i in keep], dtype=np.float64)
                 .reshape(-1, len(FIELDS)))
        ln = ln[keep]
    ok = _check_values(block, ln, problems)
    return block[ok], ln[ok]


def _parse_lines(it, source: str, max_problems: int, capacity: int | None = None) -> SwfTrace:
    """Parse lines from ``it``; ``capacity`` (an upper bound on the job lines, e.g. the file's line count) lets the
    table be filled in place instead of joined from chunks at the end (half the peak memory)."""
    header: list[str] = []
    keys: dict[str, str] = {}
    problems = _Problems(source, max_problems)
    blocks, block_lines = [], []
    buf = np.empty((capacity, len(FIELDS))) if capacity else None  # untouched rows cost no memory
    n_rows = 0
    texts: list[str] = []
    lines: list[int] = []
    for lineno, raw in enumerate(it, 1):
        line = raw.strip()
        if not line:
            continue
        if line[0] == ";":
            if len(header) < 10000:  # provenance; a trace with more header lines than that keeps the first
                header.append(raw.rstrip())
            m = re.match(r";\s*([A-Za-z]+)\s*:\s*(.*?)\s*$", line)
            if m and m.group(1) not in keys:
                keys[m.group(1)] = m.group(2)
            continue
        texts.append(line)
        lines.append(lineno)
        if len(texts) == _CHUNK:
            n_rows = _keep(_parse_block(texts, lines, problems), buf, n_rows, blocks, block_lines)
            texts, lines = [], []
            if problems.n >= MAX_BAD_LINES:  # no trace: stop reading rather than list it to the end
                break
            if n_rows > MAX_TRACE_JOBS:
                raise SwfError(f"{source}: more than {MAX_TRACE_JOBS:,} job lines (the largest archive traces have "
                               "about a million): cut it first, or is it an SWF trace at all?")
    else:
        if texts:
            n_rows = _keep(_parse_block(texts, lines, problems), buf, n_rows, blocks, block_lines)
    if problems.n:
        more = f" (and {problems.n - len(problems.msgs)} more)" if problems.n > len(problems.msgs) else ""
        if problems.n >= MAX_BAD_LINES:
            more += f"; reading stopped after {problems.n:,} malformed lines"
        raise SwfError(f"{source}: {problems.n} malformed job line(s){more}:\n  " + "\n  ".join(problems.msgs),
                       problems.msgs)
    if buf is not None:
        jobs = buf[:n_rows]
    else:
        jobs = np.concatenate(blocks) if blocks else np.empty((0, len(FIELDS)))
    if not len(jobs):
        raise SwfError(f"{source}: no job lines (an SWF trace has one job of {len(FIELDS)} fields a line)")
    return SwfTrace(source, header, jobs, np.concatenate(block_lines), keys)


def _keep(parsed: tuple[np.ndarray, np.ndarray], buf: np.ndarray | None, n_rows: int, blocks: list,
          block_lines: list) -> int:
    b, ln = parsed
    if buf is not None and n_rows + len(b) <= len(buf):
        buf[n_rows:n_rows + len(b)] = b
    else:
        blocks.append(b)
    block_lines.append(ln)
    return n_rows + len(b)


def parse_swf(text: str, source: str = "<string>", max_problems: int = 10) -> SwfTrace:
    """Parse SWF text; every malformed job line (wrong field count, not a number, a value out of range) is reported
    by line and field (the first ``max_problems`` of them)."""
    return _parse_lines(text.splitlines(), source, max_problems)


def read_swf(path: str | os.PathLike, max_problems: int = 10) -> SwfTrace:
    """Read an SWF file (plain, or gzip-compressed when it ends in ``.gz``), streaming: memory is the job table
    (18 float64 a job) plus one chunk of lines. Only a regular file is read (a FIFO or a device is refused, not
    waited on), at most :data:`MAX_TRACE_BYTES` (decompressed: a gzip bomb stops there) in lines of at most
    :data:`MAX_LINE` characters (:mod:`hybridsim_common.files`)."""
    from hybridsim_common.files import open_regular, text_lines

    p = Path(path)
    try:
        if p.is_dir():
            raise SwfError(f"{p}: is a directory, not an SWF trace")
        capacity = None
        if p.suffix != ".gz":
            with open_regular(p) as fh:  # an upper bound on the job lines, cheap: count the line ends
                capacity = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b"")) + 1
            capacity = min(capacity, MAX_TRACE_JOBS + _CHUNK)
        lines = text_lines(p, max_bytes=MAX_TRACE_BYTES, max_line=MAX_LINE)
        return _parse_lines(lines, str(p), max_problems, capacity)
    except FileNotFoundError:
        raise SwfError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise SwfError(f"{p}: cannot read: {exc.strerror if isinstance(exc, OSError) and exc.strerror else exc}") \
            from None


#: the most bytes of SWF text read (decompressed): the largest archive traces are a few hundred MB
MAX_TRACE_BYTES = 1 << 30
#: the most job lines read: 5 M jobs are 720 MB of table
MAX_TRACE_JOBS = 5_000_000
#: malformed job lines after which reading stops (the first ``max_problems`` are named)
MAX_BAD_LINES = 10_000
#: the longest SWF line read (a job line is 18 numbers; header lines are comments)
MAX_LINE = 1 << 20


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------------------- mapping
#: workload templates: the scenario ``workload`` of a trace job, given its rank count
TEMPLATES = ("milc", "lammps", "nn", "uniform-random")
#: the scenario workload kind of each template
_KIND = {"milc": "milc", "lammps": "lammps", "nn": "nearest_neighbor", "uniform-random": "uniform_random"}
#: template choice rules: seeded draw, round robin, or by the trace's application / user number (unknown: drawn)
ASSIGN_RULES = ("random", "cycle", "application", "user")
#: rough simulated time per iteration, ns, used to turn a run time into iterations (override per template): the
#: workload kinds' :data:`hybridsim.workloads.ITERATION_TIME_NS`
ITERATION_TIME_NS = {t: _KIND_TIME_NS[k] for t, k in _KIND.items()}
#: bounded-slowdown floor in trace seconds (scaled with the time scale into the scenario's scheduler section)
SLOWDOWN_TAU_TRACE_S = 10.0


#: the longest simulated time a mapped stream may reach (arrival + walltime), ns: 10^6 s, 11.6 simulated days
MAX_SIMULATED_NS = 1e15
#: LAMMPS replicas per dimension: the PPPM grid search grows with them (10^4 never ends)
MAX_LAMMPS_REPLICAS = 64
#: how a job without a requested time gets its walltime: its estimated simulated run time, or a factor of it
WALLTIME_RULES = ("exact", "factor")


@dataclass
class SwfMapping:
    """How a trace slice becomes jobs (``hybridsim scenario-from-swf`` options; times in trace seconds).

    ``time_scale`` (simulated ns per trace second) ``None`` picks it (:func:`choose_time_scale`): the smallest that
    makes every job's iteration count fit its scaled run time within ``tolerance``, unless the stream would then last
    beyond :data:`MAX_SIMULATED_NS`."""

    from_job: int | None = None          # first SWF job number kept
    jobs: int | None = None              # how many jobs (after the other filters)
    window: tuple[float | None, float | None] = (None, None)   # submit time range [start, end), trace seconds
    time_scale: float | None = None      # simulated ns per trace second; None: chosen (see above)
    size_scale: float | None = None      # ranks per trace processor; None = terminals / the trace's MaxProcs
    templates: tuple[str, ...] = ("milc", "lammps", "nn")
    assign: str = "random"
    iteration_time: dict[str, float] = field(default_factory=dict)   # ns, overrides ITERATION_TIME_NS
    walltime_rule: str = "factor"        # where the trace has no requested time: see WALLTIME_RULES
    walltime_factor: float = 2.0
    tolerance: float = 0.05              # largest relative run-time error a job may take
    max_rank_iterations: int | None = None   # the base scenario's limits.max_rank_iterations: the output must load
    lammps_replicas: int = 2
    seed: int = 1
    queue: str = "easy"
    allocation: str = "contiguous"

    def check(self) -> None:
        from .scheduler import ALLOCATION_POLICIES, QUEUE_POLICIES

        bad = [t for t in self.templates if t not in TEMPLATES]
        if bad or not self.templates:
            raise SwfError(f"unknown template(s) {bad or '(none)'} (valid: {', '.join(TEMPLATES)})")
        if "uniform-random" in self.templates:
            # uniform_random jobs are background traffic: they run until every other job has ended, so they cannot
            # arrive later or end on their own in a stream
            raise SwfError("template uniform-random cannot be used in a job stream yet: uniform_random jobs are "
                           "background traffic that runs until the other jobs end (use milc, lammps, nn)")
        if self.assign not in ASSIGN_RULES:
            raise SwfError(f"unknown template rule {self.assign!r} (valid: {', '.join(ASSIGN_RULES)})")
        if self.queue not in QUEUE_POLICIES:
            raise SwfError(f"unknown queue policy {self.queue!r} (valid: {', '.join(QUEUE_POLICIES)})")
        if self.allocation not in ALLOCATION_POLICIES:
            raise SwfError(f"unknown allocation {self.allocation!r} (valid: {', '.join(ALLOCATION_POLICIES)})")
        if self.walltime_rule not in WALLTIME_RULES:
            raise SwfError(f"unknown walltime rule {self.walltime_rule!r} (valid: {', '.join(WALLTIME_RULES)})")
        for name, v, lo, hi in (("time scale", self.time_scale, 0, 1e12), ("size scale", self.size_scale, 0, 1e6),
                                ("walltime factor", self.walltime_factor, 1, 1e6),
                                ("tolerance", self.tolerance, 0, 1)):
            if v is not None and not (math.isfinite(v) and (lo < v if lo == 0 else lo <= v) and v <= hi):
                raise SwfError(f"{name} must be in {'(' if lo == 0 else '['}{lo:g}, {hi:g}], got {v}")
        if self.jobs is not None and not 1 <= self.jobs <= 10**8:
            raise SwfError(f"--jobs must be in 1..10^8, got {self.jobs}")
        if not 1 <= self.lammps_replicas <= MAX_LAMMPS_REPLICAS:
            raise SwfError(f"LAMMPS replicas must be in 1..{MAX_LAMMPS_REPLICAS}, got {self.lammps_replicas}")
        for k, v in self.iteration_time.items():
            if k not in TEMPLATES or not 1 <= v <= 1e12:
                raise SwfError(f"iteration time {k}={v}: template must be one of {', '.join(TEMPLATES)}, time in "
                               "1ns..1000s")
        lo, hi = self.window
        if lo is not None and hi is not None and hi <= lo:
            raise SwfError(f"empty time window [{lo}, {hi})")


def smooth_below(n: int) -> list[int]:
    """Rank counts whose prime factors are 2 and 3, up to ``n``, ascending (balanced grids for any dimension)."""
    out = []
    p2 = 1
    while p2 <= n:
        p3 = p2
        while p3 <= n:
            out.append(p3)
            p3 *= 3
        p2 *= 2
    return sorted(out)


def grid_dims(n: int, ndims: int) -> list[int]:
    """``ndims`` factors of ``n`` as equal as the prime factors allow, largest last (``grid_dims(512, 4)`` ->
    ``[4, 4, 4, 8]``)."""
    primes, m, f = [], n, 2
    while m > 1:
        while m % f == 0:
            primes.append(f)
            m //= f
        f += 1
    dims = [1] * ndims
    for p in sorted(primes, reverse=True):
        dims[dims.index(min(dims))] *= p
    return sorted(dims)


def template_workload(template: str, ranks: int, lammps_replicas: int = 2,
                      interval_ns: float = ITERATION_TIME_NS["uniform-random"]) -> dict:
    """The scenario ``workload`` mapping of ``template`` for ``ranks`` (a count :func:`fit_ranks` returned)."""
    if template == "milc":
        return {"kind": _KIND[template], "dimension_sizes": grid_dims(ranks, 4), "msg_size": 49152}
    if template == "nn":
        return {"kind": _KIND[template], "dimension_sizes": grid_dims(ranks, 3), "msg_size": 32768}
    if template == "lammps":
        r = lammps_replicas
        return {"kind": _KIND[template], "num_x_replicas": r, "num_y_replicas": r, "num_z_replicas": r}
    if template == "uniform-random":
        return {"kind": _KIND[template], "msg_size": 4096, "interval": format_duration(interval_ns)}
    raise SwfError(f"unknown template {template!r}")


def fit_ranks(template: str, wanted: float, n_terminals: int, lammps_replicas: int = 2) -> int:
    """The rank count closest to ``wanted`` that fits ``n_terminals`` and that ``template`` runs: 2^a 3^b ranks
    (balanced grids; ties go to the smaller), at least 2 for uniform-random (a rank sends to another one), and a
    LAMMPS process grid whose subdomains exceed the FFT cutoff."""
    from .workloads.lammps import decomposition_problem

    cands = smooth_below(n_terminals)
    if template == "uniform-random":
        cands = [c for c in cands if c >= 2] or cands
    cands.sort(key=lambda c: (abs(c - wanted), c))
    for c in cands:
        if template != "lammps" or decomposition_problem(c, lammps_replicas, lammps_replicas, lammps_replicas) is None:
            return c
    raise SwfError(f"no rank count up to {n_terminals} runs template {template!r}")


def format_duration(ns: float) -> str:
    """A time in ns as a scenario duration string with the largest exact unit, every digit kept to the ns/1000
    (``"25574us"``, ``"1.5ms"``, ``"134312.345s"``)."""
    ns = round(float(ns), 3)
    for unit, f in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        v = ns / f
        if ns >= f and abs(v - round(v, 3)) < 1e-9 * max(1.0, abs(v)):
            return f"{round(v, 3):.15g}{unit}"
    return f"{ns:.15g}ns"


def parse_trace_seconds(text: str) -> float:
    """``"3600"``, ``"90m"``, ``"36h"``, ``"2d"`` -> trace seconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smhd]?)\s*", text)
    if not m:
        raise SwfError(f"expected trace time like 3600, 90m, 36h or 2d, got {text!r}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]


@dataclass
class SwfSelection:
    """The trace rows a mapping keeps and why the others were dropped."""

    rows: np.ndarray                     # indices into trace.jobs, submit order
    skipped: dict[str, int]              # reason -> count (inside the slice)


def select_jobs(trace: SwfTrace, m: SwfMapping) -> SwfSelection:
    """Rows of ``trace`` in the slice (from job, window, count), without jobs of unknown run time or size."""
    submit, jobno = trace.col("submit"), trace.col("job")
    idx = np.argsort(submit, kind="stable")
    keep = np.ones(len(idx), dtype=bool)
    if m.from_job is not None:
        keep &= jobno[idx] >= m.from_job
    lo, hi = m.window
    t0 = submit.min()  # trace seconds count from the first submit
    if lo is not None:
        keep &= submit[idx] - t0 >= lo
    if hi is not None:
        keep &= submit[idx] - t0 < hi
    idx = idx[keep]
    run, procs = trace.col("run")[idx], _procs(trace)[idx]
    ok = (run > 0) & (procs > 0)
    kept = np.flatnonzero(ok)[:m.jobs]
    if len(kept) == 0:
        raise SwfError(f"{trace.source}: no job with a known run time and size in the chosen slice")
    seen = slice(0, kept[-1] + 1)  # dropped jobs are counted up to the last one kept
    skipped = {"unknown or zero run time": int((run[seen] <= 0).sum()),
               "unknown processor count": int(((procs[seen] <= 0) & (run[seen] > 0)).sum())}
    return SwfSelection(idx[kept], {k: v for k, v in skipped.items() if v})


def _procs(trace: SwfTrace) -> np.ndarray:
    """Allocated processors, else requested ones."""
    alloc, req = trace.col("procs"), trace.col("req_procs")
    return np.where(alloc > 0, alloc, req)


def assign_templates(trace: SwfTrace, rows: np.ndarray, m: SwfMapping) -> np.ndarray:
    """Index into ``m.templates`` of each kept job."""
    rng = np.random.default_rng(m.seed)
    k = len(m.templates)
    drawn = rng.integers(0, k, size=len(rows))  # drawn for every job, so a rule's fallback is seed-stable
    if m.assign == "random":
        return drawn
    if m.assign == "cycle":
        return np.arange(len(rows)) % k
    key = trace.col("app" if m.assign == "application" else "user")[rows]
    return np.where(key >= 0, np.mod(key, k).astype(np.int64), drawn)


def choose_time_scale(run_s: np.ndarray, it_ns: np.ndarray, span_s: float, tolerance: float) -> tuple[float, str]:
    """The time scale (ns per trace second) for jobs of trace run times ``run_s`` mapped to iterations of ``it_ns``:
    the smallest, rounded up to 3 significant digits, that gives every job at least ``0.5 / tolerance`` iterations
    (rounding to whole iterations then costs at most ``tolerance``); if the stream would then last longer than
    :data:`MAX_SIMULATED_NS` (``span_s`` trace seconds from the first submit to the last walltime), the largest that
    stays within it. Returns the scale and why."""
    need = float(np.max(0.5 / tolerance * it_ns / run_s))
    scale = _round_sig(need, up=True)
    cap = MAX_SIMULATED_NS / span_s if span_s > 0 else math.inf
    if scale <= cap:
        return scale, (f"chosen: the smallest that gives every job >= {0.5 / tolerance:g} iterations "
                       f"(within {100 * tolerance:g} %)")
    scale = _round_sig(cap, up=False)
    return scale, (f"chosen: {format_duration(_round_sig(need, up=True))} per trace second would fit every job, but "
                   f"the stream would last beyond {MAX_SIMULATED_NS / 1e9:g} s; capped")


def _cap_work(work, scale: float, limit: int) -> float:
    """The largest time scale below ``scale`` (3 significant digits) whose ``work(scale)`` (ranks x iterations, a
    non-decreasing function) stays within ``limit``."""
    lo, hi = scale * 1e-12, scale
    if work(lo) > limit:
        raise SwfError(f"even one iteration per job needs {work(lo)} ranks x iterations, over "
                       f"limits.max_rank_iterations = {limit} of the base scenario: fewer jobs (--jobs, --window) or "
                       "raise the limit there")
    for _ in range(60):  # bisection in log space
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if work(mid) <= limit else (lo, mid)
    capped = _round_sig(lo, up=False)
    return capped if work(capped) <= limit else lo


def time_scale_tradeoff(run_s: np.ndarray, it_ns: np.ndarray, ranks: np.ndarray, span_s: float, scale: float,
                        tolerance: float, rungs: int = 6) -> list[dict]:
    """What a larger time scale buys: from ``scale`` up by factors of 4 to the smallest scale that fits every job
    within ``tolerance`` (at most ``rungs`` rows, that one last), each with the jobs within the tolerance, the
    rank-iterations (``limits.max_rank_iterations`` bounds them) and the stream's simulated length (ns)."""
    need = _round_sig(float(np.max(0.5 / tolerance * it_ns / run_s)), up=True)
    scales = [scale]
    while len(scales) < rungs - 1 and scales[-1] * 4 < need:
        scales.append(scales[-1] * 4)
    if need > scale:
        scales.append(need)
    out = []
    for sc in scales:
        target = run_s * sc
        iters = np.maximum(1, np.rint(target / it_ns))
        within = int((np.abs(iters * it_ns - target) <= (tolerance + 1e-12) * target).sum())
        out.append({"scale_ns_per_s": sc, "within": within, "jobs": len(run_s),
                    "rank_iterations": int(np.sum(ranks * iters)), "length_ns": span_s * sc})
    return out


def _round_sig(x: float, up: bool, digits: int = 3) -> float:
    e = math.floor(math.log10(x)) - digits + 1
    f = 10.0 ** e
    return (math.ceil(x / f - 1e-9) if up else max(1, math.floor(x / f + 1e-9))) * f


@dataclass
class MappedJobs:
    """A trace slice as jobs: per-job arrays (kept-job order), the selection, the scales and the distortion.

    ``distortion`` (:data:`DISTORTION_COLUMNS`) says, per job, how far its simulated run time (iterations x the
    template's iteration time, the same estimate the dry run uses) is from its trace run time scaled, and how far its
    rank count is from its processor count scaled; ``within`` whether the run-time error is within the tolerance,
    ``why`` the reason it is not."""

    selection: SwfSelection
    time_scale: float
    time_scale_note: str
    size_scale: float
    slowdown_tau: float
    template: list[str]
    names: list[str]
    ranks: np.ndarray
    iterations: np.ndarray
    arrival: np.ndarray          # ns
    walltime: np.ndarray         # ns
    estimate: np.ndarray         # ns: iterations x iteration time
    distortion: dict[str, np.ndarray | list]
    tradeoff: list[dict] = field(default_factory=list)
    """The time-scale trade-off (:func:`time_scale_tradeoff`): scale, jobs within the tolerance, rank-iterations,
    simulated length, from the chosen scale up to the one that fits every job."""

    def __len__(self) -> int:
        return len(self.names)

    def stream(self) -> list[StreamJob]:
        """The jobs as the scheduler sees them, with their estimated run time."""
        return [StreamJob(n, int(r), float(a), float(w), float(e)) for n, r, a, w, e in
                zip(self.names, self.ranks.tolist(), self.arrival.tolist(), self.walltime.tolist(),
                    self.estimate.tolist())]


DISTORTION_COLUMNS = ("job", "line", "name", "template", "trace_run_s", "target_ns", "iteration_ns", "iterations",
                      "estimate_ns", "run_error_pct", "within", "trace_procs", "wanted_ranks", "ranks",
                      "size_error_pct", "why")


def map_jobs(trace: SwfTrace, n_terminals: int, m: SwfMapping) -> MappedJobs:
    """Map a slice of ``trace`` onto ``n_terminals`` (vectorised: linear in the trace). Errors name the trace line
    and field of a job whose mapped times would pass :data:`MAX_SIMULATED_NS`."""
    m.check()
    sel = select_jobs(trace, m)
    rows = sel.rows
    size_scale = m.size_scale
    if size_scale is None:
        ref = trace.max_procs or int(_procs(trace)[rows].max())
        size_scale = n_terminals / ref
    it_by_tpl = {**ITERATION_TIME_NS, **m.iteration_time}
    pick = assign_templates(trace, rows, m)
    it = np.array([it_by_tpl[t] for t in m.templates])[pick]
    submit, procs, run = trace.col("submit")[rows], _procs(trace)[rows], trace.col("run")[rows]
    req, jobno, lines = trace.col("req_time")[rows], trace.col("job")[rows].astype(np.int64), trace.lines[rows]
    rel = submit - submit[0]
    wall_trace = np.where(req > 0, req, run * (m.walltime_factor if m.walltime_rule == "factor" else 1.0))
    # ranks: one fit per (template, processor count)
    pairs, inverse = np.unique(np.stack([pick.astype(float), procs]), axis=1, return_inverse=True)
    ranks = np.array([fit_ranks(m.templates[int(t)], p * size_scale, n_terminals, m.lammps_replicas)
                      for t, p in pairs.T.tolist()], dtype=np.int64)[inverse.ravel()]
    work = lambda sc: int(np.sum(ranks * np.maximum(1, np.rint(run * sc / it))))  # noqa: E731 ranks x iterations
    limit = m.max_rank_iterations
    if m.time_scale is None:
        scale, note = choose_time_scale(run, it, float(np.max(rel + wall_trace * (1 + m.tolerance))), m.tolerance)
        if limit is not None and work(scale) > limit:
            scale, note = _cap_work(work, scale, limit), (
                f"chosen: {format_duration(scale)} per trace second would fit every job but needs {work(scale)} "
                f"rank-iterations, over limits.max_rank_iterations = {limit} of the base scenario; capped (raise "
                "the limit there to fit them all)")
    else:
        scale, note = m.time_scale, "given"
    if limit is not None and work(scale) > limit:
        raise SwfError(f"the mapped jobs would need {work(scale)} ranks x iterations with "
                       f"{format_duration(scale)} per trace second, over limits.max_rank_iterations = {limit} of the "
                       "base scenario (a scenario that would not load): choose a smaller --time-scale (or auto), "
                       "fewer jobs (--jobs, --window), or raise the limit in the base scenario")
    target = run * scale
    iterations = np.maximum(1, np.rint(target / it)).astype(np.int64)
    estimate = iterations * it
    walltime = np.where(req > 0, req * scale, estimate * (m.walltime_factor if m.walltime_rule == "factor" else 1.0))
    arrival = rel * scale
    for what, col, arr in (("arrival", "submit", arrival), ("walltime", "req_time", arrival + walltime),
                           ("run time", "run", arrival + estimate)):
        over = np.flatnonzero(arr > MAX_SIMULATED_NS)
        if len(over):
            i = over[0]
            c = col if col != "req_time" or req[i] > 0 else "run"
            raise SwfError(f"{trace.source}:{lines[i]}: field {COL[c] + 1} ({c}) = {trace.jobs[rows[i], COL[c]]:g}: "
                           f"the job's {what} would end at {arr[i]:.4g} ns with {format_duration(scale)} per trace "
                           f"second, beyond the {MAX_SIMULATED_NS:g} ns a mapped stream may last ({len(over)} such "
                           "job(s)); choose a smaller --time-scale or a shorter --window")
    template = [m.templates[t] for t in pick.tolist()]
    names = [f"j{n}-{t}" for n, t in zip(jobno.tolist(), template)]
    if len(set(names)) < len(names):  # a job number used twice in the trace: the line number tells them apart
        seen: set[str] = set()
        for i, nm in enumerate(names):
            if nm in seen:
                names[i] = f"j{jobno[i]}-line{lines[i]}-{template[i]}"
            seen.add(names[i])
    err = (estimate - target) / target
    within = np.abs(err) <= m.tolerance + 1e-12
    why = [""] * len(rows)
    for i in np.flatnonzero(~within).tolist():
        x = target[i] / it[i]
        if x < 0.5:
            why[i] = (f"{run[i]:g} s x {format_duration(scale)} = {format_duration(target[i])} is under half an "
                      f"iteration of {template[i]} ({format_duration(it[i])}): rounded up to 1")
        else:
            why[i] = (f"{run[i]:g} s x {format_duration(scale)} = {x:.3g} iterations of {template[i]} "
                      f"({format_duration(it[i])}): whole iterations miss by {100 * err[i]:+.1f} %")
    wanted = procs * size_scale
    distortion = {"job": jobno, "line": lines, "name": names, "template": template, "trace_run_s": run,
                  "target_ns": target, "iteration_ns": it, "iterations": iterations, "estimate_ns": estimate,
                  "run_error_pct": 100 * err, "within": within, "trace_procs": procs.astype(np.int64),
                  "wanted_ranks": wanted, "ranks": ranks, "size_error_pct": 100 * (ranks - wanted) / wanted,
                  "why": why}
    tradeoff = time_scale_tradeoff(run, it, ranks, float(np.max(rel + wall_trace)), scale, m.tolerance)
    return MappedJobs(sel, scale, note, size_scale, SLOWDOWN_TAU_TRACE_S * scale, template, names, ranks, iterations,
                      arrival, walltime, estimate, distortion, tradeoff)


def job_mappings(mj: MappedJobs, m: SwfMapping):
    """The scenario job mappings (with ``arrival``, ``walltime`` and ``swf_id``, the job's SWF number, unless the
    trace says -1, unknown), one at a time (a stream may hold 10^6)."""
    it_by_tpl = {**ITERATION_TIME_NS, **m.iteration_time}
    workloads: dict[tuple[str, int], dict] = {}
    for name, tpl, r, n_it, a, w, jobno in zip(mj.names, mj.template, mj.ranks.tolist(), mj.iterations.tolist(),
                                               mj.arrival.tolist(), mj.walltime.tolist(),
                                               np.asarray(mj.distortion["job"]).tolist()):
        wl = workloads.get((tpl, r))
        if wl is None:
            wl = workloads[(tpl, r)] = template_workload(tpl, r, m.lammps_replicas, it_by_tpl[tpl])
        yield {"name": name, "ranks": r, "iterations": n_it, "arrival": format_duration(a),
               "walltime": format_duration(w), **({"swf_id": int(jobno)} if jobno >= 0 else {}), "workload": wl}


def format_durations(ns: np.ndarray) -> list[str]:
    """:func:`format_duration` of every element (vectorised unit choice; the same strings)."""
    ns = np.round(np.asarray(ns, dtype=float), 3)
    units = np.full(len(ns), 3)          # index into (s, ms, us, ns)
    vals = ns.copy()
    for k, f in reversed(list(enumerate((1e9, 1e6, 1e3)))):  # the largest exact unit wins: try it last
        v = ns / f
        ok = (ns >= f) & (np.abs(v - np.round(v, 3)) < 1e-9 * np.maximum(1.0, np.abs(v)))
        units[ok], vals[ok] = k, np.round(v[ok], 3)
    names = ("s", "ms", "us", "ns")
    return [f"{v:.15g}{names[u]}" for v, u in zip(vals.tolist(), units.tolist())]


def job_lines(mj: MappedJobs, m: SwfMapping, flow) -> Iterator[str]:
    """The ``jobs:`` items of the scenario, one YAML flow mapping a line -- the mappings :func:`job_mappings` gives,
    written by ``flow`` (a value -> one-line YAML function), each distinct workload and name shape rendered once,
    in chunks (a stream may hold 10^6 jobs)."""
    it_by_tpl = {**ITERATION_TIME_NS, **m.iteration_time}
    rendered: dict[tuple[str, int], str] = {}
    for lo in range(0, len(mj), 65536):
        hi = min(lo + 65536, len(mj))
        arrival, walltime = format_durations(mj.arrival[lo:hi]), format_durations(mj.walltime[lo:hi])
        swf_id = [f"swf_id: {int(n)}, " if n >= 0 else "" for n in np.asarray(mj.distortion["job"][lo:hi]).tolist()]
        for k, (name, tpl, r, n_it) in enumerate(zip(mj.names[lo:hi], mj.template[lo:hi],
                                                     mj.ranks[lo:hi].tolist(), mj.iterations[lo:hi].tolist())):
            wl = rendered.get((tpl, r))
            if wl is None:
                wl = rendered[(tpl, r)] = flow(template_workload(tpl, r, m.lammps_replicas, it_by_tpl[tpl]))
            yield (f"- {{name: {flow(name)}, ranks: {r}, iterations: {n_it}, arrival: {arrival[k]}, "
                   f"walltime: {walltime[k]}, {swf_id[k]}workload: {wl}}}\n")


def check_jobs(mj: MappedJobs, m: SwfMapping) -> None:
    """Each distinct (template, rank count) of the mapping, less the stream fields, is a valid scenario job
    (workload shape, rank product); iteration counts are bounded by :data:`MAX_SIMULATED_NS` already."""
    from pydantic import ValidationError

    from .scenario import Job

    seen = set()
    for tpl, r in zip(mj.template, mj.ranks.tolist()):
        if (tpl, r) in seen:
            continue
        seen.add((tpl, r))
        j = {"name": f"probe-{tpl}-{r}", "ranks": r, "iterations": 1,
             "workload": template_workload(tpl, r, m.lammps_replicas)}
        try:
            Job.model_validate(j)
        except ValidationError as exc:  # a mapping bug, not bad input
            raise AssertionError(f"scenario-from-swf made an invalid job {j['name']}: {exc}") from None


@dataclass
class SwfScenario:
    """What :func:`scenario_from_swf` makes: the scenario sections (less ``jobs``), a generator of its job mappings,
    its provenance comment lines, and the mapped jobs (arrays, distortion, the stream for a dry run)."""

    data: dict
    jobs: object                 # iterator of job mappings
    notes: list[str]
    mapped: MappedJobs

    @property
    def slowdown_tau(self) -> float:
        return self.mapped.slowdown_tau


def scenario_from_swf(trace: SwfTrace, base: dict, n_terminals: int, m: SwfMapping) -> SwfScenario:
    """The scenario for a slice of ``trace``: ``base``'s sections, its ``jobs`` and ``placement`` replaced by the
    trace jobs and a ``scheduler`` section."""
    mj = map_jobs(trace, n_terminals, m)
    check_jobs(mj, m)
    sel = mj.selection
    used = [t for t in m.templates if t in set(mj.template)]
    first, last = int(trace.col("job")[sel.rows[0]]), int(trace.col("job")[sel.rows[-1]])
    name = base.get("name") or Path(trace.source).stem
    n = len(mj)
    out: dict = {"name": f"{name}-swf-{n}jobs",
                 "description": f"{n} jobs (SWF job numbers {first}..{last}) of {Path(trace.source).name} "
                                f"on {n_terminals} terminals",
                 "seed": m.seed}
    for k, v in base.items():
        if k not in ("name", "description", "seed", "jobs", "placement", "scheduler"):
            out[k] = v
    out["scheduler"] = {"queue": m.queue, "allocation": m.allocation,
                        "slowdown_tau": format_duration(mj.slowdown_tau)}
    rule = (f"{m.walltime_factor:g} x the estimated run time" if m.walltime_rule == "factor"
            else "the estimated run time (exact)")
    notes = [f"source: {trace.source} ({len(trace.jobs)} jobs; kept {n}, SWF jobs {first}..{last})",
             f"time: 1 trace second -> {format_duration(mj.time_scale)} ({mj.time_scale_note}); sizes: "
             f"x{mj.size_scale:.4g} processors -> ranks (2^a 3^b, valid per template); bounded-slowdown floor "
             f"{SLOWDOWN_TAU_TRACE_S:g} trace s",
             f"templates {', '.join(m.templates)} by rule '{m.assign}' (seed {m.seed}); used: {', '.join(used)}",
             "iterations = round(trace run time x time scale / iteration time), at least 1 ("
             + ", ".join(f"{t} {format_duration(v)}" for t, v in {**ITERATION_TIME_NS, **m.iteration_time}.items()
                         if t in m.templates) + ")",
             f"walltime = requested time x time scale, else {rule}"]
    if len(mj.tradeoff) > 1:
        notes.append("time-scale trade-off (per trace second: jobs within the tolerance, rank-iterations, simulated "
                     "length): " + "; ".join(f"{format_duration(r['scale_ns_per_s'])}: {r['within']} of {r['jobs']}, "
                                             f"{r['rank_iterations']:.3g}, {r['length_ns'] / 1e9:.3g} s"
                                             for r in mj.tradeoff))
    if sel.skipped:
        notes.append("skipped in the slice: " + ", ".join(f"{v} ({k})" for k, v in sel.skipped.items()))
    return SwfScenario(out, job_mappings(mj, m), notes, mj)

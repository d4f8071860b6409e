"""Import a finished (or stopped) CODES run directory into hybridsim records and a hybridsim run directory.

:func:`read_codes_run` parses everything the surrogate pipeline and the comparisons need into a :class:`CodesRun`;
:func:`import_codes_run` writes it as a hybridsim run directory (``manifest.json`` kind ``codes-import``,
``iterations.parquet``, ``ports.parquet``, ``summary.json``) through :mod:`hybridsim_common.rundir` and
:mod:`hybridsim_common.records`, so training on CODES data is the same as training on embedded-engine data.

Port samples come from, in order of preference: the raw ROSS VT binary (``<stats-path>/ross-stats-analysis-lps.bin``
as CODES writes it, or ``ross-stats-raw/...bin.gz``), the decoded CSVs (``ross-stats-decoded/vt-router.csv.gz``),
then ``lp-io/dragonfly-router-traffic-sample`` (bytes only; its busy-time sibling is corrupted by a CODES bug and is
refused). Samples after the end of the simulation (ROSS keeps sampling until ``--vt-samp-end``; they are all zero)
are trimmed.

Why one module of this size: it is the one place that assembles a CODES run from its parsers and checks their outputs
against each other (lost marks, director windows, predicted iterations, partial runs).

Over 600 lines: one CODES run directory mapped to a hybridsim run, file by file (each CODES output's parser call,
its checks and its place in the run); the parsers themselves live in codes_bridge/parsers/.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hybridsim_common.records import IterationRecord, PortSamples
from hybridsim_common.topology import DragonflyShape
from hybridsim_common.units import GIB

from .conf import (CodesConf, ConfError, find_network_conf, find_workloads_conf, job_names_from_workloads,
                   parse_conf, parse_workloads_conf, read_command)
from .parsers.common import find_file, warn
from .parsers.iteration_logs import iteration_log_files, parse_iteration_logs
from .parsers.ross_vt import VtSamples, read_vt_bin, read_vt_csv, router_port_samples
from .parsers.stdout import model_output_file, parse_model_output, parse_ross_csv, parse_time_txt

KIND = "codes-import"


class CodesImportError(ValueError):
    """The directory is not a usable CODES run (missing config, unreadable outputs)."""


@dataclass
class CodesRun:
    """Everything read from one CODES run directory.

    Attributes:
        records: IterationRecords sorted by (job_id, rank, iteration); ``simulated[i]`` is False for records made
            from ``SKIPPED TO ITERATION`` lines (CODES' application surrogate fast-forwarded).
        ports: per-port samples (None if the run has none).
        job_names: hybridsim job names, index = CODES app id.
        job_end: job name -> completion time (ns) from stdout "Per App Max Elapsed Times".
        ross: ROSS statistics (events_processed, events_committed, events_rolled_back, rollbacks, event_rate,
            running_time_s, gvt_computations, ...).
        partial: True if CODES did not finish (no ROSS end statistics) -- what it wrote is imported anyway.
        warnings: everything refused, skipped or suspicious, in words.
        shape: Dragonfly shape from the .conf; ``bandwidth`` (local, global, terminal) GiB/s.
        vt: the terminal / nw-lp (rank) VT samples when present (column dicts, see parsers.ross_vt).
    """

    run_dir: Path
    records: list[IterationRecord]
    simulated: list[bool]
    ports: PortSamples | None
    job_names: list[str]
    job_end: dict[str, float]
    ross: dict
    partial: bool
    warnings: list[str]
    shape: DragonflyShape
    bandwidth: tuple[float, float, float] = (5.25, 4.7, 5.25)
    conf: CodesConf | None = None
    job_ranks: list[int] = field(default_factory=list)
    rank_end: dict = field(default_factory=dict)
    wall_s: float | None = None
    vt: VtSamples | None = None
    port_source: str | None = None
    errors: list[str] = field(default_factory=list)
    link_totals: dict | None = None
    end_limit: float | None = None  # --end of the CODES command (virtual ns), if given


    @property
    def end_time(self) -> float:
        """Virtual end of the run (ns): the last job completion; for runs whose jobs CODES does not time (only
        synthetic traffic) the ``--end`` of the command, else the last port-sample window."""
        ends = [t for t in self.job_end.values() if t and np.isfinite(t)]
        if self.records:
            ends.append(max(r.end for r in self.records))
        if ends:
            return float(max(ends))
        if self.end_limit:
            return float(self.end_limit)
        if self.ports is not None and len(self.ports.t_end):
            return float(self.ports.t_end[-1])
        return 0.0

    @property
    def events(self) -> int:
        return int(self.ross.get("events_committed", 0) or 0)

    def _vt_kind(self, kind: str) -> dict | None:
        if self.vt is not None and getattr(self.vt, kind) is not None:
            return getattr(self.vt, kind)
        dec = self.run_dir / "ross-stats-decoded"
        if (self.vt is None or Path(self.vt.source).is_dir()) and dec.is_dir():
            more = read_vt_csv(dec, self.warnings, kinds=(kind,))
            if self.vt is None:
                self.vt = more
            setattr(self.vt, kind, getattr(more, kind))
        return None if self.vt is None else getattr(self.vt, kind)

    def terminal_samples(self) -> dict | None:
        """Per-terminal VT samples (columns named as CODES' vt-terminal.csv, sorted by (ts, lpid)); read on first
        use when they come from the decoded CSVs."""
        return self._vt_kind("terminal")

    def rank_samples(self) -> dict | None:
        """Per-rank (nw-lp) VT samples (struct field names, sorted by (ts, lpid)); read on first use."""
        return self._vt_kind("nwlp")

    def to_simulation_result(self, scenario=None, wall_s: float | None = None):
        """The same data as a :class:`hybridsim_common.backend.SimulationResult` (what every backend returns) -- the one
        ``CodesRun`` -> result conversion. With ``scenario``, job names (records and ``job_end``) are the scenario's
        (CODES numbers jobs by their line in the workload file, which is scenario order); a job id the scenario does
        not have is a :class:`~codes_bridge.launcher.CodesRunError`. ``wall_s``: the measured wall time of the run
        (default: ROSS' running time)."""
        from hybridsim_common.backend import SimulationResult

        records, job_end = self.records, dict(self.job_end)
        if scenario is not None:
            from .launcher import CodesRunError

            names = [j.name for j in scenario.jobs]
            bad = [r.job_id for r in records if not 0 <= r.job_id < len(names)]
            if bad:
                raise CodesRunError(f"CODES reported job id {bad[0]}, but the scenario has {len(names)} jobs",
                                    cause="no-output")
            records = [r if r.job == names[r.job_id] else dataclasses.replace(r, job=names[r.job_id])
                       for r in records]
            rename = {c: names[i] for i, c in enumerate(self.job_names) if i < len(names)}
            job_end = {rename.get(k, k): v for k, v in job_end.items()}
        if wall_s is None:
            wall_s = float(self.ross.get("running_time_s", self.wall_s or 0.0) or 0.0)
        return SimulationResult(records=records, simulated=list(self.simulated), ports=self.ports,
                                events=self.events, end_time=self.end_time, job_end=job_end, wall_s=wall_s,
                                partial=self.partial, link_totals=self.link_totals,
                                stats={"backend": "codes", "ross": self.ross, "warnings": list(self.warnings)})


# ------------------------------------------------------------------------------------------------------------ reading
def _stats_bin(run_dir: Path, opts: dict) -> Path | None:
    """The raw VT binary: ``--stats-path`` (or ROSS' ``<path>-<pid>-<time>`` fallback), or ross-stats-raw/."""
    base = opts.get("stats-path", "stats-output")
    prefix = opts.get("stats-prefix", "ross-stats")
    name = f"{prefix}-analysis-lps.bin"
    cands = [run_dir / base / name]
    cands += sorted(run_dir.glob(f"{base}-*-*/{name}"))
    cands += [run_dir / "ross-stats-raw" / name]
    for c in cands:
        f = find_file(c)
        if f is not None and f.stat().st_size > 0:
            return f
    return None


def read_codes_run(codes_run_dir: str | os.PathLike, *, ports: bool = True, vt_source: str = "auto",
                   trim_idle: bool = True) -> CodesRun:
    """Parse a CODES run directory (see the module doc). ``vt_source``: ``auto`` | ``bin`` | ``csv`` | ``none``.

    Raises :class:`CodesImportError` / :class:`CodesParseError` / :class:`ConfError` (all ``ValueError``) with the
    file (and line) at fault."""
    d = Path(codes_run_dir)
    if not d.is_dir():
        raise CodesImportError(f"{d}: not a directory")
    warnings: list[str] = []
    try:
        conf_path = find_network_conf(d)
    except ConfError as exc:
        raise CodesImportError(str(exc)) from None
    conf = parse_conf(conf_path)
    shape = conf.shape()
    bw = conf.bandwidths()
    cmd = read_command(d)
    opts = cmd.options() if cmd is not None else {}
    vt_interval = cmd.number("vt-interval") if cmd is not None else None
    end_limit = cmd.number("end") if cmd is not None else None
    # what a finished run should contain but does not: a run CODES finished fails on any (docs/codes.md)
    lost: list[str] = []

    wl_path = find_workloads_conf(d)
    if wl_path is not None:
        wl = parse_workloads_conf(wl_path)
        job_names = job_names_from_workloads(wl)
        job_ranks = [w.ranks for w in wl]
        # one MPI rank per terminal (model-net-mpi-replay's nw-lps): more ranks than terminals is a damaged file,
        # and the checks below would size arrays by it
        terminals = shape.groups * shape.routers_per_group * shape.terminals_per_router
        total = 0
        for w in wl:
            total += w.ranks
            if total > terminals:
                raise CodesImportError(f"{wl_path}:{w.line}: the jobs up to this line need {total} ranks, but "
                                       f"{conf_path} has {terminals} terminals")
    else:
        job_names, job_ranks = [], []
        warn(f"{d}: no workload file; jobs are named job<id>", warnings)

    # stdout first: it says whether the run finished
    errors: list[str] = []
    mo_path = model_output_file(d)
    if mo_path is None:
        warn(f"{d}: no model-output.txt[.gz] (CODES stdout); job completion times and ROSS statistics unknown, "
             "the run is treated as partial", warnings)
        complete = False
        job_end_id, rank_end, ross = {}, {}, {}
    else:
        mo = parse_model_output(mo_path)
        complete = mo.complete
        job_end_id, rank_end, ross = mo.job_end, mo.rank_end, dict(mo.ross)
        errors = list(mo.errors)
        missed = {pe: b for pe, b in mo.data_missed.items() if b}
        if missed:
            warn(f"{mo_path}: ROSS dropped VT sample records (bytes missed per PE: {missed}); those port samples "
                 "are missing (NaN)", warnings)
        if not complete:
            why = f"; CODES reported: {errors[-1]}" if errors else ""
            warn(f"{mo_path}: no ROSS end-of-run statistics -- CODES did not finish; imported as PARTIAL{why}",
                 warnings)
    ross_csv = d / "ross.csv"
    if ross_csv.is_file():
        rc = parse_ross_csv(ross_csv)
        for key, col in (("events_processed", "events_processed"), ("events_rolled_back", "events_rb"),
                         ("rollbacks", "rb_total"), ("events_committed", "net_events"), ("event_rate", "event_rate"),
                         ("running_time_s", "runtime"), ("gvt_computations", "num_gvt")):
            if key not in ross and col in rc:
                ross[key] = rc[col]
        for k in ("total_pe", "total_kp", "total_lp", "end_ts"):
            if k in rc:
                ross[k] = rc[k]
    wall_s = None
    if (d / "time.txt").is_file():
        tt = parse_time_txt(d / "time.txt")
        wall_s = tt.get("wall_s")
        if tt.get("exit_status"):
            complete = False
            warn(f"{d / 'time.txt'}: CODES exited with status {tt['exit_status']}; imported as PARTIAL", warnings)

    n_jobs = max([len(job_names)] + [j + 1 for j in job_end_id])
    if wl_path is not None and n_jobs > len(job_names):
        lost.append(f"{mo_path}: CODES reports app ids up to {n_jobs - 1} but {wl_path} lists {len(job_names)} "
                    f"jobs (lines lost from the workload file?)")
    if len(job_names) < n_jobs:
        job_names = job_names + [f"job{j}" for j in range(len(job_names), n_jobs)]
    records, simulated = parse_iteration_logs(d, job_names or None, allow_truncated_last=not complete,
                                              warnings=warnings) if (d / "iteration-logs").is_dir() else ([], [])
    if not (d / "iteration-logs").is_dir():
        if wl_path is not None:
            lost.append(f"{d}: no iteration-logs/ directory (model-net-mpi-replay writes pe=<PE>.txt for every PE)")
        else:
            warn(f"{d}: no iteration-logs/ directory; no iteration records", warnings)
    else:
        lost += _missing_pe_logs(d, ross.get("total_pe"))
    if records:
        n_jobs2 = max(r.job_id for r in records) + 1
        if n_jobs2 > len(job_names):
            raise CodesImportError(f"{d}: iteration logs name job {n_jobs2 - 1} but the workload file has "
                                   f"{len(job_names)} jobs")
    if "DIRECTOR" in conf.sections:
        answers = read_director_answers(d / DIRECTOR_ANSWERS) if (d / DIRECTOR_ANSWERS).is_file() else None
        alloc = _alloc_rows(d, warnings) if answers is not None else None
        if answers is not None and alloc is not None:
            n_its = _job_iterations(d, wl) if wl_path is not None else []
            records, simulated = _expand_director_predictions(records, simulated, answers, alloc, n_its, warnings)
        else:
            simulated = _mark_director_window(records, simulated, conf, warnings)
    lost += _lost_iterations(d, records, simulated, job_names, job_ranks, gaps_allowed="DIRECTOR" in conf.sections)
    if simulated and not all(simulated) and "DIRECTOR" not in conf.sections:
        warn(f"{d}: {simulated.count(False)} records come from 'SKIPPED TO ITERATION' lines (application surrogate): "
             "each spans the skipped iterations and is marked mode=predict", warnings)
    job_end = {job_names[j]: t for j, t in sorted(job_end_id.items())}
    for j, t in sorted(job_end_id.items()):
        if t == 0.0:
            warn(f"stdout reports completion time 0 for job {j} ({job_names[j]}); CODES does not time this "
                 "(synthetic) job", warnings)

    vt = None
    port_block = None
    port_source = None
    if ports and vt_source != "none":
        vt, port_source = _read_vt(d, conf, opts, vt_source, warnings)
        if vt is None and opts.get("model-stats") in ("3", "4"):
            lost.append(f"{d}: the command asked for ROSS VT samples (--model-stats={opts['model-stats']}) but "
                        f"there is no {opts.get('stats-path', 'stats-output')}/ross-stats-analysis-lps.bin[.gz] "
                        f"nor ross-stats-decoded/vt-router.csv[.gz]")
        if vt is not None and vt.router is not None:
            port_block = router_port_samples(vt.router, shape, bw, vt_interval, source=port_source,
                                             warnings=warnings)
            if vt.truncated:
                complete = False
        elif vt is None:
            port_block, port_source = _traffic_sample_ports(d, conf, shape, bw, warnings)
    if lost and complete:
        raise CodesImportError(f"{d}: CODES finished this run, but outputs are missing or cut short, so the import "
                               f"would silently lose data: " + "; ".join(lost[:8])
                               + (f"; and {len(lost) - 8} more" if len(lost) > 8 else ""))
    for msg in lost:
        warn(f"missing from this partial run: {msg}", warnings)
    partial = not complete
    end_for_trim = max([t for t in job_end.values() if t > 0] or [0.0])
    if port_block is not None and trim_idle and complete and end_for_trim > 0:
        # ROSS keeps sampling until --vt-samp-end: drop the trailing all-zero samples whose window starts after the
        # simulation's end (non-zero samples are always kept)
        v = np.nan_to_num(port_block.values)
        active = np.nonzero(v.reshape(v.shape[0], -1).any(axis=1))[0]
        last_active = int(active[-1]) if len(active) else -1
        after = (port_block.t_end - port_block.interval) >= end_for_trim
        keep = ~after | (np.arange(len(after)) <= last_active)
        n_drop = int((~keep).sum())
        if n_drop:
            port_block = PortSamples(port_block.t_end[keep], port_block.interval, port_block.radix,
                                     port_block.features, port_block.values[keep],
                                     meta={**port_block.meta, "trimmed_idle_samples": n_drop})
    run = CodesRun(run_dir=d, records=records, simulated=simulated, ports=port_block, job_names=job_names,
                   job_end=job_end, ross=ross, partial=partial, warnings=warnings, shape=shape, bandwidth=bw,
                   conf=conf, job_ranks=job_ranks, rank_end=rank_end, wall_s=wall_s, vt=vt,
                   port_source=port_source, errors=errors,
                   end_limit=end_limit)
    run.link_totals = _link_totals(run)
    return run


#: the director's answers of a hybrid CODES run (``client,value`` per prediction, in answer order), written beside
#: CODES' outputs by :func:`codes_bridge.backend.run_codes`
DIRECTOR_ANSWERS = "director-answers.csv"


def write_director_answers(path: Path, answers: dict[int, list[float]]) -> None:
    """``client,value`` rows, each client's predictions in the order CODES received them."""
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w") as fh:
        fh.write("client,value\n")
        for client in sorted(answers):
            fh.writelines(f"{client},{v!r}\n" for v in answers[client])
    os.replace(tmp, path)


def read_director_answers(path: Path) -> dict[int, list[float]]:
    """:func:`write_director_answers`' file -> client -> predictions (ns) in answer order; errors name the line."""
    out: dict[int, list[float]] = {}
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if n == 1 or not line.strip():
                continue
            try:
                c, v = line.split(",")
                client, value = int(c), float(v)
            except ValueError:
                raise CodesImportError(f"{path}:{n}: expected 'client,value', got {line.strip()[:80]!r}") from None
            if client < 0 or not (np.isfinite(value) and value > 0):
                raise CodesImportError(f"{path}:{n}: client must be >= 0 and value a positive time, got "
                                       f"{line.strip()[:80]!r}")
            out.setdefault(client, []).append(value)
    return out


def _job_iterations(d: Path, wl) -> list[int | None]:
    """Each workload line's iteration count, from its SWM JSON (``iteration_cnt``, LAMMPS ``num_time_steps``);
    None for synthetic jobs and files that do not say."""
    out: list[int | None] = []
    for w in wl:
        n = None
        p = d / w.app
        if not w.is_synthetic and p.is_file() and p.stat().st_size <= 1 << 20:
            try:
                cfg = json.loads(p.read_text())["jobs"]["cfg"]
                n = int(cfg["iteration_cnt"] if "iteration_cnt" in cfg else cfg["num_time_steps"])
            except (OSError, ValueError, KeyError, TypeError):
                n = None
        out.append(n if n is not None and n > 0 else None)
    return out


def _expand_director_predictions(records: list[IterationRecord], simulated: list[bool],
                                 answers: dict[int, list[float]], alloc: list[list[int]],
                                 n_iterations: list[int | None], warnings: list) -> tuple[list[IterationRecord],
                                                                                          list[bool]]:
    """One record per predicted iteration, from the director's answers.

    CODES writes no mark for the iterations its director predicts: a rank's marks jump over them, or stop when the
    job ends inside the window. The director client of a rank is its network LP (the ``--alloc_file`` row of the
    job), and CODES advanced the rank by that client's answers in order. So the iterations missing between two
    marks (and after the rank's last mark) get the client's next answers as durations, each starting where the
    previous one ended (``simulated=False``), and the mark after a jump becomes the simulated iteration it is,
    starting at the end of the last predicted one; after a rank's last mark, its job's remaining iterations
    (``n_iterations``, from the workload files) take the answers left. A rank whose answers do not match its missing
    iterations is left as CODES logged it (the record after the jump spans the window, marked predicted) with a
    warning."""
    out_r: list[IterationRecord] = []
    out_s: list[bool] = []
    mismatched: list[str] = []
    i, n = 0, len(records)
    while i < n:
        j = i
        while j < n and (records[j].job_id, records[j].rank) == (records[i].job_id, records[i].rank):
            j += 1
        group, sims = records[i:j], simulated[i:j]
        name, job, rank = group[0].job, group[0].job_id, group[0].rank
        client = alloc[job][rank] if job < len(alloc) and rank < len(alloc[job]) else None
        queue = list(answers.get(client, ())) if client is not None else []
        gaps = sum(b.iteration - a.iteration - 1 for a, b in zip(group, group[1:]))
        n_it = n_iterations[job] if job < len(n_iterations) else None
        tail = max(0, n_it - 1 - group[-1].iteration) if n_it is not None else 0
        if client is None or len(queue) != gaps + tail:
            mismatched.append(f"job {job} rank {rank}: {len(queue)} answers for {gaps + tail} missing iterations")
            jump = [False] + [b.iteration - a.iteration > 1 for a, b in zip(group, group[1:])]
            out_r += group
            out_s += [s and not jp for s, jp in zip(sims, jump)]
            i = j
            continue
        k = 0
        prev = None
        for rec, sim in zip(group, sims):
            if prev is not None and rec.iteration > prev.iteration + 1:
                t = prev.end
                for it in range(prev.iteration + 1, rec.iteration):
                    out_r.append(IterationRecord(name, job, rank, it, t, t + queue[k]))
                    out_s.append(False)
                    t += queue[k]
                    k += 1
                rec = IterationRecord(name, job, rank, rec.iteration, min(t, rec.end), rec.end)
            out_r.append(rec)
            out_s.append(sim)
            prev = rec
        t = prev.end
        for it in range(prev.iteration + 1, prev.iteration + 1 + tail):  # the job ended inside the window
            out_r.append(IterationRecord(name, job, rank, it, t, t + queue[k]))
            out_s.append(False)
            t += queue[k]
            k += 1
        i = j
    if mismatched:
        warn(f"director answers do not match the missing iterations of {len(mismatched)} rank(s) (e.g. "
             f"{mismatched[0]}); their window is one record marked predicted", warnings)
    return out_r, out_s


def _mark_director_window(records: list[IterationRecord], simulated: list[bool], conf: CodesConf,
                          warnings: list) -> list[bool]:
    """CODES' ZeroMQ director writes no ITERATION line (and no SKIPPED line) for the iterations it predicts inside
    its surrogate window: a rank's marks jump over them. The record after each jump spans the predicted iterations
    (and ends where the rank resumed), so it is marked predicted, like a ``SKIPPED TO ITERATION`` record; the
    completion times are unaffected."""
    if not records:
        return simulated
    key = np.fromiter((r.job_id * (1 << 32) + r.rank for r in records), np.int64, len(records))
    it = np.fromiter((r.iteration for r in records), np.int64, len(records))
    jump = np.zeros(len(records), bool)
    jump[1:] = (key[1:] == key[:-1]) & (it[1:] - it[:-1] > 1)
    if not jump.any():
        return simulated
    out = np.asarray(simulated, bool) & ~jump
    win = f"start_iter={conf.get('start_iter', '?', 'DIRECTOR')}, end_iter={conf.get('end_iter', '?', 'DIRECTOR')}"
    warn(f"{conf.path}: DIRECTOR run ({win}): {int(jump.sum())} records span the iterations the director predicted "
         f"inside its surrogate window (CODES writes no mark for them); they are marked mode=predict", warnings)
    return out.tolist()


def _missing_pe_logs(d: Path, total_pe) -> list[str]:
    """CODES writes ``iteration-logs/pe=<PE>.txt`` for every PE (empty when the PE ran no iterations): the PE
    numbers missing from 0..total_pe-1 (ross.csv), or from 0..the highest present."""
    present = {int(p.name[3:].split(".")[0]) for p in iteration_log_files(d)}
    n = int(total_pe) if isinstance(total_pe, int) and total_pe > 0 else max(present, default=-1) + 1
    missing = sorted(set(range(n)) - present)
    if not missing:
        return []
    names = ", ".join(f"pe={k}.txt" for k in missing[:10]) + (" ..." if len(missing) > 10 else "")
    return [f"{d / 'iteration-logs'}: no {names} ({n} PEs ran)"]


def _lost_iterations(d: Path, records: list[IterationRecord], simulated: list[bool], job_names: list[str],
                     job_ranks: list[int], gaps_allowed: bool) -> list[str]:
    """Signs that iteration marks were lost, for each job that has any: ranks without marks, ranks that do not
    start at iteration 0 or stop at another last iteration than the job's other ranks, and jumps in a rank's
    iteration numbers that no ``SKIPPED TO ITERATION`` line (or a director's surrogate window) explains."""
    if not records:
        return []
    job = np.fromiter((r.job_id for r in records), np.int64, len(records))
    rank = np.fromiter((r.rank for r in records), np.int64, len(records))
    it = np.fromiter((r.iteration for r in records), np.int64, len(records))
    sim = np.asarray(simulated, bool)
    out = []
    where = d / "iteration-logs"
    for j in np.unique(job):
        sel = job == j
        rk, itj, sj = rank[sel], it[sel], sim[sel]
        name = job_names[j] if j < len(job_names) else f"job{j}"
        if j < len(job_ranks):  # the workload file says how many ranks the job has
            n_ranks = job_ranks[j]
            absent = np.setdiff1d(np.arange(n_ranks), rk)
            if len(absent):
                out.append(f"{where}: job {name} has no marks for {len(absent)} of its {n_ranks} ranks (e.g. rank "
                           f"{int(absent[0])})")
            if rk.max() >= n_ranks:
                out.append(f"{where}: job {name} has marks of rank {int(rk.max())}, but {n_ranks} ranks")
        first = np.ones(len(rk), bool)
        first[1:] = rk[1:] != rk[:-1]
        last = np.ones(len(rk), bool)
        last[:-1] = rk[1:] != rk[:-1]
        if (itj[first] != 0).any():
            r0 = int(rk[first][np.argmax(itj[first] != 0)])
            out.append(f"{where}: job {name} rank {r0} starts at iteration {int(itj[first][rk[first] == r0][0])}, "
                       f"not 0")
        ends = itj[last]
        if len(np.unique(ends)) > 1:
            lo = int(np.argmin(ends))
            out.append(f"{where}: job {name} rank {int(rk[last][lo])} stops at iteration {int(ends[lo])}, other "
                       f"ranks at {int(ends.max())}")
        jump = ~first & (np.diff(itj, prepend=0) > 1) & sj
        if jump.any() and not gaps_allowed:
            i = int(np.argmax(jump))
            out.append(f"{where}: job {name} rank {int(rk[i])} jumps from iteration {int(itj[i - 1])} to "
                       f"{int(itj[i])} with no SKIPPED TO ITERATION line")
    return out


def _link_totals(run: CodesRun) -> dict | None:
    """Per-port end-of-run totals in the embedded engine's ``link_totals`` format (arrays by global port id).

    Global and terminal ports: the G and CN lines of ``dragonfly-link-stats`` (correct end-of-run totals); local
    ports: the sum of the port samples (their link-stats lines are mis-indexed by a CODES bug). Without samples the
    local ports are NaN."""
    from .parsers.lpio import parse_link_stats
    from .parsers.ross_vt import port_classes

    ls_path = find_file(run.run_dir / "lp-io" / "dragonfly-link-stats")
    if ls_path is None and run.ports is None:
        return None
    shape = run.shape
    n_routers = shape.groups * shape.routers_per_group
    radix = shape.radix
    cls = np.tile(port_classes(shape), n_routers)
    out = {"radix": radix, "port_class": cls, "sources": {}}
    for key in ("bytes", "busy_ns", "stalled"):
        out[key] = np.full(n_routers * radix, np.nan)
    if run.ports is not None:
        for key in ("bytes", "busy_ns", "stalled"):
            if key in run.ports.features:
                out[key] = np.nansum(run.ports.feature(key).astype(np.float64), axis=0)
                out["sources"][key] = run.port_source
    if ls_path is not None:
        try:
            topo = run.conf.topology(run.run_dir)
            tot = parse_link_stats(ls_path, warnings=run.warnings).router_port_totals(topo)
        except (ValueError, OSError) as exc:
            warn(f"{ls_path}: not used for link totals ({exc})", run.warnings)
        else:
            ok = ~np.isnan(tot["traffic"])
            for key, src in (("bytes", "traffic"), ("busy_ns", "busy"), ("stalled", "stalled")):
                out[key][ok] = tot[src][ok]
            out["sources"]["global_terminal_ports"] = str(ls_path)
    end = run.end_time
    bw = np.array(run.bandwidth, np.float64)[cls] * GIB / 1e9
    out["util_pct"] = out["bytes"] / (bw * end) * 100.0 if end > 0 else np.full(len(cls), np.nan)
    out["end_time_ns"] = end
    return out


def _read_vt(d: Path, conf: CodesConf, opts: dict, vt_source: str, warnings: list):
    if vt_source in ("auto", "bin"):
        b = _stats_bin(d, opts)
        if b is not None:
            kinds = {lp: name for name, lps in conf.lp_layout().items() for lp in lps}
            return read_vt_bin(b, kinds, conf.shape().radix, rails=conf.get_int("num_rails", 1),
                               qos=conf.get_int("num_qos_levels", 1), warnings=warnings), str(b)
        if vt_source == "bin":
            raise CodesImportError(f"{d}: no ross-stats-analysis-lps.bin found")
    if vt_source in ("auto", "csv"):
        dec = d / "ross-stats-decoded"
        if find_file(dec / "vt-router.csv") is not None:
            return read_vt_csv(dec, warnings, kinds=("router",)), str(find_file(dec / "vt-router.csv"))
        if vt_source == "csv":
            raise CodesImportError(f"{d}: no ross-stats-decoded/vt-router.csv[.gz]")
    return None, None


def _traffic_sample_ports(d: Path, conf: CodesConf, shape, bw, warnings):
    from .parsers.lpio import parse_router_traffic_sample, refuse_busytime_sample

    f = find_file(d / "lp-io" / "dragonfly-router-traffic-sample")
    if f is None:
        return None, None
    if find_file(d / "lp-io" / "dragonfly-router-busytime-sample") is not None:
        refuse_busytime_sample(find_file(d / "lp-io" / "dragonfly-router-busytime-sample"), warnings)
    block = parse_router_traffic_sample(f, shape, bw, interval=conf.get_float("counting_interval", 0) * 1e3 or None)
    warn(f"{f}: no ROSS VT samples; port samples carry bytes/util_pct only (busy time, stalls and VC occupancy "
         "are not available from lp-io)", warnings)
    return block, str(f)


# ------------------------------------------------------------------------------------------------------------ writing
def codes_summary(run: CodesRun, import_s: float | None = None) -> dict:
    jobs = {}
    by_job: dict[int, list[int]] = {}
    for i, r in enumerate(run.records):
        by_job.setdefault(r.job_id, []).append(i)
    for j, name in enumerate(run.job_names):
        idx = by_job.get(j, [])
        sim_idx = [i for i in idx if run.simulated[i]]
        dur = np.array([run.records[i].duration for i in sim_idx]) if sim_idx else np.array([])
        jobs[name] = {
            "job_id": j,
            "ranks": run.job_ranks[j] if j < len(run.job_ranks) else None,
            "iterations_recorded": len(idx),
            "iterations_skipped": len(idx) - len(sim_idx),
            "completion_time_ns": run.job_end.get(name),
            "last_iteration_end_ns": float(max(run.records[i].end for i in idx)) if idx else None,
            "mean_iteration_ns": float(dur.mean()) if len(dur) else None,
            "std_iteration_ns": float(dur.std()) if len(dur) else None,
        }
    return {
        "mode": "simulate",
        "backend": "codes",
        "source": str(run.run_dir),
        "partial": run.partial,
        "end_time_ns": run.end_time,
        "events": run.events,
        "events_detail": {k: run.ross.get(k) for k in ("events_processed", "events_committed", "events_rolled_back",
                                                       "rollbacks", "event_rate", "gvt_computations")},
        "wall_s": run.wall_s,
        "wall_split_s": {"codes_total": run.wall_s, "codes_event_loop": run.ross.get("running_time_s")},
        "jobs": jobs,
        "ports": None if run.ports is None else {
            "source": run.port_source, "samples": int(run.ports.values.shape[0]), "ports": run.ports.n_ports,
            "interval_ns": run.ports.interval, "features": list(run.ports.features),
            "missing_rows": run.ports.meta.get("missing_rows", 0),
            "trimmed_idle_samples": run.ports.meta.get("trimmed_idle_samples", 0)},
        "network": None if run.link_totals is None else {
            "bytes_out_total": float(np.nansum(run.link_totals["bytes"])),
            "max_port_util_pct": float(np.nanmax(run.link_totals["util_pct"])) if np.isfinite(
                run.link_totals["util_pct"]).any() else None,
            "sources": run.link_totals["sources"]},
        "backend_stats": {"ross": run.ross, "codes_errors": run.errors},
        "warnings": run.warnings,
        "import_s": import_s,
    }


def import_codes_run(codes_run_dir: str | os.PathLike, outdir: str | os.PathLike, force: bool = False,
                     argv: list[str] | None = None, **read_kw) -> CodesRun:
    """Read ``codes_run_dir`` and write the hybridsim run directory ``outdir``. Returns the :class:`CodesRun`.

    Errors in the input are raised before ``outdir`` is created; a failure or interrupt (Ctrl-C, SIGTERM) while
    writing marks the manifest ``failed`` with the reason, like a run (:mod:`hybridsim_common.rundir`)."""
    from hybridsim_common.interrupts import failure_reason
    from hybridsim_common.records import write_iterations, write_ports
    from hybridsim_common.rundir import ITERATIONS, PORTS, SUMMARY, RunDir, write_description, write_json_atomic

    t0 = time.perf_counter()
    run = read_codes_run(codes_run_dir, **read_kw)
    scenario, as_dict = None, None
    try:
        from hybridsim.scenario import scenario_to_dict

        from .scenario_from_codes import scenario_from_codes

        scenario = scenario_from_codes(codes_run_dir)
        as_dict = scenario_to_dict(scenario)
    except Exception as exc:  # the import is still useful without an equivalent scenario
        scenario = None
        warn(f"{codes_run_dir}: no equivalent hybridsim scenario ({type(exc).__name__}: {exc})", run.warnings)
    description = describe_codes_run(run, scenario)
    rd = RunDir.create(outdir, kind=KIND, scenario=as_dict, force=force, argv=argv,
                       extra={"backend": "codes", "codes_run_dir": str(Path(codes_run_dir).resolve()),
                              "partial": run.partial})
    try:
        write_iterations(run.records, rd.file(ITERATIONS),
                         extra={"mode": ["simulate" if s else "predict" for s in run.simulated]})
        if run.ports is not None:
            write_ports(run.ports, rd.file(PORTS))
        write_description(rd.path, description)
        write_json_atomic(rd.file(SUMMARY), codes_summary(run, time.perf_counter() - t0))
        if run.partial:
            rd.complete(partial=True, reason="CODES did not finish (no ROSS end statistics); imported what it wrote",
                        warnings=run.warnings)
        else:
            rd.complete(warnings=run.warnings)
    except BaseException as exc:  # Ctrl-C and SIGTERM too: the manifest must not stay 'running'
        rd.fail(failure_reason(exc))
        raise
    return run


def describe_codes_run(run: CodesRun, scenario=None):
    """The :class:`hybridsim_common.rundir.RunDescription` of an import: from the equivalent ``scenario`` when there is one
    (terminals from its placement, workload parameters and volumes from its jobs), else from the CODES inputs alone
    (the .conf shape, the ``--alloc_file`` rows, workload kinds guessed from the job names; no volumes)."""
    from hybridsim_common.rundir import JobDescription, RunDescription
    from hybridsim.description import describe_scenario

    ports = run.ports
    if scenario is not None:
        try:
            return describe_scenario(scenario, ports=ports)
        except Exception as exc:  # PlacementError, a workload the engine cannot build: the CODES inputs still say
            warn(f"{run.run_dir}: the equivalent scenario does not describe the run ({type(exc).__name__}: {exc}); "
                 "described from the CODES inputs alone", run.warnings)
    rows = _alloc_rows(run.run_dir, run.warnings)
    jobs = []
    for j, name in enumerate(run.job_names):
        terms = rows[j] if rows is not None and j < len(rows) else None
        ranks = run.job_ranks[j] if j < len(run.job_ranks) else (len(terms) if terms is not None else 0)
        jobs.append(JobDescription(name=name, workload=_guess_workload(name), params={}, ranks=ranks,
                                   iterations=None, terminals=terms, volumes=None))
    return RunDescription(run.shape, jobs, None if ports is None else float(ports.interval),
                          None if ports is None else [str(x) for x in ports.features])


def _alloc_rows(run_dir: Path, warnings: list) -> list[list[int]] | None:
    """The rows of the run's ``--alloc_file`` (terminal ids of job j's ranks); None without one (a warning when it
    cannot be read)."""
    from hybridsim.placement import PlacementError, read_alloc_file

    from .conf import command_options

    alloc = command_options(run_dir).get("alloc_file")
    if not alloc or not (run_dir / alloc).is_file():
        return None
    try:
        return read_alloc_file(run_dir / alloc)
    except PlacementError as exc:
        warn(f"{exc}; the jobs' terminals are unknown", warnings)
        return None


def _guess_workload(name: str) -> str:
    """The workload kind a CODES job name suggests (``milc-36`` -> ``milc``), else the name itself."""
    low = name.lower()
    for key, kind in (("milc", "milc"), ("lammps", "lammps"), ("nearest", "nearest_neighbor"), ("nn", "nearest_neighbor"),
                      ("synthetic", "uniform_random"), ("allreduce", "allreduce")):
        if key in low:
            return kind
    return name

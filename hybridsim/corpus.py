"""``hybridsim corpus``: many embedded-engine runs sampled from a declared space, the training corpus of a surrogate.

A corpus spec (YAML) names a space -- topologies, routings, placements, numbers of jobs, workload kinds, ranks,
iterations, message sizes, background traffic -- and how many runs to draw from it. Run ``i`` is drawn by its own
generator, ``numpy.random.default_rng([seed, i])``, so the same spec and seed give the same scenarios, and raising
``runs`` keeps the runs already drawn. Every run is a normal run directory (:func:`hybridsim.runner.run_scenario`,
pure simulation) in ``DIR/runs/NNNN``; ``DIR/corpus.json`` lists the spec, each run's sampled parameters and its
status. A second invocation skips the runs whose manifest says ``completed`` (resume); one drawn differently from a
completed run's scenario (the spec changed) is an error unless ``--force``.

One writer per corpus: ``DIR``'s lock (``.DIR.lock`` beside it, as for run directories) turns a second ``corpus`` on
the same folder away. Ctrl-C, SIGTERM and SIGHUP cancel the runs not yet started, stop the running ones (each is
marked failed, as a single run is) and end the command within seconds; ``corpus.json`` is then rewritten from the
run directories' own manifests, so it always says what is on disk. At most :data:`MAX_RUNS` runs a spec: every one
is drawn and validated before anything runs.

Spec fields (:class:`CorpusSpec`, :class:`Space`): ranges are ``[low, high]``, inclusive, drawn uniformly (message
sizes and background intervals log-uniformly); lists are choices drawn uniformly. ``base`` holds scenario sections
every run shares (``sampling``, ``output``, ``limits``, ``backend.embedded``, ...).

``space.stream`` (:class:`StreamSpace`) draws job streams instead of jobs that all start at t = 0 beside the same
co-runners to their end (where a job's iteration times barely move): a ``scheduler`` section (queue and allocation
drawn), ``stream.jobs`` foreground jobs whose arrivals are spread uniformly over a window drawn from ``stream.window``
(the first at 0) and whose walltimes are ``stream.walltime`` times their typical run time. With more ranks than the
machine holds, jobs queue, starts and ends are staggered and a job's co-runners change while it runs. ``stream.share``
of the runs are streams, the rest co-start as without it. A spec without ``stream`` draws exactly what it drew
before the option existed (same generator calls).

Over 600 lines: the corpus's declared space, its drawing and its resumable writer (one writer per corpus, signals,
status on disk) are one contract.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Literal, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from hybridsim_common import yamlio
from hybridsim_common.rundir import RunDirError, locked, now_iso, read_manifest, signals_deferred, write_json_atomic

CORPUS_FILE = "corpus.json"
RUNS_DIR = "runs"
#: scenario sections a corpus draws itself; ``base`` may not set them
DRAWN = ("name", "seed", "jobs", "topology")
#: draws of one run before its ranks are given up on (LAMMPS refuses some rank counts)
MAX_TRIES = 200
#: runs of one spec: drawing and validating one takes ~15 ms, all of them before the first runs (about a minute
#: here); a bigger corpus is several specs (``hybridsim pretrain`` takes several corpora)
MAX_RUNS = 5_000
#: seconds a running worker gets to mark its run failed after a signal before it is killed
STOP_GRACE_S = 10.0


class CorpusError(ValueError):
    """A corpus spec that cannot be used (file:line messages in ``problems``), or a corpus folder in the way."""

    def __init__(self, message: str, problems: list[str] | None = None):
        super().__init__(message)
        self.problems = problems or [message]


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _range(v, kind=int):
    if not (isinstance(v, (list, tuple)) and len(v) == 2):
        raise ValueError(f"expected [low, high], got {v!r}")
    lo, hi = v
    for x in (lo, hi):
        if isinstance(x, bool) or not isinstance(x, (int, float) if kind is float else int):
            raise ValueError(f"expected [low, high] of {'numbers' if kind is float else 'integers'}, got {v!r}")
    if lo > hi:
        raise ValueError(f"low {lo} > high {hi}")
    return [lo, hi]


class StreamSpace(_Spec):
    """Job streams (``space.stream``): see the module docstring. Durations in ns."""

    share: float = Field(1.0, ge=0.0, le=1.0, description="fraction of runs drawn as streams (the rest co-start)")
    jobs: list = Field(default_factory=lambda: [8, 14], description="foreground jobs per stream, [low, high]")
    queue: list[Literal["fcfs", "easy", "conservative"]] = Field(default_factory=lambda: ["easy"], min_length=1)
    allocation: list[Literal["contiguous", "random", "random-router", "random-group"]] = Field(
        default_factory=lambda: ["random-router"], min_length=1,
        description="the scheduler's allocation (a stream's runs do not use space.placement)")
    window: list = Field(default_factory=lambda: [1.0e6, 4.0e6],
                         description="ns over which a stream's arrivals are spread, uniform")
    walltime: list = Field(default_factory=lambda: [1.0, 4.0],
                           description="walltime / (iterations x the kind's typical iteration time), uniform")
    slowdown_tau: float = Field(100_000.0, gt=0, description="scheduler.slowdown_tau, ns")

    @field_validator("jobs")
    @classmethod
    def _jobs(cls, v):
        v = _range(v)
        if v[0] < 1:
            raise ValueError("a stream needs at least one foreground job (low >= 1)")
        return v

    @field_validator("window")
    @classmethod
    def _window(cls, v):
        v = [float(x) for x in _range(v, float)]
        if v[0] < 0:
            raise ValueError("low must be >= 0 ns")
        return v

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, v):
        v = [float(x) for x in _range(v, float)]
        if v[0] <= 0:
            raise ValueError("low must be > 0 (a factor on the job's typical run time)")
        return v


class Space(_Spec):
    """What a run is drawn from."""

    topology: list[dict[str, Any]] = Field(min_length=1, description="scenario topology sections; one per run")
    routing: list[Literal["minimal", "nonminimal", "adaptive", "prog-adaptive"]] = Field(
        default_factory=lambda: ["prog-adaptive"], min_length=1)
    placement: list[Literal["contiguous", "random", "random-router", "random-group"]] = Field(
        default_factory=lambda: ["random"], min_length=1)
    jobs: list = Field(default_factory=lambda: [1, 2], description="foreground jobs per run, [low, high]")
    workloads: list[Literal["milc", "lammps", "nearest_neighbor", "allreduce"]] = Field(
        default_factory=lambda: ["milc", "lammps"], min_length=1)
    ranks: list = Field(default_factory=lambda: [8, 32], description="ranks per foreground job")
    iterations: list = Field(default_factory=lambda: [20, 60])
    msg_size: list = Field(default_factory=lambda: [4096, 65536],
                           description="bytes (milc, nearest_neighbor; allreduce size), log-uniform")
    background: list = Field(default_factory=lambda: [0, 1], description="uniform-random background jobs per run")
    background_ranks: list = Field(default_factory=lambda: [2, 4])
    background_msg_size: list = Field(default_factory=lambda: [1024, 8192])
    background_interval: list = Field(default_factory=lambda: [5000.0, 50000.0],
                                      description="ns between a background rank's messages, log-uniform")
    stream: Optional[StreamSpace] = Field(None, description="draw job streams (a scheduler, staggered arrivals)")

    @field_validator("jobs", "ranks", "iterations", "msg_size", "background", "background_ranks",
                     "background_msg_size")
    @classmethod
    def _int_range(cls, v):
        return _range(v)

    @field_validator("background_interval")
    @classmethod
    def _float_range(cls, v):
        return [float(x) for x in _range(v, float)]

    @model_validator(mode="after")
    def _check(self) -> "Space":
        if self.jobs[0] < 1:
            raise ValueError("jobs: a run needs at least one foreground job (low >= 1)")
        for name in ("ranks", "iterations", "msg_size", "background_ranks", "background_msg_size"):
            if getattr(self, name)[0] < 1:
                raise ValueError(f"{name}: low must be >= 1")
        if self.background[0] < 0 or self.background_interval[0] < 1.0:
            raise ValueError("background must be >= 0 and background_interval >= 1 ns")
        return self


class CorpusSpec(_Spec):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    seed: StrictInt = Field(0, ge=0)
    runs: StrictInt = Field(ge=1, le=MAX_RUNS)
    base: dict[str, Any] = Field(default_factory=dict, description="scenario sections every run shares")
    space: Space

    @field_validator("base")
    @classmethod
    def _base(cls, v):
        bad = [k for k in DRAWN if k in v]
        if bad:
            raise ValueError(f"base may not set {', '.join(bad)}: the corpus draws them")
        return v


# ------------------------------------------------------------------------------------------------------ loading
class LoadedSpec:
    """A validated spec and its :class:`~hybridsim_common.yamlio.Provenance` (which locates its fields)."""

    def __init__(self, spec: CorpusSpec, data: dict, prov: yamlio.Provenance):
        self.spec, self.data, self.prov = spec, data, prov

    def where(self, loc: tuple, key: bool = False) -> str:
        """``file:line:col`` of the field at ``loc`` (of its key with ``key``, for unknown keys)."""
        return self.prov.where_key(loc) if key else self.prov.where(loc)


def load_spec(path: str | Path) -> LoadedSpec:
    """Read and validate a corpus spec; every problem is a ``file:line:col: field: message`` line
    (:class:`CorpusError`). Every run's scenario is drawn and validated here too, before anything runs."""
    path = Path(path)
    try:
        data, root = yamlio.load(yamlio.read_text(path), str(path))
    except yamlio.YamlInputError as exc:
        raise CorpusError(str(exc), exc.problems) from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}:1:1: a corpus spec is a mapping with at least 'name', 'runs' and 'space'")
    try:
        spec = CorpusSpec.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err.get("loc", ()))
            node = yamlio.locate_key(root, loc) if err.get("type") == "extra_forbidden" else yamlio.locate(root, loc)
            problems.append(f"{yamlio.where(str(path), node) if node is not None else path}: "
                            f"{'.'.join(map(str, loc)) or '<top level>'}: {_message(err)}")
        raise CorpusError("\n".join(problems), problems) from None
    loaded = LoadedSpec(spec, data, yamlio.Provenance(path=path.resolve(), filename=str(path), root=root))
    _check_topologies(loaded)
    for i in range(spec.runs):
        scenario_of(loaded, i)
    return loaded


def _message(err: dict) -> str:
    """One pydantic error as text: its message, the offending scalar, or the unknown key."""
    loc = err.get("loc", ())
    if err.get("type") == "extra_forbidden":
        return f"unknown key {loc[-1]!r}" if loc else "unknown key"
    msg = err.get("msg", "invalid value").removeprefix("Value error, ")
    inp = err.get("input")
    if err.get("type") != "missing" and inp is not None and not isinstance(inp, (dict, list)):
        msg += f" (got {inp!r})"
    return msg


def _check_topologies(ls: LoadedSpec) -> None:
    from .scenario import Topology

    problems = []
    for k, t in enumerate(ls.spec.space.topology):
        try:
            topo = Topology.model_validate(t)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ("space", "topology", k) + tuple(err.get("loc", ()))
                problems.append(f"{ls.where(loc)}: {'.'.join(map(str, loc))}: {_message(err)}")
            continue
        if topo.n_terminals < ls.spec.space.ranks[0]:
            loc = ("space", "topology", k)
            problems.append(f"{ls.where(loc)}: {'.'.join(map(str, loc))}: {topo.n_terminals} terminals cannot hold "
                            f"one job of space.ranks low = {ls.spec.space.ranks[0]} ranks")
    if problems:
        raise CorpusError("\n".join(problems), problems)


# ------------------------------------------------------------------------------------------------------ drawing
def _log_uniform_int(rng, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)) - 1e-12)))))


def _prime_factors(n: int) -> list[int]:
    primes, m, p = [], n, 2
    while p * p <= m:
        while m % p == 0:
            primes.append(p)
            m //= p
        p += 1
    if m > 1:
        primes.append(m)
    return primes


def _factor(n: int, dims: int) -> list[int]:
    """``n`` as ``dims`` near-equal factors, largest first (MILC's 4-D and nearest-neighbour 3-D grids)."""
    out = [1] * dims
    for q in sorted(_prime_factors(n), reverse=True):
        out[out.index(min(out))] *= q
    return sorted(out, reverse=True)


def _workload(kind: str, ranks: int, msg: int) -> dict | None:
    if kind == "milc":
        return {"kind": "milc", "dimension_sizes": _factor(ranks, 4), "msg_size": msg}
    if kind == "nearest_neighbor":
        return {"kind": "nearest_neighbor", "dimension_sizes": _factor(ranks, 3), "msg_size": msg}
    if kind == "allreduce":
        return {"kind": "allreduce", "size": msg}
    from .workloads.lammps import decomposition_problem

    rep = 2 if ranks > 16 else 1  # CODES' LAMMPS needs more replicas for more ranks (decomposition_problem)
    if decomposition_problem(ranks, rep, rep, rep) is not None:
        return None
    return {"kind": "lammps", "num_x_replicas": rep, "num_y_replicas": rep, "num_z_replicas": rep}


def draw(spec: CorpusSpec, i: int) -> dict:
    """The sampled parameters of run ``i`` (JSON-able; :func:`scenario_dict` turns them into a scenario)."""
    sp = spec.space
    rng = np.random.default_rng([spec.seed, i])
    k = int(rng.integers(len(sp.topology)))
    topo = dict(sp.topology[k])
    from .scenario import Topology

    free = Topology.model_validate(topo).n_terminals
    params: dict = {"topology_index": k, "routing": str(rng.choice(sp.routing)),
                    "placement": str(rng.choice(sp.placement)), "seed": int(rng.integers(0, 2**31 - 1)), "jobs": [],
                    "background": []}
    if sp.stream is not None and rng.random() < sp.stream.share:
        return _draw_stream(sp, rng, params, free)
    n_jobs = int(rng.integers(sp.jobs[0], sp.jobs[1] + 1))
    for j in range(n_jobs):
        job = _draw_job(sp, rng, f"j{j}", free)
        if job is not None:
            params["jobs"].append(job)
            free -= job["ranks"]
    _draw_background(sp, rng, params, free)
    return params


def _draw_job(sp: Space, rng, name: str, free: int) -> dict | None:
    """One foreground job of at most ``free`` ranks (None when no rank count in range gives a valid workload)."""
    for _ in range(MAX_TRIES):
        kind = str(rng.choice(sp.workloads))
        if free < sp.ranks[0]:
            return None
        choices = np.arange(sp.ranks[0], min(sp.ranks[1], free) + 1)
        if kind in ("milc", "nearest_neighbor"):  # grids of small factors, as real decompositions are
            smooth = choices[[max(_prime_factors(int(n)) or [1]) <= 5 for n in choices]]
            choices = smooth if smooth.size else choices
        ranks = int(rng.choice(choices))
        msg = _log_uniform_int(rng, *sp.msg_size)
        w = _workload(kind, ranks, msg)
        if w is not None:
            return {"name": f"{name}-{kind}", "ranks": ranks,
                    "iterations": int(rng.integers(sp.iterations[0], sp.iterations[1] + 1)), "workload": w}
    return None


def _draw_background(sp: Space, rng, params: dict, free: int) -> int:
    """Background jobs into ``params["background"]`` within ``free`` terminals; returns the terminals left."""
    for b in range(int(rng.integers(sp.background[0], sp.background[1] + 1))):
        ranks = min(int(rng.integers(sp.background_ranks[0], sp.background_ranks[1] + 1)), free)
        if ranks < 1:
            break
        iv = float(math.exp(rng.uniform(math.log(sp.background_interval[0]), math.log(sp.background_interval[1]))))
        params["background"].append({"name": f"bg{b}", "ranks": ranks,
                                     "workload": {"kind": "uniform_random",
                                                  "msg_size": _log_uniform_int(rng, *sp.background_msg_size),
                                                  "interval": round(iv, 1)}})
        free -= ranks
    return free


def _draw_stream(sp: Space, rng, params: dict, free: int) -> dict:
    """A job stream (``space.stream``): background first (it holds its terminals for the whole run), then the
    foreground jobs, each of at most the terminals the background leaves, arriving over the drawn window."""
    from .workloads import ITERATION_TIME_NS

    st = sp.stream
    left = _draw_background(sp, rng, params, free)
    window = float(rng.uniform(st.window[0], st.window[1]))
    params["stream"] = {"queue": str(rng.choice(st.queue)), "allocation": str(rng.choice(st.allocation)),
                        "window": round(window, 1)}
    params["placement"] = params["stream"]["allocation"]  # what places the jobs (params stay self-describing)
    n_jobs = int(rng.integers(st.jobs[0], st.jobs[1] + 1))
    arrivals = np.sort(rng.uniform(0.0, window, n_jobs))
    arrivals[0] = 0.0  # the machine is not idle before the first job
    for j in range(n_jobs):
        job = _draw_job(sp, rng, f"j{j:02d}", left)
        if job is None:
            continue
        typical = job["iterations"] * ITERATION_TIME_NS[job["workload"]["kind"]]
        job["arrival"] = round(float(arrivals[j]), 1)
        job["walltime"] = round(float(rng.uniform(st.walltime[0], st.walltime[1])) * typical, 1)
        params["jobs"].append(job)
    return params


def scenario_dict(spec: CorpusSpec, i: int, params: dict) -> dict:
    """Scenario mapping of run ``i``: ``base``, then the drawn sections."""
    import copy

    d = copy.deepcopy(spec.base)
    d["name"] = f"{spec.name}-{i:04d}"
    d["seed"] = params["seed"]
    d["topology"] = {**spec.space.topology[params["topology_index"]], "routing": params["routing"]}
    d["jobs"] = copy.deepcopy(params["jobs"] + params["background"])
    st = params.get("stream")
    if st is None:
        d["placement"] = {**(d.get("placement") or {}), "policy": params["placement"]}
        return d
    # a stream: the scheduler places the jobs when they start; ``base.scheduler`` may add its other fields
    d["scheduler"] = {**(d.get("scheduler") or {}), "queue": st["queue"], "allocation": st["allocation"]}
    d["scheduler"].setdefault("slowdown_tau", spec.space.stream.slowdown_tau)
    return d


def scenario_of(ls: LoadedSpec, i: int):
    """The validated :class:`~hybridsim.scenario.Scenario` of run ``i``; a problem names the spec field behind it."""
    from .scenario import Scenario, limit_problems

    params = draw(ls.spec, i)
    if not params["jobs"]:
        raise CorpusError(f"{ls.where(('space', 'ranks'))}: space.ranks: run {i} drew no job that fits its topology "
                          f"(no rank count in range gives a valid workload)")
    d = scenario_dict(ls.spec, i, params)
    if (d.get("backend") or {}).get("kind", "embedded") != "embedded":
        raise CorpusError(f"{ls.where(('base', 'backend', 'kind'))}: base.backend.kind: a corpus runs the embedded "
                          "engine only")
    try:
        sc = Scenario.model_validate(d)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(err.get("loc", ()))
            src = ("base",) + loc if loc and loc[0] in ls.spec.base else ("space",)
            problems.append(f"{ls.where(src, key=err.get('type') == 'extra_forbidden')}: run {i}: "
                            f"{'.'.join(map(str, loc))}: {_message(err)}")
        raise CorpusError("\n".join(problems), problems) from None
    bad = limit_problems(sc)
    if bad:
        problems = [f"{ls.where(('base', 'limits'))}: run {i}: {'.'.join(map(str, loc))}: {msg}" for loc, msg in bad]
        raise CorpusError("\n".join(problems), problems)
    if sc.is_stream:
        _check_stream(ls, i, sc)
    # relative paths in base resolve beside the spec
    sc.provenance = yamlio.Provenance(path=ls.prov.path.parent / f"{d['name']}.yaml")
    return sc, params


def _check_stream(ls: LoadedSpec, i: int, sc) -> None:
    """A drawn stream the scheduler cannot run (a job larger than the machine beside the background, a job that can
    never start): a problem located at ``space.stream``."""
    from .scenario import stream_jobs, stream_problems
    from .scheduler import SchedulerError, dry_run

    at = ls.where(("space", "stream"))
    problems = [f"{at}: run {i}: {'.'.join(map(str, loc))}: {msg}" for loc, msg in stream_problems(sc)]
    if not problems:  # schedule it with run time = walltime: a job that can never start fails here, before a run
        sec = sc.scheduler
        try:
            dry_run(stream_jobs(sc), sc.topology.shape, sec.queue, sec.allocation, sc.scheduler_seed)
        except SchedulerError as exc:
            problems = [f"{at}: run {i}: scheduler: {exc}"]
    if problems:
        raise CorpusError("\n".join(problems), problems)


# ------------------------------------------------------------------------------------------------------ running
#: the signals that stop a corpus
_STOP = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


def _worker(conn, scenario_data: dict, source: str, outdir: str) -> None:
    """A worker process (``--workers N``): one run, its result sent on ``conn``. Ctrl-C is ignored (the parent stops
    the corpus); SIGTERM and SIGHUP mark the run failed, then end the process (:func:`_run_one`)."""
    for sig in _STOP:  # not the parent's handlers, inherited through the fork
        signal.signal(sig, signal.SIG_IGN if sig == signal.SIGINT else signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP)  # blocked by the parent from before the fork
    res = _run_one(scenario_data, source, outdir, in_worker=True)
    if isinstance(res.get("error"), str):
        res["error"] = res["error"][:4000]  # the parent reads it once the process has ended: keep it within a pipe
    conn.send(res)
    conn.close()


def _run_one(scenario_data: dict, source: str, outdir: str, in_worker: bool = False) -> dict:
    """One pure simulation into ``outdir``. Returns status, wall seconds, events, error. In a worker process
    (``in_worker``) SIGTERM or SIGHUP marks the run failed, then ends the process."""
    from hybridsim_common.interrupts import failure_reason, terminate_like_ctrl_c
    from .runner import run_scenario
    from .scenario import Scenario

    sc = Scenario.model_validate(scenario_data)
    sc.provenance = yamlio.Provenance(path=Path(source))
    t0 = time.perf_counter()
    try:
        with terminate_like_ctrl_c() if in_worker else contextlib.nullcontext():
            _, _, summary = run_scenario(sc, outdir, force=True, mode="simulate", progress=False,
                                         argv=["hybridsim", "corpus"])
    except Exception as exc:  # the run directory is marked failed by run_scenario; the corpus goes on
        return {"status": "failed", "wall_s": time.perf_counter() - t0, "error": failure_reason(exc)}
    except KeyboardInterrupt as exc:
        if not in_worker:
            raise
        # the run directory is marked failed; the parent rebuilds corpus.json from the disk
        code = getattr(exc, "exit_status", 130)
        sys.stderr.flush()
        os._exit(code)
    return {"status": "completed", "wall_s": summary.get("wall_s"), "events": summary.get("events")}


def _existing(run_dir: Path, scenario_data: dict) -> str | None:
    """``completed`` when ``run_dir`` holds a completed run of exactly this scenario, ``other`` when it holds a
    completed run of another one, else None (absent, failed or partial: it runs again)."""
    try:
        m = read_manifest(run_dir)
    except RunDirError:
        return None
    if m.get("status") != "completed":
        return None
    return "completed" if m.get("scenario") == scenario_data else "other"


def _run_costs(run_dir: Path) -> dict:
    """Wall seconds and events of a completed run, from its summary.json (empty if unreadable)."""
    from hybridsim_common.rundir import load_json

    try:
        summary = load_json(run_dir / "summary.json")
        return {"wall_s": summary.get("wall_s"), "events": summary.get("events")}
    except (OSError, RunDirError, AttributeError):
        return {}


def _on_disk(outdir: Path, entry: dict, scenario_data: dict) -> dict:
    """What the run directory of ``entry`` says now: its status (``pending`` when absent or still running), costs
    of a completed run, the reason of a failed one."""
    run_dir = outdir / entry["dir"]
    try:
        m = read_manifest(run_dir)
    except RunDirError:
        return {"status": "pending"}
    status = m.get("status")
    if status == "completed" and m.get("scenario") == scenario_data:
        return {"status": "completed", **_run_costs(run_dir)}
    if status == "failed":
        return {"status": "failed", "error": m.get("reason")}
    return {"status": "pending"}


def _start_worker(ctx, data: dict, src: str, outdir: str):
    """A worker process for one run and the pipe its result comes on. The stop signals are blocked across the fork,
    so the child sets its own handlers before any can reach it."""
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_worker, args=(send, data, src, outdir), daemon=True)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP)
    try:
        proc.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        send.close()
    return proc, recv


def _stop_workers(procs) -> None:
    """SIGTERM every worker (each marks its run failed and exits), wait up to :data:`STOP_GRACE_S` for them, kill
    what is left."""
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join(1.0)


def _run_parallel(todo: list, runs: list, outdir: Path, workers: int, done) -> None:
    """Each run of ``todo`` in a process of its own, ``workers`` at a time; ``done(i, result)`` as each ends."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context()
    queue, active = list(todo), {}
    try:
        while queue or active:
            while queue and len(active) < workers:
                i, data, src = queue.pop(0)
                proc, recv = _start_worker(ctx, data, src, str(outdir / runs[i]["dir"]))
                active[proc.sentinel] = (proc, i, data, recv)
            for sentinel in wait(list(active)):
                proc, i, data, recv = active.pop(sentinel)
                proc.join()
                try:
                    res = recv.recv() if recv.poll() else None
                except (EOFError, OSError):
                    res = None
                recv.close()
                if res is None:  # the worker died (killed, out of memory) before it could say
                    res = _on_disk(outdir, runs[i], data)
                    if res["status"] != "completed":
                        res = {"status": "failed", "error": res.get("error") or
                               f"the worker process ended with exit code {proc.exitcode}"}
                done(i, res)
    except BaseException:
        with signals_deferred():
            _stop_workers([proc for proc, *_ in active.values()])
        raise


def build_corpus(spec_path: str | Path, outdir: str | Path, *, workers: int = 1, force: bool = False,
                 progress: bool = True, out=None) -> dict:
    """Run every not-yet-completed run of the spec into ``outdir``; returns the corpus manifest (also written to
    ``outdir/corpus.json`` after every finished run, and from the run directories when interrupted). Raises
    :class:`CorpusError` for a bad spec or folder, :class:`~hybridsim_common.rundir.RunDirError` when another process is
    writing the corpus."""
    out = out or sys.stdout
    ls = load_spec(spec_path)
    outdir = Path(outdir)
    if outdir.exists() and not outdir.is_dir():
        raise CorpusError(f"{outdir}: exists and is not a folder")
    if outdir.is_dir() and any(outdir.iterdir()):
        try:  # a corpus.json another program wrote does not make a folder a corpus ...
            load_corpus(outdir)
        except (OSError, RunDirError) as exc:
            # ... but a corrupt one beside the corpus's runs folder is rewritten from the run directories
            if isinstance(exc, FileNotFoundError) or not (outdir / CORPUS_FILE).is_file() or \
                    not (outdir / RUNS_DIR).is_dir():
                why = "" if isinstance(exc, FileNotFoundError) else f" ({exc})"
                raise CorpusError(f"{outdir}: a non-empty folder that is not a corpus{why}; choose another -o") \
                    from None
    where = Path(os.path.abspath(outdir))
    where.parent.mkdir(parents=True, exist_ok=True)
    lock = where.parent / f".{where.name}.lock"
    with locked(lock, f"{outdir} is being written by another `hybridsim corpus` (lock {lock} is held); wait for "
                      "it to finish"):
        return _build_locked(ls, spec_path, outdir, workers, force, progress, out)


def _build_locked(ls: LoadedSpec, spec_path, outdir: Path, workers: int, force: bool, progress: bool, out) -> dict:
    from .scenario import scenario_to_dict

    runs, todo = [], []
    for i in range(ls.spec.runs):
        sc, params = scenario_of(ls, i)
        data = scenario_to_dict(sc)
        rel = f"{RUNS_DIR}/{i:04d}"
        state = None if force else _existing(outdir / rel, data)
        if state == "other":
            raise CorpusError(f"{outdir / rel}: a completed run of a different scenario (the spec changed since it "
                              "ran); pass --force to run it again or choose another -o")
        entry = {"id": i, "dir": rel, "name": sc.name, "params": params,
                 "status": "completed" if state else "pending"}
        if state:
            entry.update(_run_costs(outdir / rel))
        runs.append(entry)
        if not state:
            todo.append((i, data, str(sc.provenance.path)))
    (outdir / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    manifest = {"kind": "corpus", "name": ls.spec.name, "spec_file": str(Path(spec_path).resolve()),
                "spec": ls.data, "seed": ls.spec.seed, "created": _created(outdir), "runs": runs}

    def save():
        manifest["updated"] = now_iso()
        manifest["counts"] = {s: sum(1 for r in runs if r["status"] == s) for s in ("completed", "failed", "pending")}
        write_json_atomic(outdir / CORPUS_FILE, manifest)

    save()
    print(f"{outdir}: {ls.spec.runs} runs, {ls.spec.runs - len(todo)} already completed, {len(todo)} to run"
          + (f" on {workers} workers" if todo and workers > 1 else ""), file=out, flush=True)
    bar = None
    if progress and todo:
        from tqdm import tqdm

        bar = tqdm(total=ls.spec.runs, initial=ls.spec.runs - len(todo), unit="run", desc=ls.spec.name,
                   file=sys.stderr)

    def done(i, res):
        runs[i].update(res)
        save()
        if bar is not None:
            bar.update(1)

    try:
        if workers <= 1:
            for i, data, src in todo:
                done(i, _run_one(data, src, str(outdir / runs[i]["dir"])))
        else:
            _run_parallel(todo, runs, outdir, workers, done)
    except BaseException:
        # interrupted (or a worker lost): corpus.json says what the run directories say
        with signals_deferred():
            for i, data, _src in todo:
                runs[i].pop("error", None)
                runs[i].update(_on_disk(outdir, runs[i], data))
            save()
        raise
    finally:
        if bar is not None:
            bar.close()
    return manifest


def load_corpus(outdir: str | Path) -> dict:
    """The corpus manifest ``outdir/corpus.json`` (:class:`~hybridsim_common.rundir.RunDirError` for a corrupt one)."""
    from hybridsim_common.rundir import load_corpus_index

    return load_corpus_index(Path(outdir) / CORPUS_FILE)


def _created(outdir: Path) -> str:
    """When the corpus was first written; now for a new one, or one whose corpus.json is unreadable (it is
    rewritten from the run directories)."""
    try:
        created = load_corpus(outdir)["created"]
    except (OSError, RunDirError, KeyError, TypeError):
        return now_iso()
    return created if isinstance(created, str) else now_iso()

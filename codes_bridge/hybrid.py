"""Hybrid runs on CODES: the scenario's switching policy as CODES' director window(s), served in-process.

CODES cannot be paused from outside, so ``hybridsim run --mode hybrid`` with ``backend: codes`` hands the switching to
CODES' own director (CODES a5958cfa, ``src/surrogate/director-client.cxx``): one director LP per rank streams the
rank's iteration times to a ZeroMQ server and, for the iterations inside a window, skips them by the server's
predictions. Here:

1. :func:`policy_plan` runs the scenario's ``controller`` policy's plan-ahead form (``Policy.ahead``: the policy
   itself for a fixed schedule; ``confident``, the default, has its own, :mod:`controllers.ahead`) dry, per job, on a
   virtual clock (each job's iterations take :func:`nominal_iteration_ns`; a policy that reacts to measured errors or
   costs sees none, so it keeps its starting settings): the SIMULATE/PREDICT sequence the run follows.
2. :func:`choose_windows` picks what CODES can do closest to it. CODES has at most two windows of iteration numbers
   (``start_iter``/``end_iter`` and ``second_start_iter``/``second_end_iter``), the same for every job, with at
   least one simulated iteration between them, and it does not switch a rank before it has sent iteration times
   (:data:`FIRST_PREDICTABLE`): the windows minimise the number of (job, iteration) pairs whose mode differs from
   the plan.
3. :func:`director_section` is the ``DIRECTOR`` section; :class:`DirectorThread` serves the scenario's surrogate
   (:mod:`codes_bridge.director`) on a free port of 127.0.0.1 while CODES runs and is stopped after it, whatever
   happened.

Iteration numbers: CODES' director sees each rank's iteration marks, ``ITERATION i`` being the end of iteration
``i``. A mark ``m`` with ``start_iter <= m < end_iter`` makes the rank skip iteration ``m + 1`` by one prediction;
the mark ``end_iter`` switches it back. So the predicted iterations are ``start_iter + 1 .. end_iter``, and a window
of predicted iterations ``[a, b)`` is written as ``start_iter = a - 1``, ``end_iter = b - 1``.
"""

from __future__ import annotations

import heapq
import threading
from dataclasses import dataclass, field

import numpy as np

from hybridsim_common.backend import Mode

#: CODES switches a rank only once it can send iteration times (6 timestamps: the marks of iterations 0-4 and the
#: start): mark 5 at the earliest, so iteration 6 is the first one CODES can predict
FIRST_PREDICTABLE = 6
#: windows of CODES' DIRECTOR section
MAX_WINDOWS = 2
#: CODES' default ``start_iter`` (a5958cfa ``director-client.cxx``): a window that never opens
NEVER_ITER = 100000
#: workloads whose SWM skeleton writes iteration marks (``ITERATION i``): CODES' director sees their iterations and
#: can skip them. Others (SWM nearest_neighbor writes none; synthetic background jobs have no iterations) are always
#: simulated in a hybrid CODES run.
MARKED_WORKLOADS = ("milc", "lammps")
#: ``backend.codes.standin`` values, written as ``DIRECTOR/standin`` (scripts/codes-patches/0001-standin-traffic.patch):
#: ``replay`` -- a predicted rank keeps sending its last simulated iteration's messages (destinations, sizes, send
#: offsets, repeated every iteration length) until it is simulated again, so co-running jobs still meet its load;
#: ``load`` -- no packets: while a job's ranks are predicted, every router output port holds the share of its
#: bandwidth the job used in its last simulated iteration (weighted by the fraction of its ranks predicted), and the
#: co-runners' packets are serialized at what is left (scripts/codes-patches/0002-standin-load.patch);
#: ``none`` -- CODES as it is: a predicted job's traffic is dropped
STANDIN_MODES = ("replay", "load", "none")
#: the line a patched CODES prints when a stand-in is on (an unpatched CODES ignores ``DIRECTOR/standin``)
STANDIN_BANNERS = {"replay": "stand-in traffic: replay", "load": "stand-in traffic: load"}
STANDIN_BANNER = STANDIN_BANNERS["replay"]
#: what to do about a CODES without the stand-in patches
STANDIN_MISSING = ("it lacks hybridsim's patches scripts/codes-patches/0001-standin-traffic.patch and "
                   "0002-standin-load.patch. Build CODES with scripts/build-codes.sh (it applies them), or set "
                   "backend.codes.standin: none (a predicted job's traffic is then dropped, docs/codes.md)")
#: the virtual length (ns) the dry run gives a LAMMPS step (SWM LAMMPS computes most of the step; ~2.2 ms on the
#: quickstart's Dragonfly)
LAMMPS_STEP_NS = 2.0e6


@dataclass(frozen=True)
class DirectorPlan:
    """What a hybrid CODES run asks of CODES' director.

    ``plan``: per job (scenario order) the policy's modes per iteration (``None`` for background jobs);
    ``windows``: predicted iterations ``[a, b)``, at most :data:`MAX_WINDOWS`; ``mismatch``: per job, the
    iterations whose CODES mode differs from the plan."""

    plan: list[list[Mode] | None]
    windows: list[tuple[int, int]]
    mismatch: dict[str, list[int]]
    #: jobs CODES never predicts (:func:`never_predicted`), with the reason
    unpredictable: dict[str, str] = field(default_factory=dict)

    def codes_modes(self, n_iterations: int, job: str | None = None) -> list[Mode]:
        """What CODES does with each iteration of a job (of ``job``: a job CODES cannot predict is simulated)."""
        if job in self.unpredictable:
            return [Mode.SIMULATE] * n_iterations
        return [Mode.PREDICT if any(a <= i < b for a, b in self.windows) else Mode.SIMULATE
                for i in range(n_iterations)]

    def describe(self) -> dict:
        return {
            "windows": [list(w) for w in self.windows],
            "codes_windows": [[a - 1, b - 1] for a, b in self.windows],
            "policy_predicted": {str(i): int(sum(m == Mode.PREDICT for m in p))
                                 for i, p in enumerate(self.plan) if p is not None},
            "mismatch": self.mismatch,
            "never_predicted": self.unpredictable,
        }


def never_predicted(scenario) -> dict[str, str]:
    """The jobs of ``scenario`` CODES' director can never predict (not background), each with the reason."""
    return {j.name: f"workload {j.workload.kind!r} writes no iteration marks on CODES (only "
                    f"{' and '.join(MARKED_WORKLOADS)} do), so CODES' director never sees its iterations; it stays "
                    "simulated"
            for j in scenario.jobs if not j.is_background and j.workload.kind not in MARKED_WORKLOADS}


def nominal_iteration_ns(scenario, job) -> float:
    """A rough virtual length of one iteration of ``job`` (ns), for ordering the jobs' decisions in the dry run:
    the per-rank bytes at terminal bandwidth plus the workload's compute delay (LAMMPS: :data:`LAMMPS_STEP_NS`)."""
    from .writers import bytes_to_ns

    w = job.workload
    bw = scenario.topology.bandwidth.terminal
    if w.kind == "milc":
        return bytes_to_ns(2 * 2 * len(w.dimension_sizes) * w.msg_size * w.max_dimension_distance, bw) \
            + 2 * w.compute_delay / w.cpu_freq * 1e9
    if w.kind in ("nearest_neighbor", "nn"):
        return bytes_to_ns((3 ** len(w.dimension_sizes) - 1) * w.msg_size, bw) + w.compute_delay / w.cpu_freq * 1e9
    if w.kind == "lammps":
        return LAMMPS_STEP_NS
    return 1e5


def policy_plan(scenario, nominal_ns: dict[int, float] | None = None) -> list[list[Mode] | None]:
    """The scenario policy's mode for every iteration of every job, from a dry run on a virtual clock. The jobs
    decide in virtual-time order, each iteration of job ``i`` lasting ``nominal_ns[i]`` (default
    :func:`nominal_iteration_ns`) whether simulated or predicted; a simulated iteration's truth and a predicted
    one's prediction are that length, no errors are measured and no costs accrue."""
    from controllers import load_policy
    from controllers.base import JobView, ahead_form

    policy = ahead_form(load_policy(scenario.controller.policy, scenario.controller.params))
    if policy is None:
        raise ValueError(f"policy {scenario.controller.policy!r} has no plan-ahead form (Policy.ahead)")
    fixed = never_predicted(scenario)  # asked as usual (a policy may coordinate jobs), but simulated
    plan: list[list[Mode] | None] = [None if j.is_background else [] for j in scenario.jobs]
    lengths = {i: float((nominal_ns or {}).get(i, nominal_iteration_ns(scenario, j)))
               for i, j in enumerate(scenario.jobs) if not j.is_background}
    queue = [(0.0, i) for i in lengths if scenario.jobs[i].iterations > 0]
    running = tuple(i for _, i in queue)  # no scheduler on CODES: every job runs from 0
    heapq.heapify(queue)
    while queue:
        now, i = heapq.heappop(queue)
        job, modes = scenario.jobs[i], plan[i]
        view = JobView(job=job.name, job_id=i, iteration=len(modes), n_iterations=job.iterations,
                       mode=modes[-1] if modes else None, modes=tuple(modes),
                       truth=tuple(lengths[i] if m == Mode.SIMULATE else None for m in modes),
                       predicted=tuple(lengths[i] if m == Mode.PREDICT else None for m in modes),
                       errors=(), costs={}, now=now, running=running)
        mode = Mode(policy.decide(view))
        modes.append(Mode.SIMULATE if job.name in fixed else mode)
        if len(modes) < job.iterations:
            heapq.heappush(queue, (now + lengths[i], i))
    return plan


def choose_windows(plan: list[list[Mode] | None], max_windows: int = MAX_WINDOWS,
                   first: int = FIRST_PREDICTABLE) -> list[tuple[int, int]]:
    """At most ``max_windows`` disjoint windows ``[a, b)`` of predicted iterations (``a >= first``, a simulated
    iteration between two windows), the same for every job, closest to ``plan``.

    Closest: first the fewest *phantom* iterations, then the fewest (job, iteration) pairs whose mode differs from
    the plan, then the fewest windows, then the earliest. A phantom is what CODES adds when a job's last mark
    switches it to the surrogate: a window ``[a, b)`` with ``a <= n < b`` for a job of ``n`` iterations (its last
    iteration predicted by a window that goes on after it, or a window opening right where the job ends: its last
    mark ``n - 1`` is the window's ``start_iter``), so CODES waits one more predicted iteration before the job ends
    (a window ending exactly at the job's end has none)."""
    jobs = [p for p in plan if p]
    n = max((len(p) for p in jobs), default=0)
    if n == 0 or max_windows < 1:
        return []
    pred = np.zeros(n, int)   # jobs the plan predicts at iteration i: mismatches if CODES simulates i
    sim = np.zeros(n, int)    # jobs the plan simulates at i: mismatches if CODES predicts i
    ends = np.zeros(n + 1, int)  # jobs whose last iteration is i - 1
    for p in jobs:
        m = np.array([x == Mode.PREDICT for x in p], bool)
        pred[:len(p)] += m
        sim[:len(p)] += ~m
        ends[len(p)] += 1
    # states: 2k = outside (after k windows), 2k + 1 = inside window k + 1; cost = (phantoms, mismatches, windows)
    n_states = 2 * max_windows + 1
    none = None
    best: list = [(0, 0, 0)] + [none] * (n_states - 1)
    back: list[list[int]] = []
    for i in range(n + 1):  # i == n: one step past every job, where windows still open close
        new, arg = [none] * n_states, [0] * n_states
        for s in range(n_states):
            inside = s % 2 == 1
            if inside and (i < first or i == n):
                continue
            for prev in (s, s - 1):  # stay in s, or enter it (open a window, or close one)
                if prev < 0 or best[prev] is None:
                    continue
                ph, mm, nw = best[prev]
                if inside:   # a job whose last iteration is i - 1 ends at mark i - 1, which switches it: phantom
                    cand = (ph + int(ends[i]), mm + int(sim[i]), nw + (prev != s))
                else:
                    cand = (ph, mm + (int(pred[i]) if i < n else 0), nw)
                if new[s] is None or cand < new[s]:
                    new[s], arg[s] = cand, prev
        best = new
        back.append(arg)
    s = min((k for k in range(n_states) if best[k] is not None), key=lambda k: (best[k], k))
    states = [0] * (n + 1)
    for i in range(n, -1, -1):
        states[i] = s
        s = back[i][s]
    windows, start = [], None
    for i, st in enumerate(states):
        if st % 2 == 1 and start is None:
            start = i
        elif st % 2 == 0 and start is not None:
            windows.append((start, i))
            start = None
    return windows


def truth_only_reason(scenario, plan: DirectorPlan) -> str:
    """One line on why a hybrid plan predicts nothing CODES can predict (the run is then pure CODES)."""
    from controllers import load_policy
    from controllers.base import Policy, ahead_form

    policy = ahead_form(load_policy(scenario.controller.policy, scenario.controller.params))
    why = []
    for job, p in zip(scenario.jobs, plan.plan):
        if p is None:
            continue
        if job.name in plan.unpredictable:
            why.append(f"{job.name}: no iteration marks on CODES")
        elif isinstance(policy, Policy) and (w := policy.why_simulated(job.name, job.iterations)) is not None:
            why.append(w)
        elif any(m == Mode.PREDICT for m in p):
            why.append(f"{job.name}: its predicted iterations fit no CODES window")
        else:
            why.append(f"{job.name}: simulated throughout by the policy")
    return (f"controller.policy {scenario.controller.policy} predicts nothing CODES can predict, so this hybrid run "
            f"is pure CODES (the truth): {'; '.join(why) or 'no job with iterations'}")


def plan_director(scenario, nominal_ns: dict[int, float] | None = None) -> DirectorPlan:
    """The policy's plan, the CODES windows closest to it (chosen on the jobs CODES can predict) and what differs."""
    plan = policy_plan(scenario, nominal_ns)
    fixed = never_predicted(scenario)
    windows = choose_windows([p if j.name not in fixed else None for j, p in zip(scenario.jobs, plan)])
    out = DirectorPlan(plan, windows, {}, fixed)
    for job, p in zip(scenario.jobs, plan):
        if p is not None:
            got = out.codes_modes(len(p), job.name)
            out.mismatch[job.name] = [i for i, (x, y) in enumerate(zip(p, got)) if x != y]
    return out


def director_section(windows: list[tuple[int, int]], backend_name: str = "hybridsim",
                     standin: str = "none", standin_scale: float = 1.0) -> dict[str, str]:
    """CODES' DIRECTOR section for predicted-iteration windows ``[a, b)`` (see the module doc for the numbering).
    Training and inference on: CODES streams every rank's iteration times to the server and asks it for one
    prediction per rank and skipped iteration. The server is hybridsim's, started and stopped by the run, so CODES
    does not send it ``exit``. ``standin``: what stands in for a predicted job's traffic (:data:`STANDIN_MODES`),
    always written (CODES without hybridsim's patch ignores the key; :func:`check_standin` catches that), with
    ``standin_scale`` for ``replay`` (the fraction of each message's bytes replayed) and ``load`` (the fraction of
    the bandwidth share held)."""
    if len(windows) > MAX_WINDOWS:
        raise ValueError(f"at most {MAX_WINDOWS} windows, got {windows}")
    if standin not in STANDIN_MODES:
        raise ValueError(f"standin must be one of {', '.join(STANDIN_MODES)}, got {standin!r}")
    if not 0 < standin_scale <= 1:
        raise ValueError(f"standin_scale must be in (0, 1], got {standin_scale!r}")
    if not windows:  # the director LPs and their records, but no window (CODES' own never-reached default)
        windows = [(NEVER_ITER + 1, NEVER_ITER + 2)]
    sec = {
        "surrogate_family": "iteration-time",
        "surrogate_backend": backend_name,
        "surrogate_enabled": "1",
        "training_enabled": "1",
        "inferencing_enabled": "1",
        "start_iter": str(windows[0][0] - 1),
        "end_iter": str(windows[0][1] - 1),
        "debug_prints": "0",
        "shutdown_zmqml_server_on_finalize": "0",
        "standin": standin,
    }
    if standin != "none":
        sec["standin_scale"] = repr(float(standin_scale))
    if len(windows) == 2:
        sec.update(second_surrogate_enabled="1", second_start_iter=str(windows[1][0] - 1),
                   second_end_iter=str(windows[1][1] - 1))
    return sec


def standin_record(codes) -> dict:
    """What stands in for a predicted job's traffic in a hybrid run with the backend settings ``codes``
    (``backend.codes``), as recorded in ``SimulationResult.standin``: the mode, and the scale where it has one."""
    out = {"mode": codes.standin}
    if codes.standin != "none":
        out["scale"] = float(codes.standin_scale)
    return out


def executable_has_standin(exe, standin: str = "replay") -> bool:
    """Whether the CODES executable ``exe`` carries hybridsim's patch for stand-in ``standin`` (its banner's text is
    in it), read before a run so a CODES that would ignore ``DIRECTOR/standin`` is refused before it runs."""
    import mmap

    with open(exe, "rb") as f:
        try:
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                return m.find(STANDIN_BANNERS[standin].encode()) >= 0
        except ValueError:  # empty file
            return False


def standin_refusal(scenario, env: dict | None = None) -> str | None:
    """Why a hybrid run of ``scenario`` cannot have the stand-in it asks for, read before any CODES run starts
    (None: it can, or there is nothing to say yet): the CODES executable (``backend.codes.bin_dir`` or
    ``$CODES_BIN_DIR``) lacks hybridsim's patch and the policy's plan predicts something. A missing executable is
    left to the run, which names it."""
    from .launcher import CodesRunError, find_executable

    codes = scenario.backend.codes
    if codes.standin == "none":
        return None
    try:
        exe = find_executable(codes, env)
    except CodesRunError:
        return None
    if executable_has_standin(exe, codes.standin):
        return None
    try:
        if not plan_director(scenario).windows:
            return None   # nothing predicted: nothing to stand in for
    except Exception:  # noqa: BLE001 - bad policy settings are reported where every backend checks them
        return None
    return f"backend.codes.standin: {codes.standin}, but CODES {exe} cannot stand in: " + STANDIN_MISSING


def check_standin(stdout_text: str, standin: str) -> str | None:
    """Why a CODES run's output shows the stand-in asked for is missing (``None`` when it is not asked or is there):
    CODES without hybridsim's patch ignores ``DIRECTOR/standin`` and would silently drop predicted jobs' traffic."""
    if standin == "none" or STANDIN_BANNERS[standin] in stdout_text:
        return None
    return (f"backend.codes.standin: {standin}, but this CODES build did not start the stand-in (its output has "
            f"no {STANDIN_BANNERS[standin]!r} line): " + STANDIN_MISSING)


class DirectorThread:
    """The director server for one CODES run, in a thread of this process: ``with DirectorThread(scenario) as d:``
    binds a free port of 127.0.0.1 (:attr:`endpoint`, for ``ZMQML_ENDPOINT``) and serves; leaving the block stops
    and joins it. The model is the scenario's ``surrogate.model`` (a history model or checkpoint; refitted on the
    times CODES sends)."""

    def __init__(self, scenario, log=None):
        from .director import CodesDirectorServer, IterationTimeService, make_model

        spec = scenario.surrogate.model
        p = scenario.resolve(spec)
        is_ckpt = p.is_dir()
        model = make_model(str(p) if is_ckpt else spec, **({} if is_ckpt else dict(scenario.surrogate.config)))
        self.service = IterationTimeService(model, auto_train=True)
        self.service.answers = {}  # the iterations CODES skips are recorded from them (importer.DIRECTOR_ANSWERS)
        self.server = CodesDirectorServer(self.service, "tcp://127.0.0.1:*", log=log)
        self.endpoint: str | None = None
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _serve(self) -> None:
        try:
            self.server.serve_forever(poll_ms=50)
        except BaseException as exc:  # reported by stats(); CODES then hangs until its timeout
            self.error = exc

    def __enter__(self) -> "DirectorThread":
        self.endpoint = self.server.bind()
        self._thread = threading.Thread(target=self._serve, name="codes-director", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stats(self) -> dict:
        s = self.service
        out = {"endpoint": self.endpoint, "model": s.model.name, "requests": self.server.requests,
               "clients": len(s.clients), "records": s.total_records(), "fallbacks": s.no_history_fallbacks,
               "model_version": s.version}
        if self.error is not None:
            out["error"] = repr(self.error)
        return out

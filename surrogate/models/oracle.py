"""The oracle: a surrogate that answers every (job, rank, iteration) with a pure run's own time -- the floor of every
accuracy table. What error a hybrid run with the oracle still has is the loop's (window edges, the ranks of a job
advancing by the job's iteration time instead of their own (``controller.sync``), the traffic a predicted co-runner
leaves out), not a model's.

    oracle:run=PATH      PATH: a completed pure simulation (``hybridsim run``, a bench's ``pure``) of the same
                         scenario; ``hybridsim bench --surrogate oracle`` uses the bench's own pure run.

The run is read as ``hybridsim bench --pure`` reads one: completed, not partial, its tables as their recorded
digests say, and consistent in itself whatever the digests say (finite times, each job's ranks x iterations once,
rows under their own job, the summary's completion times): a tampered run is refused, never answered from.
It refuses a run of another scenario (:meth:`Oracle.check_run`: everything that decides the pure run's times must
match -- topology, jobs, placement, seed, scheduler, backend, sampling, limits; the surrogate, controller, output,
name and description sections may differ). With the scenario's volume scaling on, its answers are divided by the
iteration's relative volume, as the controller multiplies every prediction back.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..base import Context, Surrogate, SurrogateError

#: scenario sections that do not change a pure run's iteration times
IGNORED_SECTIONS = ("name", "description", "output", "surrogate", "controller", "machine")


def _scenario_key(scenario: dict) -> dict:
    return {k: v for k, v in scenario.items() if k not in IGNORED_SECTIONS}


class Oracle(Surrogate):
    """Answers with the pure run's per-rank iteration times (see the module docstring)."""
    cheap_fit = True   # (Surrogate.cheap_fit)

    name = "oracle"
    lookback = 1

    def __init__(self, run: str):
        from hybridsim_common.records import read_iterations
        from hybridsim_common.rundir import RunDirError, read_manifest, verify_digests

        self.run = str(run)
        path = Path(self.run).expanduser()
        try:
            m = read_manifest(path)
        except (RunDirError, OSError, ValueError) as exc:
            raise SurrogateError(f"oracle: run={self.run}: not a run directory ({exc})") from None
        if not isinstance(m, dict) or m.get("status") != "completed" or m.get("mode") != "simulate" or \
                m.get("partial"):
            raise SurrogateError(f"oracle: run={self.run}: not a completed pure simulation (mode "
                                 f"{m.get('mode') if isinstance(m, dict) else None!r}, status "
                                 f"{m.get('status') if isinstance(m, dict) else None!r}"
                                 f"{', partial' if isinstance(m, dict) and m.get('partial') else ''})")
        self.scenario = m.get("scenario") if isinstance(m.get("scenario"), dict) else {}
        try:  # as `hybridsim bench --pure` reads a pure run: as it was written, then consistent in itself
            verify_digests(path, m, redo=f"simulate it again (`hybridsim run SCENARIO -o {self.run} --force`)")
            t = read_iterations(path / "iterations.parquet").to_pydict()
        except RunDirError as exc:
            raise SurrogateError(f"oracle: run={self.run}: {exc}") from None
        except (OSError, ValueError) as exc:
            raise SurrogateError(f"oracle: run={self.run}: unreadable iterations table: {exc}") from None
        job = np.asarray(t["job"], dtype=object)
        rank = np.asarray(t["rank"], dtype=np.int64)
        it = np.asarray(t["iteration"], dtype=np.int64)
        start, end = np.asarray(t["start"], dtype=np.float64), np.asarray(t["end"], dtype=np.float64)
        self._check_table(path, t, job, rank, it, start, end)
        dur = end - start
        #: job name -> (R, T) pure iteration times (NaN where the run has none)
        self.times: dict[str, np.ndarray] = {}
        for name in dict.fromkeys(job.tolist()):
            sel = job == name
            tab = np.full((int(rank[sel].max()) + 1, int(it[sel].max()) + 1), np.nan)
            tab[rank[sel], it[sel]] = dur[sel]
            self.times[name] = tab
        self._volumes = self._read_volumes(path)
        self.scale: dict[str, np.ndarray] = {}   # set by check_run when the scenario scales by volume

    def _check_table(self, path: Path, t: dict, job, rank, it, start, end) -> None:
        """The pure run's table against its own manifest and summary, whatever its digests say: finite times with
        ``0 <= start <= end``, nothing predicted, each foreground job of the manifest's scenario with each of its
        ranks x iterations once (rows labelled by the job's own name and index) and its last end the summary's
        completion time; :class:`SurrogateError` naming what is wrong."""
        from hybridsim_common.rundir import RunDirError, load_json_object

        bad = f"oracle: run={self.run}: iterations.parquet: "
        if not (np.isfinite(start).all() and np.isfinite(end).all()) or (start < 0).any() or (end < start).any():
            raise SurrogateError(bad + "a time that is not finite, before 0, or an end before its start")
        if "mode" in t and "predict" in set(t["mode"]):
            raise SurrogateError(bad + "predicted iterations (a hybrid run's table)")
        try:
            summary = load_json_object(path / "summary.json", "summary.json", "missing")
        except RunDirError as exc:
            raise SurrogateError(f"oracle: run={self.run}: {exc}") from None
        sjobs = summary.get("jobs") if isinstance(summary.get("jobs"), dict) else {}
        jobs = self.scenario.get("jobs") if isinstance(self.scenario.get("jobs"), list) else []
        jid = np.asarray(t["job_id"], dtype=np.int64) if "job_id" in t else None
        seen = np.zeros(len(job), bool)
        for k, j in enumerate(jobs):
            name = j.get("name") if isinstance(j, dict) else None
            sel = job == name
            seen |= sel
            if jid is not None and (jid[sel] != k).any():
                raise SurrogateError(bad + f"rows of job {name!r} carry another job's index (relabelled rows)")
            kind = (j.get("workload") or {}).get("kind") if isinstance(j, dict) else None
            if kind in ("uniform_random", "synthetic1"):
                continue
            ranks, iters = j.get("ranks"), j.get("iterations")
            if not isinstance(ranks, int) or not isinstance(iters, int):
                raise SurrogateError(f"oracle: run={self.run}: manifest.json: job {name!r} without ranks and "
                                     "iterations")
            r, i = rank[sel], it[sel]
            if len(r) != ranks * iters or (r < 0).any() or (r >= ranks).any() or (i < 0).any() or \
                    (i >= iters).any() or len(np.unique(r * iters + i)) != ranks * iters:
                raise SurrogateError(bad + f"job {name!r} does not have each of its {ranks} ranks x {iters} "
                                           f"iterations once ({len(r)} rows)")
            done = (sjobs.get(name) or {}).get("completion_time_ns") if isinstance(sjobs.get(name), dict) else None
            last = float(end[sel].max())
            exact = summary.get("backend", "embedded") == "embedded"  # CODES reports a job's end after its last mark
            if not isinstance(done, (int, float)) or not (abs(last - done) <= 1e-9 * max(abs(done), 1.0) if exact
                                                          else done >= last * (1 - 1e-9)):
                raise SurrogateError(bad + f"job {name!r}: its last iteration ends at {last:g} ns, but summary.json "
                                           f"says it completed at {done!r} ns")
        if not seen.all():
            raise SurrogateError(bad + f"rows of a job its scenario does not have ({job[~seen][0]!r})")

    def config(self) -> dict:
        return {"run": self.run}

    @staticmethod
    def _read_volumes(path: Path) -> dict[str, list | None]:
        try:
            desc = json.loads((path / "description.json").read_text())
            return {j["name"]: j.get("volumes") for j in desc.get("jobs", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def check_run(self, scenario: dict) -> None:
        """Refuse a run of another scenario than the pure run's (see the module docstring)."""
        from ..volumes import relative_volumes

        mine, theirs = _scenario_key(self.scenario), _scenario_key(scenario)
        if mine != theirs:
            diff = sorted(k for k in set(mine) | set(theirs) if mine.get(k) != theirs.get(k))
            raise SurrogateError(f"oracle: run={self.run} is a pure run of another scenario "
                                 f"({self.scenario.get('name')!r}; differs in {', '.join(diff)}): the oracle answers "
                                 "only runs of the scenario it was simulated from")
        scaling = bool((scenario.get("surrogate") or {}).get("volume_scaling"))
        self.scale = {}
        for name, v in self._volumes.items():
            r = relative_volumes(v) if scaling else None
            if r is not None:
                self.scale[name] = r

    def predict(self, ctx: Context) -> np.ndarray:
        tab = self.times.get(ctx.job)
        if tab is None:
            raise SurrogateError(f"oracle: run={self.run} has no job {ctx.job!r}")
        i = int(ctx.iteration) + 1
        R = ctx.history.shape[0]
        ranks = np.arange(R) if ctx.ranks is None else np.asarray(ctx.ranks, dtype=np.int64)
        if i >= tab.shape[1] or (len(ranks) and ranks.max() >= tab.shape[0]):
            raise SurrogateError(f"oracle: run={self.run} has no iteration {i} of job {ctx.job!r} "
                                 f"for ranks up to {int(ranks.max()) if len(ranks) else 0}")
        y = tab[ranks, i].copy()
        sc = self.scale.get(ctx.job)
        return y if sc is None else y / sc[i]

"""CODES inputs from a hybridsim :class:`~hybridsim.scenario.Scenario`.

One call, :func:`write_codes_inputs`, writes everything ``model-net-mpi-replay`` needs into a folder, in the layout of
the reference runs (docs/reference-data.md; docs/workloads.md §6-7):

* ``dfdally-<N>.conf`` -- the dragonfly-dally configuration: ``LPGROUPS`` (one repetition per router, each
  ``nw-lp = p``, ``modelnet_dragonfly_dally = p``, ``modelnet_dragonfly_dally_router = 1``) and ``PARAMS`` with
  every key the reference ``.conf`` files use, plus delay keys only when the scenario departs from CODES' defaults;
* ``dfdally-<N>-intra`` / ``dfdally-<N>-inter`` -- the binary connection files (:meth:`Dragonfly.write_codes_files`,
  byte-identical to CODES' generator; copied verbatim when the scenario names its own files);
* ``<job>.json`` -- one SWM workload JSON per SWM job (``{"jobs": {"size": .., "cfg": {..}}}`` with CODES' key names);
* ``workloads.conf`` -- one line per job: ``<ranks> <json|syntheticK> <qos> <mean_interval>``;
* ``alloc.conf`` -- the allocation file (line j = terminal ids of job j's ranks, rank order);
* the ``model-net-mpi-replay`` arguments (:attr:`CodesInputs.args`), with ROSS' virtual-time model statistics
  (``--model-stats=3 --vt-interval=<sampling.interval> --vt-samp-end=.. --sample-count=..``) when port samples are
  wanted.

What CODES cannot run is refused here with :class:`CodesInputError` (never silently changed): workloads other than
SWM MILC / LAMMPS / nearest_neighbor and synthetic1 background, extra per-iteration compute, a non-default number of
VCs, ``adaptive`` routing (an error in dragonfly-dally), MILC allreduce settings other than SWM's fixed two 8-B
allreduces, and synthetic jobs with different message sizes (CODES has one ``--payload_sz``).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from hybridsim.placement import place_jobs, write_alloc_file
from hybridsim_common.topology import Dragonfly
from hybridsim_common.units import bytes_to_ns

#: CODES' model-net-wide message size setting used by every reference .conf
MESSAGE_SIZE = 840
#: dragonfly-dally's fixed number of VCs per port (not configurable, docs/workloads.md §7.2)
CODES_NUM_VCS = 4
#: ``--report-interval`` (fraction of the run between ROSS progress reports) used by most reference runs
DEFAULT_REPORT_INTERVAL = 0.1
#: ROSS' per-PE statistics buffer for large systems (reference 1,056-node runs)
LARGE_STATS_BUFFER = 100_000_000
#: routers from which the larger statistics buffer and optimistic memory are used (the 1,056-node system has 264)
LARGE_SYSTEM_ROUTERS = 128


class CodesInputError(ValueError):
    """The scenario cannot be expressed as CODES inputs. The message names the scenario field."""


@dataclass
class CodesInputs:
    """What :func:`write_codes_inputs` wrote (all paths absolute, inside :attr:`dir`)."""

    dir: Path
    conf: Path
    intra: Path
    inter: Path
    workload_jsons: list[Path | None]
    workload_list: Path
    alloc: Path
    args: list[str]
    placement: list[np.ndarray] = field(default_factory=list)
    vt_samp_end: float | None = None

    def files(self) -> list[Path]:
        out = [self.conf, self.intra, self.inter, self.workload_list, self.alloc]
        return out + [p for p in self.workload_jsons if p is not None]


# ------------------------------------------------------------------------------------------------------ formatting
def _num(x: float) -> str:
    """CODES-style number text: integers without a decimal point, others with repr precision."""
    x = float(x)
    if math.isfinite(x) and x == int(x) and abs(x) < 1e18:
        return str(int(x))
    return repr(x)


def _json_num(x: float):
    x = float(x)
    return int(x) if x == int(x) and abs(x) < 1e18 else x


# ------------------------------------------------------------------------------------------------------ .conf
def conf_lpgroups(scenario) -> dict[str, str]:
    t = scenario.topology
    p = str(t.terminals_per_router)
    return {
        "repetitions": str(t.groups * t.routers_per_group),
        "nw-lp": p,
        "modelnet_dragonfly_dally": p,
        "modelnet_dragonfly_dally_router": "1",
    }


def conf_params(scenario, intra: str, inter: str, counting: tuple[int, float] | None = None) -> dict[str, str]:
    """The PARAMS section as an ordered ``key -> value text`` mapping (values unquoted).

    ``counting``: ``(windows, interval_us)`` switches on CODES' per-router per-port traffic counters
    (``counting_bool=1``, ``lp-io/dragonfly-router-traffic-sample``); by default they are off (the ROSS virtual-time
    samples carry the same per-port bytes) but the keys are written with the reference values.
    """
    t = scenario.topology
    if t.num_vcs != CODES_NUM_VCS:
        raise CodesInputError(
            f"topology.num_vcs: CODES dragonfly-dally always uses {CODES_NUM_VCS} VCs per port (got {t.num_vcs})")
    if t.routing == "adaptive":
        raise CodesInputError("topology.routing: 'adaptive' is an error in CODES dragonfly-dally; use "
                              "'prog-adaptive' (CODES' adaptive routing) or 'minimal'/'nonminimal'")
    bw = t.bandwidth
    params: dict[str, str] = {
        "packet_size": str(t.packet_size),
        "modelnet_order": '( "dragonfly_dally","dragonfly_dally_router" )',
        "modelnet_scheduler": "fcfs",
        "chunk_size": str(t.packet_size),
        "num_routers": str(t.routers_per_group),
        "num_groups": str(t.groups),
        "local_vc_size": str(t.vc_buffer.local),
        "global_vc_size": str(t.vc_buffer.global_),
        "cn_vc_size": str(t.vc_buffer.terminal),
        "local_bandwidth": _num(bw.local),
        "global_bandwidth": _num(bw.global_),
        "cn_bandwidth": _num(bw.terminal),
        "message_size": str(MESSAGE_SIZE),
        "num_cns_per_router": str(t.terminals_per_router),
        "num_global_channels": str(t.global_channels_per_router),
        "intra-group-connections": intra,
        "inter-group-connections": inter,
        "routing": t.routing,
        "minimal-bias": "1",
        "df-dally-vc": "1",
    }
    # delays: only where they differ from what dragonfly-dally computes when the key is absent
    if abs(t.router_delay - 100.0) > 1e-9:
        params["router_delay"] = _num(t.router_delay)
    for key, lat, b in (("local_delay", t.latency.local, bw.local), ("global_delay", t.latency.global_, bw.global_),
                        ("cn_delay", t.latency.terminal, bw.terminal)):
        if lat is not None and abs(lat - bytes_to_ns(t.packet_size, b)) > 1e-9:
            params[key] = _num(lat)
    if t.credit_delay is not None and abs(t.credit_delay - bytes_to_ns(8, bw.local)) > 1e-9:
        params["credit_delay"] = _num(t.credit_delay)
    if counting is not None:
        windows, interval_us = counting
        params.update(counting_bool="1", counting_start="0", counting_windows=str(int(windows)),
                      counting_interval=_num(interval_us))
    else:
        params.update(counting_bool="0", counting_start="0", counting_windows="200", counting_interval="50")
    params["num_apps"] = str(len(scenario.jobs))
    return params


def render_conf(lpgroups: dict[str, str], params: dict[str, str], comment: str | None = None,
                sections: dict[str, dict[str, str]] | None = None) -> str:
    """The ``.conf`` text; ``sections``: more top-level sections after PARAMS (``DIRECTOR``), values quoted."""
    lines = ["LPGROUPS", "{", "   MODELNET_GRP", "   {"]
    lines += [f'      {k}="{v}";' for k, v in lpgroups.items()]
    lines += ["   }", "}", "PARAMS", "{"]
    if comment:
        lines += [f"# {c}" for c in comment.splitlines()]
    for k, v in params.items():
        lines.append(f"   {k}={v};" if v.startswith("(") else f'   {k}="{v}";')
    lines += ["}"]
    for name, sec in (sections or {}).items():
        lines += [name, "{"] + [f'   {k}="{v}";' for k, v in sec.items()] + ["}"]
    lines += [""]
    return "\n".join(lines)


def parse_conf(text: str, source: str = "<conf>") -> dict[str, dict[str, str]]:
    """A CODES ``.conf`` -> ``{section: {key: value}}`` (sub-groups of LPGROUPS flattened under their name).

    Values are unquoted; lists keep their ``( ... )`` text with the spaces removed. Comments (``#``) are skipped.
    Used to compare generated files with the reference ones, and to read a .conf back.
    """
    out: dict[str, dict[str, str]] = {}
    stack: list[str] = []
    pending: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line == "{":
            if pending is None:
                raise ValueError(f"{source}:{lineno}: '{{' without a section name")
            stack.append(pending)
            out.setdefault(pending, {})
            pending = None
            continue
        if line == "}":
            if not stack:
                raise ValueError(f"{source}:{lineno}: unbalanced '}}'")
            stack.pop()
            continue
        if "=" in line:
            if not stack:
                raise ValueError(f"{source}:{lineno}: key outside a section: {line!r}")
            key, val = line.split("=", 1)
            val = val.strip().rstrip(";").strip()
            if val.startswith("("):
                val = val.replace(" ", "")
            elif len(val) >= 2 and val[0] == val[-1] == '"':
                val = val[1:-1]
            out[stack[-1]][key.strip()] = val
            continue
        pending = line
    if stack:
        raise ValueError(f"{source}: unterminated section {stack[-1]!r}")
    return out


# ------------------------------------------------------------------------------------------------------ workloads
def _check_compute(job) -> None:
    c = job.compute
    if c.delay or c.kernels:
        raise CodesInputError(f"jobs[{job.name}].compute: CODES' SWM skeletons have no extra per-iteration compute "
                              f"phase; remove compute.delay/kernels for the codes backend")


def workload_cfg(job) -> dict | None:
    """The SWM ``cfg`` object of a job (CODES key names), or None for a synthetic background job."""
    w = job.workload
    kind = w.kind
    if kind in ("uniform_random", "synthetic1"):
        return None
    _check_compute(job)
    if kind == "milc":
        if w.allreduce_count != 2 or w.allreduce_size != 8:
            raise CodesInputError(f"jobs[{job.name}].workload: SWM MILC always does two 8-B allreduces per iteration "
                                  f"(got allreduce_count={w.allreduce_count}, allreduce_size={w.allreduce_size})")
        return {
            "app": "milc",
            "iteration_cnt": int(job.iterations),
            "compute_delay": _json_num(w.compute_delay),
            "dimension_cnt": len(w.dimension_sizes),
            "dimension_sizes": [int(d) for d in w.dimension_sizes],
            "msg_size": int(w.msg_size),
            "max_dimension_distance": int(w.max_dimension_distance),
            "randomize_communication_order": False,
            "cpu_freq": float(w.cpu_freq),
        }
    if kind == "lammps":
        return {
            "app": "lammps",
            "num_x_replicas": int(w.num_x_replicas),
            "num_y_replicas": int(w.num_y_replicas),
            "num_z_replicas": int(w.num_z_replicas),
            "num_time_steps": int(job.iterations),
            "req_vc": 0,
            "resp_vc": 1,
            "router_freq": float(w.router_freq),
            "cpu_freq": float(w.cpu_freq),
            "cpu_sim_speedup": float(w.cpu_sim_speedup),
        }
    if kind in ("nearest_neighbor", "nn"):
        return {
            "app": "nearest_neighbor",
            "iteration_cnt": int(job.iterations),
            "compute_delay": _json_num(w.compute_delay),
            "noop_cnt": 0,
            "dimension_cnt": len(w.dimension_sizes),
            "dimension_sizes": [int(d) for d in w.dimension_sizes],
            "msg_size": int(w.msg_size),
            "max_dimension_distance": int(w.max_dimension_distance),
            "synchronous": True,
            "randomize_communication_order": 0,
            "cpu_freq": float(w.cpu_freq),
        }
    raise CodesInputError(f"jobs[{job.name}].workload.kind: {kind!r} has no CODES/SWM equivalent; the codes backend "
                          f"runs milc, lammps, nearest_neighbor and uniform_random (synthetic1)")


def workload_json(job) -> dict | None:
    cfg = workload_cfg(job)
    return None if cfg is None else {"jobs": {"size": int(job.ranks), "cfg": cfg}}


def payload_size(scenario) -> int | None:
    """``--payload_sz`` for the synthetic jobs (None without any)."""
    sizes = {int(j.workload.msg_size) for j in scenario.jobs if j.is_background}
    if not sizes:
        return None
    if len(sizes) > 1:
        raise CodesInputError(f"jobs: CODES has one --payload_sz for every synthetic job, but the uniform_random jobs "
                              f"use msg_size {sorted(sizes)}")
    return sizes.pop()


# ------------------------------------------------------------------------------------------------------ run length
def estimate_end_ns(scenario) -> float:
    """A generous upper bound of the virtual time at which the SWM jobs finish, for ``--vt-samp-end``.

    ROSS keeps sampling until ``--vt-samp-end`` even after the jobs end (cheap: one sample event per LP and interval),
    while an end that is too early loses the last samples, so this errs on the long side: per job, a per-iteration
    time of 4x the time to inject its per-rank bytes at terminal bandwidth (at least 100 us; LAMMPS steps 4 ms, about
    twice the slowest reference step), times iterations, plus 2 ms.
    """
    bw = scenario.topology.bandwidth.terminal
    longest = 0.0
    for job in scenario.jobs:
        w = job.workload
        if job.is_background or job.iterations is None:
            continue
        if w.kind == "milc":
            nbytes = 2 * 2 * len(w.dimension_sizes) * w.msg_size * w.max_dimension_distance
            per_it = 4 * bytes_to_ns(nbytes, bw) + 2 * w.compute_delay / w.cpu_freq * 1e9
        elif w.kind in ("nearest_neighbor", "nn"):
            nbytes = (3 ** len(w.dimension_sizes) - 1) * w.msg_size
            per_it = 4 * bytes_to_ns(nbytes, bw) + w.compute_delay / w.cpu_freq * 1e9
        elif w.kind == "lammps":
            per_it = 4e6
        else:
            per_it = 0.0
        longest = max(longest, max(per_it, 1e5) * job.iterations)
    return longest + 2e6


# ------------------------------------------------------------------------------------------------------ arguments
def replay_args(scenario, *, workload_list: str, alloc: str, conf: str, vt_samp_end: float | None = None,
                end_time: float | None = None, report_interval: float = DEFAULT_REPORT_INTERVAL,
                model_stats: bool | None = None) -> list[str]:
    """``model-net-mpi-replay`` arguments (without ``mpirun``/executable), in the reference runs' order.

    Backend ``extra_args`` are not included (the launcher merges them: an extra ``--name=`` replaces ours)."""
    codes = scenario.backend.codes
    t = scenario.topology
    large = t.groups * t.routers_per_group >= LARGE_SYSTEM_ROUTERS
    args = []
    if codes.synch == "optimistic":
        args += ["--synch=3", f"--extramem={400000 if large else 200000}"]
    else:
        args += ["--synch=1"]
    args += [f"--report-interval={report_interval:g}", "--workload_type=swm-online",
             f"--workload_conf_file={workload_list}", f"--alloc_file={alloc}", "--lp-io-dir=lp-io"]
    psz = payload_size(scenario)
    if psz is not None:
        args.append(f"--payload_sz={psz}")
    if end_time is not None:
        args.append(f"--end={_num(end_time)}")
    if model_stats is None:
        model_stats = bool(scenario.sampling.ports)
    if model_stats:
        interval = scenario.sampling.interval
        if vt_samp_end is None:
            vt_samp_end = end_time if end_time is not None else estimate_end_ns(scenario)
        # a whole number of intervals, rounded up
        vt_samp_end = math.ceil(vt_samp_end / interval - 1e-9) * interval
        args += ["--model-stats=3", f"--vt-interval={_num(interval)}", f"--vt-samp-end={_num(vt_samp_end)}",
                 f"--sample-count={codes.sample_count}", "--stats-path=ross-stats"]
        if large:
            args.append(f"--buffer-size={LARGE_STATS_BUFFER}")
    args += ["--", conf]
    return args


def merge_extra_args(args: Sequence[str], extra: Sequence[str]) -> list[str]:
    """Put ``extra`` before the ``--`` separator; an extra ``--name=value`` (or ``--name``) replaces ours."""
    args = list(args)
    sep = args.index("--") if "--" in args else len(args)
    head, tail = args[:sep], args[sep:]
    names = {e.split("=", 1)[0] for e in extra if e.startswith("--")}
    head = [a for a in head if a.split("=", 1)[0] not in names]
    return head + list(extra) + tail


def option_dict(args: Sequence[str]) -> dict[str, str]:
    """``['--a=1', '--b', '--', 'x.conf']`` -> ``{'--a': '1', '--b': '', '--': 'x.conf'}`` (for comparisons)."""
    out: dict[str, str] = {}
    it = list(args)
    if "--" in it:
        i = it.index("--")
        out["--"] = " ".join(it[i + 1:])
        it = it[:i]
    for a in it:
        k, _, v = a.partition("=")
        out[k] = v
    return out


# ------------------------------------------------------------------------------------------------------ all files
def write_codes_inputs(scenario, out_dir, *, topo: Dragonfly | None = None,
                       placement: list[np.ndarray] | None = None, vt_samp_end: float | None = None,
                       end_time: float | None = None, report_interval: float = DEFAULT_REPORT_INTERVAL,
                       counting: tuple[int, float] | None = None, model_stats: bool | None = None,
                       extra_params: dict[str, str] | None = None,
                       director: dict[str, str] | None = None) -> CodesInputs:
    """Write the CODES inputs for ``scenario`` into ``out_dir`` (created); return what was written.

    Paths inside the files are relative to ``out_dir`` (CODES is started there). ``end_time`` (ns; default the
    scenario's stop time ``backend.embedded.end_time``, so both backends stop at the same virtual time) becomes
    ``--end`` and is required when every job is a synthetic background job (they would run forever).
    ``extra_params`` are added to PARAMS verbatim (CODES instrumentation such as ``router_buffer_snapshots`` or
    ``save_packet_latency_path``; a value starting with ``(`` is written unquoted, as a list). ``director``: the
    ``DIRECTOR`` section of a hybrid run (:func:`codes_bridge.hybrid.director_section`); it also adds one director
    LP per rank slot (``dir-nw-lp`` = ``nw-lp``) to LPGROUPS."""
    if end_time is None:
        end_time = scenario.backend.embedded.end_time
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if all(j.is_background for j in scenario.jobs) and end_time is None:
        raise CodesInputError("jobs: every job is synthetic background traffic, which in CODES runs until --end; "
                              "give an end time")
    # validate everything before writing anything
    jsons = [workload_json(j) for j in scenario.jobs]
    payload_size(scenario)
    t = scenario.topology
    n = t.n_terminals
    intra = out / f"dfdally-{n}-intra"
    inter = out / f"dfdally-{n}-inter"
    conf = out / f"dfdally-{n}.conf"
    params = conf_params(scenario, f"./{intra.name}", f"./{inter.name}", counting)
    for k, v in (extra_params or {}).items():
        if k in params:
            raise CodesInputError(f"extra_params: {k!r} is written from the scenario; change the scenario instead")
        params[k] = str(v)
    if topo is None:
        topo = scenario.build_topology()
    if placement is None:
        placement = place_jobs(scenario, topo)

    if t.connections is not None:
        shutil.copyfile(scenario.resolve(t.connections.intra), intra)
        shutil.copyfile(scenario.resolve(t.connections.inter), inter)
    else:
        topo.write_codes_files(intra, inter)
    comment = (f"written by hybridsim for scenario {scenario.name or '(unnamed)'}: {t.groups} groups x "
               f"{t.routers_per_group} routers x {t.terminals_per_router} terminals, "
               f"{t.global_channels_per_router} global channels per router")
    lpgroups = conf_lpgroups(scenario)
    if director:
        lpgroups["dir-nw-lp"] = lpgroups["nw-lp"]
    conf.write_text(render_conf(lpgroups, params, comment, {"DIRECTOR": dict(director)} if director else None))

    json_paths: list[Path | None] = []
    lines = []
    for job, doc in zip(scenario.jobs, jsons):
        if doc is None:
            json_paths.append(None)
            lines.append(f"{job.ranks} synthetic1 0 {_num(job.workload.interval)}")
        else:
            p = out / f"{job.name}.json"
            p.write_text(json.dumps(doc, indent=2) + "\n")
            json_paths.append(p)
            lines.append(f"{job.ranks} ./{p.name} 0 0")
    wl = out / "workloads.conf"
    wl.write_text("\n".join(lines) + "\n")
    alloc = out / "alloc.conf"
    write_alloc_file(placement, alloc)

    args = replay_args(scenario, workload_list=wl.name, alloc=alloc.name, conf=conf.name, vt_samp_end=vt_samp_end,
                       end_time=end_time, report_interval=report_interval, model_stats=model_stats)
    samp = option_dict(args).get("--vt-samp-end")
    return CodesInputs(dir=out, conf=conf, intra=intra, inter=inter, workload_jsons=json_paths, workload_list=wl,
                       alloc=alloc, args=args, placement=placement,
                       vt_samp_end=float(samp) if samp else None)

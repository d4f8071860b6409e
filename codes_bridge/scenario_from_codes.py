"""``hybridsim scenario-from-codes``: the hybridsim scenario equivalent to a CODES run's inputs.

Mapped (CODES -> scenario):

* network ``.conf`` PARAMS -> ``topology`` (num_groups, num_routers, num_cns_per_router, num_global_channels,
  {local,global,cn}_bandwidth, {local,global,cn}_vc_size, packet_size, routing, router_delay,
  {local,global,cn}_delay, the connection files); CODES' defaults (docs/workloads.md §7.2) where a key is absent;
* workload list file (``--workload_conf_file``) + SWM JSON files -> ``jobs`` (names as the importer uses them; the
  JSON through :func:`hybridsim.workloads.from_codes_json`); ``synthetic*`` background lines -> ``uniform_random``
  with ``msg_size = --payload_sz`` and ``interval = <mean_interval>``;
* allocation file (``--alloc_file``) -> ``placement: {policy: file}``;
* ``--vt-interval`` -> ``sampling.interval``; the launch options -> ``backend.codes`` (kind stays ``embedded``, so the
  same case runs on the embedded engine for side-by-side comparison); ``--end`` -> ``backend.embedded.end_time``.

Keys that change nothing in dragonfly-dally (``minimal-bias``, ``df-dally-vc``, ``message_size``) and instrumentation
keys are ignored; anything the scenario cannot express (e.g. rails, QoS levels, surrogate sections) raises or is
reported.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

from hybridsim.scenario import Scenario, scenario_to_dict

from .conf import (ConfError, command_options, find_network_conf, find_workloads_conf, job_names_from_workloads,
                   parse_conf, parse_workloads_conf)

_ROUTING = {"minimal": "minimal", "nonminimal": "nonminimal", "non-minimal": "nonminimal", "adaptive": "adaptive",
            "prog-adaptive": "prog-adaptive", "prog_adaptive": "prog-adaptive"}


class ScenarioFromCodesError(ValueError):
    pass


def _find_input(run_dir: Path, name: str) -> Path | None:
    p = Path(name)
    for base in (run_dir, run_dir.parent, run_dir.parent.parent):
        for cand in ((base / p) if not p.is_absolute() else p, base / p.name):
            if cand.is_file():
                return cand.resolve()
    return None


def _json_workload(path: Path) -> tuple[str, dict, int | None]:
    """(kind, params, iterations) of an SWM JSON: hybridsim.workloads.from_codes_json if available, else a minimal
    mapping of the JSON keys."""
    try:
        from hybridsim.workloads import from_codes_json
    except ImportError:  # pragma: no cover - the workloads package provides it
        from_codes_json = None
    if from_codes_json is not None:
        try:
            return from_codes_json(path)
        except Exception as exc:
            raise ScenarioFromCodesError(str(exc)) from None
    import json  # pragma: no cover

    cfg = json.loads(path.read_text())["jobs"]["cfg"]  # pragma: no cover
    app = cfg["app"]  # pragma: no cover
    if app == "milc":  # pragma: no cover
        return "milc", {k: cfg[k] for k in ("dimension_sizes", "msg_size", "compute_delay", "max_dimension_distance",
                                            "cpu_freq") if k in cfg}, cfg.get("iteration_cnt")
    if app == "lammps":  # pragma: no cover
        return "lammps", {k: cfg[k] for k in ("num_x_replicas", "num_y_replicas", "num_z_replicas", "router_freq",
                                              "cpu_freq", "cpu_sim_speedup") if k in cfg}, cfg.get("num_time_steps")
    return "nearest_neighbor", {k: cfg[k] for k in ("dimension_sizes", "msg_size", "max_dimension_distance",  # pragma: no cover
                                                    "cpu_freq") if k in cfg}, cfg.get("iteration_cnt")


def _workload_fields(kind: str) -> set[str]:
    from hybridsim import scenario as S

    model = {"milc": S.MilcWorkload, "lammps": S.LammpsWorkload, "nearest_neighbor": S.NearestNeighborWorkload,
             "nn": S.NearestNeighborWorkload}.get(kind)
    if model is None:
        return set()
    return {f.alias or n for n, f in model.model_fields.items()}


def scenario_dict_from_codes(codes_run_dir: str | os.PathLike) -> tuple[dict, list[str]]:
    """The scenario as a plain dict (absolute paths) and notes on what was not mapped."""
    d = Path(codes_run_dir)
    if not d.is_dir():
        raise ScenarioFromCodesError(f"{d}: not a directory")
    notes: list[str] = []
    conf_path = find_network_conf(d)
    conf = parse_conf(conf_path)
    opts = command_options(d)
    for key, why in (("num_rails", "rails"), ("num_qos_levels", "QoS levels"), ("num_planes", "planes")):
        if conf.has(key) and conf.get_int(key) != 1:
            raise ConfError(conf.path, conf.lines.get(("PARAMS", key)),
                            f"{key} = {conf.get(key)}: the hybridsim scenario has one {why[:-1]} only")
    for sec in conf.sections:
        if sec not in ("LPGROUPS", "PARAMS"):
            notes.append(f"{conf.path}: section {sec} (CODES surrogate settings) is not part of the scenario")
    routing = conf.get_str("routing", "minimal")
    if routing not in _ROUTING:
        raise ConfError(conf.path, conf.lines.get(("PARAMS", "routing")), f"routing {routing!r} has no hybridsim "
                                                                          f"equivalent ({', '.join(sorted(_ROUTING))})")
    if not conf.has("packet_size"):
        raise ConfError(conf.path, None, "PARAMS lacks packet_size (CODES then leaves it unset: a CODES bug)")
    if conf.get_int("chunk_size", conf.get_int("packet_size")) != conf.get_int("packet_size"):
        notes.append(f"{conf.where('chunk_size')}: chunk_size {conf.get('chunk_size')} != packet_size; hybridsim "
                     "uses chunk = packet")
    topo: dict = {
        "groups": conf.get_int("num_groups"),
        "routers_per_group": conf.get_int("num_routers"),
        "terminals_per_router": conf.get_int("num_cns_per_router", conf.get_int("num_routers") // 2),
        "global_channels_per_router": conf.get_int("num_global_channels", 10),
        "bandwidth": {"local": conf.get_float("local_bandwidth", 5.25), "global": conf.get_float("global_bandwidth", 4.7),
                      "terminal": conf.get_float("cn_bandwidth", 5.25)},
        "vc_buffer": {"local": conf.get_int("local_vc_size", 1024), "global": conf.get_int("global_vc_size", 2048),
                      "terminal": conf.get_int("cn_vc_size", 1024)},
        "packet_size": conf.get_int("packet_size"),
        "routing": _ROUTING[routing],
        "router_delay": conf.get_float("router_delay", 100.0),
        "num_vcs": 4,
    }
    lat = {}
    for key, cls in (("local_delay", "local"), ("global_delay", "global"), ("cn_delay", "terminal")):
        if conf.has(key):
            lat[cls] = conf.get_float(key)
    if lat:
        topo["latency"] = lat
    if conf.has("credit_delay"):
        topo["credit_delay"] = conf.get_float("credit_delay")
    files = conf.connection_files(d)
    if files is not None:
        topo["connections"] = {"intra": str(files[0].resolve()), "inter": str(files[1].resolve())}
    else:
        notes.append(f"{conf.path}: connection files not found; the scenario uses CODES' generator arrangement")

    # jobs
    wl_path = find_workloads_conf(d)
    if wl_path is None:
        raise ScenarioFromCodesError(f"{d}: no workload file (--workload_conf_file in command.txt, workloads.conf)")
    lines = parse_workloads_conf(wl_path)
    names = job_names_from_workloads(lines)
    jobs = []
    for w, name in zip(lines, names):
        if w.is_synthetic:
            if w.app != "synthetic1":
                raise ConfError(wl_path, w.line, f"{w.app}: only synthetic1 (uniform random) has a hybridsim "
                                                 "equivalent")
            if "payload_sz" not in opts:
                raise ScenarioFromCodesError(f"{d / 'command.txt'}: synthetic job {name!r} needs --payload_sz")
            if w.mean_interval <= 0:
                raise ConfError(wl_path, w.line, f"synthetic job {name!r}: mean interval must be > 0")
            jobs.append({"name": name, "ranks": w.ranks,
                         "workload": {"kind": "uniform_random", "msg_size": int(opts["payload_sz"]),
                                      "interval": float(w.mean_interval)}})
            continue
        jp = _find_input(d, w.app)
        if jp is None:
            raise ConfError(wl_path, w.line, f"workload JSON {w.app!r} not found next to the run")
        kind, params, iterations = _json_workload(jp)
        allowed = _workload_fields(kind)
        dropped = {k: v for k, v in params.items() if allowed and k not in allowed}
        if dropped:
            notes.append(f"{jp}: {sorted(dropped)} have no field in the scenario's {kind} workload; left out")
        params = {k: v for k, v in params.items() if not allowed or k in allowed}
        job = {"name": name, "ranks": w.ranks, "workload": {"kind": kind, **params}}
        if iterations is not None:
            job["iterations"] = int(iterations)
        jobs.append(job)

    scen: dict = {"name": d.name, "description": f"equivalent of the CODES run {d.resolve()}",
                  "topology": topo, "jobs": jobs}
    alloc = opts.get("alloc_file")
    if alloc:
        ap = _find_input(d, alloc)
        if ap is None:
            raise ScenarioFromCodesError(f"{d / 'command.txt'}: --alloc_file={alloc} not found")
        scen["placement"] = {"policy": "file", "file": str(ap)}
    else:
        notes.append(f"{d}: no --alloc_file; CODES placed ranks contiguously")
        scen["placement"] = {"policy": "contiguous"}
    if "vt-interval" in opts:
        scen["sampling"] = {"interval": float(opts["vt-interval"])}
    codes: dict = {}
    cmd = (d / "command.txt").read_text() if (d / "command.txt").is_file() else ""
    m = re.search(r"-np\s+(\d+)", cmd)
    if m:
        codes["np"] = int(m.group(1))
    if opts.get("synch") in ("1", "3"):
        codes["synch"] = "sequential" if opts["synch"] == "1" else "optimistic"
    if "sample-count" in opts:
        codes["sample_count"] = int(opts["sample-count"])
    if "payload_sz" in opts:
        codes["payload_size"] = int(opts["payload_sz"])
    backend: dict = {"kind": "embedded"}
    if codes.get("synch") == "sequential" or codes.get("np", 1) > 1 or codes:
        if codes.get("synch") == "sequential":
            codes["np"] = 1
        backend["codes"] = codes
    if "end" in opts:
        backend["embedded"] = {"end_time": float(opts["end"])}
    scen["backend"] = backend
    return scen, notes


def scenario_from_codes(codes_run_dir: str | os.PathLike) -> Scenario:
    """A validated :class:`hybridsim.scenario.Scenario` (paths absolute) equivalent to the CODES run."""
    data, _notes = scenario_dict_from_codes(codes_run_dir)
    try:
        return Scenario.model_validate(data)
    except Exception as exc:
        raise ScenarioFromCodesError(f"{codes_run_dir}: the mapped scenario is invalid: {exc}") from None


def write_scenario_yaml(scenario: Scenario, path: str | os.PathLike, force: bool = False,
                        header: str | None = None) -> Path:
    """Write ``scenario`` as YAML (aliases, ``null`` fields left out) so that ``load_scenario`` reads it back."""
    p = Path(path)
    if p.exists() and not force:
        raise FileExistsError(f"{p} already exists (use --force to overwrite)")
    data = _drop_none(scenario_to_dict(scenario))
    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120)
    head = header or "# written by hybridsim scenario-from-codes\n"
    if scenario.description:
        head += f"# {scenario.description}\n"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(head + text)
    return p


def _drop_none(x):
    if isinstance(x, dict):
        return {k: _drop_none(v) for k, v in x.items() if v is not None}
    if isinstance(x, list):
        return [_drop_none(v) for v in x]
    return x

"""The scenario: one YAML file describes a whole simulation.

Sections: ``topology``, ``jobs``, ``placement``, ``backend``, ``sampling``, ``output``, ``seed`` and the sections owned by
later layers (``surrogate``, ``controller``, ``machine``). Defaults reproduce CODES' 1,056-node dragonfly-dally
reference system (docs/design.md §4). Every model forbids unknown keys; :func:`load_scenario` turns
any YAML or schema error into a :class:`ScenarioError` that names the file, line, column and field path.

Units: times in ns (numbers) or strings with a unit (``"250us"``); bandwidth in GiB/s; sizes in bytes.

Why one module of this size: the schema is one pydantic tree whose cross-field checks (limits, ranks against
terminals, workload bounds, streams) need all of it.

Over 600 lines: the whole YAML schema (every section, its defaults and cross-field checks) in one place, so a field
and its rule are found together; backends' options live with their plug-ins.
"""

from __future__ import annotations

import collections
import dataclasses
import os
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PrivateAttr, StrictBool, StrictInt, ValidationError,
                      field_validator, model_validator)

import hybridsim_common.plugins as plugins
from hybridsim_common import yamlio
from hybridsim_common.topology import Dragonfly, DragonflyShape, TopologyError
from hybridsim_common.units import Duration, bytes_to_ns
from hybridsim_common.yamlio import Provenance, ScenarioError, YamlInputError, YamlLimits  # noqa: F401 (re-exported)
from hybridsim_common.yamlio import where as _where


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False)


#: sanity bounds: values beyond them make a run endless or meaningless (virtual time stops advancing, one packet per
#: byte, a link that never delivers), so they are validation errors rather than limits to raise
MIN_BANDWIDTH, MAX_BANDWIDTH = 1e-3, 1e6        # GiB/s
MAX_LINK_DELAY = 1e9                            # ns (1 s) per hop: router, link, credit
MAX_COMPUTE_DELAY = 1e12                        # ns (1000 s) per compute phase or interval
MIN_SAMPLE_INTERVAL = 1000.0                    # ns
MIN_PACKET_SIZE = 64                            # bytes
MIN_FREQ, MAX_FREQ = 1e6, 1e12                  # Hz
MAX_CYCLES = 1e15                               # CPU cycles per compute phase
#: the latest virtual time a run may reach, ns (~104 days): below 2^53 ns a float64 time still moves by 1 ns, the
#: smallest step of the model (a background message interval); past it time would stand still while events go on
MAX_VIRTUAL_TIME = float(2**53)
#: the largest count the compiled engine core holds per port, VC buffer or packet (C++ int32): packets per buffer,
#: bytes per packet, port VCs and terminals of the topology stay within it
MAX_CORE_INT32 = 2**31 - 1


# ---------------------------------------------------------------------------------------------------------- topology
class PerLinkClass(_Model):
    """A value per link class: router-router local, router-router global, terminal-router."""

    local: float
    global_: float = Field(alias="global")
    terminal: float

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.local, self.global_, self.terminal)


class Bandwidth(PerLinkClass):
    """Link bandwidth per class in GiB/s (2^30 B/s, as CODES)."""

    local: float = Field(5.25, ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH)
    global_: float = Field(4.7, ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH, alias="global")
    terminal: float = Field(5.25, ge=MIN_BANDWIDTH, le=MAX_BANDWIDTH)


class Latency(_Model):
    """Link propagation latency per class in ns; ``null`` = one packet's serialisation time at that link's bandwidth
    (CODES' default, 726.6 ns at 5.25 GiB/s for 4 KiB)."""

    local: Optional[Duration] = Field(None, ge=0, le=MAX_LINK_DELAY)
    global_: Optional[Duration] = Field(None, ge=0, le=MAX_LINK_DELAY, alias="global")
    terminal: Optional[Duration] = Field(None, ge=0, le=MAX_LINK_DELAY)


class VcBuffer(_Model):
    """Bytes per virtual-channel buffer, per link class of the output port."""

    local: StrictInt = Field(16384, gt=0)
    global_: StrictInt = Field(16384, gt=0, alias="global")
    terminal: StrictInt = Field(32768, gt=0)


class Connections(_Model):
    """CODES binary connection files (``intra``: int src,dest,type records; ``inter``: int src,dest records).
    Relative paths are resolved against the scenario file's folder."""

    intra: Path
    inter: Path


class Topology(_Model):
    """1D Dragonfly (CODES dragonfly-dally)."""

    groups: StrictInt = Field(33, ge=1)
    routers_per_group: StrictInt = Field(8, ge=1)
    terminals_per_router: StrictInt = Field(4, ge=1)
    global_channels_per_router: StrictInt = Field(4, ge=1)
    bandwidth: Bandwidth = Field(default_factory=Bandwidth)
    latency: Latency = Field(default_factory=Latency)
    router_delay: Duration = Field(100.0, ge=0, le=MAX_LINK_DELAY)
    credit_delay: Optional[Duration] = Field(None, ge=0, le=MAX_LINK_DELAY,
                                             description="ns; null = 8 B at the local bandwidth (CODES)")
    vc_buffer: VcBuffer = Field(default_factory=VcBuffer)
    num_vcs: StrictInt = Field(4, ge=1, le=16)
    packet_size: StrictInt = Field(4096, ge=MIN_PACKET_SIZE, le=2**30)
    routing: Literal["minimal", "nonminimal", "adaptive", "prog-adaptive"] = "prog-adaptive"
    global_arrangement: Literal["codes"] = "codes"
    connections: Optional[Connections] = None

    @model_validator(mode="after")
    def _check(self) -> "Topology":
        small = [f"{name} ({size} B)" for name, size in (("local", self.vc_buffer.local),
                                                          ("global", self.vc_buffer.global_),
                                                          ("terminal", self.vc_buffer.terminal))
                 if size < self.packet_size]
        if small:
            raise ValueError(f"VC buffer smaller than one packet ({self.packet_size} B): {', '.join(small)}")
        big = [f"{name} ({size} B = {size // self.packet_size} packets)" for name, size in
               (("local", self.vc_buffer.local), ("global", self.vc_buffer.global_),
                ("terminal", self.vc_buffer.terminal)) if size // self.packet_size > MAX_CORE_INT32]
        if big:
            raise ValueError(f"VC buffer of more than {MAX_CORE_INT32} packets of {self.packet_size} B, what the "
                             f"engine counts per buffer: {', '.join(big)}")
        if self.routing != "minimal" and self.num_vcs < 4:
            raise ValueError(f"routing {self.routing!r} needs num_vcs >= 4 for deadlock freedom (got {self.num_vcs})")
        if self.routing == "minimal" and self.num_vcs < 3:
            raise ValueError(f"minimal routing needs num_vcs >= 3 for deadlock freedom (got {self.num_vcs})")
        if self.groups > 1 and self.groups - 1 > self.routers_per_group * self.global_channels_per_router:
            raise ValueError(
                f"{self.groups} groups need >= {self.groups - 1} global channels per group, but routers_per_group x "
                f"global_channels_per_router = {self.routers_per_group * self.global_channels_per_router}")
        return self

    @property
    def n_ports(self) -> int:
        """Router ports (computed from the shape, without building the Dragonfly)."""
        radix = (self.routers_per_group - 1) + self.global_channels_per_router + self.terminals_per_router
        return self.groups * self.routers_per_group * radix

    @property
    def shape(self) -> DragonflyShape:
        return DragonflyShape(self.groups, self.routers_per_group, self.terminals_per_router,
                              self.global_channels_per_router)

    @property
    def n_terminals(self) -> int:
        return self.groups * self.routers_per_group * self.terminals_per_router

    def link_latency(self) -> tuple[float, float, float]:
        """Effective (local, global, terminal) latencies in ns, CODES defaults filled in."""
        bw = self.bandwidth.as_tuple()
        lat = (self.latency.local, self.latency.global_, self.latency.terminal)
        return tuple(l if l is not None else bytes_to_ns(self.packet_size, b) for l, b in zip(lat, bw))

    def effective_credit_delay(self) -> float:
        return self.credit_delay if self.credit_delay is not None else bytes_to_ns(8, self.bandwidth.local)

    def build(self, base_dir: Path | None = None) -> Dragonfly:
        """The :class:`Dragonfly` this section describes (connection files read if given)."""
        if self.connections is None:
            return Dragonfly(self.shape)
        intra, inter = self.connections.intra, self.connections.inter
        if base_dir is not None:
            intra, inter = base_dir / intra, base_dir / inter
        for p in (intra, inter):
            if not Path(p).is_file():
                raise TopologyError(f"connection file not found: {p}" if not Path(p).exists() else
                                    f"connection file {p}: not a regular file; only regular files are read")
        return Dragonfly.from_codes_files(self.shape, intra, inter)


# ---------------------------------------------------------------------------------------------------------- workloads
class MilcWorkload(_Model):
    """SWM MILC: per iteration two halo half-steps (Irecv all, Isend all ``msg_size`` B to the 2*D face neighbours
    over ``dimension_sizes``, compute ``compute_delay`` cycles, Waitall), then two 8-B allreduces."""

    kind: Literal["milc"]
    dimension_sizes: list[StrictInt] = Field(min_length=1)
    msg_size: StrictInt = Field(49152, ge=0)
    compute_delay: float = Field(100, ge=0, le=MAX_CYCLES, description="CPU cycles per half-iteration (SWM)")
    max_dimension_distance: StrictInt = Field(1, ge=1)
    cpu_freq: float = Field(4e9, ge=MIN_FREQ, le=MAX_FREQ)
    allreduce_count: StrictInt = Field(2, ge=0)
    allreduce_size: StrictInt = Field(8, ge=0)


class LammpsWorkload(_Model):
    """SWM LAMMPS: 3D domain decomposition, ghost/k-space/FFT exchanges with sizes that vary step to step."""

    kind: Literal["lammps"]
    num_x_replicas: StrictInt = Field(1, ge=1)
    num_y_replicas: StrictInt = Field(1, ge=1)
    num_z_replicas: StrictInt = Field(1, ge=1)
    router_freq: float = Field(800e6, ge=MIN_FREQ, le=MAX_FREQ)
    cpu_freq: float = Field(4e9, ge=MIN_FREQ, le=MAX_FREQ)
    cpu_sim_speedup: float = Field(1e6, ge=1e-3, le=1e12)


class NearestNeighborWorkload(_Model):
    """SWM nearest_neighbor: Irecv+Isend of ``msg_size`` to every neighbour within ``max_dimension_distance``
    (3 in 3D = 26 neighbours, the 27-point stencil), then one Waitall."""

    kind: Literal["nearest_neighbor", "nn"]
    dimension_sizes: list[StrictInt] = Field(min_length=1)
    msg_size: StrictInt = Field(32768, ge=0)
    max_dimension_distance: StrictInt = Field(1, ge=1)
    compute_delay: float = Field(0, ge=0, le=MAX_CYCLES, description="CPU cycles per iteration")
    cpu_freq: float = Field(4e9, ge=MIN_FREQ, le=MAX_FREQ)
    iterations_per_sync: StrictInt = Field(1, ge=1, description="SWM iterations between Waitalls; one hybridsim "
                                     "iteration = one such group")


class UniformRandomWorkload(_Model):
    """Background traffic (CODES synthetic1): every ``interval`` ns each rank sends ``msg_size`` B to a uniformly
    drawn other rank of the job, no MPI protocol. Runs until every other job has finished."""

    kind: Literal["uniform_random", "synthetic1"]
    msg_size: StrictInt = Field(4096, gt=0)
    interval: Duration = Field(4000.0, ge=1.0, le=MAX_COMPUTE_DELAY, description="ns between messages, >= 1")


class AllreduceWorkload(_Model):
    """Allreduce only: ``count`` allreduces of ``size`` bytes per iteration (recursive doubling)."""

    kind: Literal["allreduce"]
    size: StrictInt = Field(8, ge=0)
    count: StrictInt = Field(1, ge=1)


class CustomWorkload(_Model):
    """A user workload: ``function`` = ``module:function`` of a generator of per-iteration operations
    (see :mod:`hybridsim.workloads`). ``params`` are passed to it as keyword arguments."""

    kind: Literal["custom"]
    function: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    params: dict[str, Any] = Field(default_factory=dict)


Workload = Annotated[
    Union[MilcWorkload, LammpsWorkload, NearestNeighborWorkload, UniformRandomWorkload, AllreduceWorkload,
          CustomWorkload],
    Field(discriminator="kind"),
]


class Compute(_Model):
    """Compute phase added at the start of every iteration of every rank (on top of the workload's own compute).
    The node model (``machine:``) may replace ``delay`` by kernels."""

    delay: Duration = Field(0.0, ge=0, le=MAX_COMPUTE_DELAY)
    kernels: Optional[list[dict[str, Any]]] = None


class Job(_Model):
    """One job. ``arrival`` and ``walltime`` matter only with a ``scheduler`` section: the job is submitted at
    ``arrival`` and the scheduler backfills on ``walltime`` (the user's run-time estimate; default
    :meth:`estimated_walltime`)."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")
    ranks: StrictInt = Field(ge=1)
    iterations: Optional[StrictInt] = Field(None, ge=1, description="null only for background (uniform_random) jobs")
    workload: Workload
    compute: Compute = Field(default_factory=Compute)
    arrival: Duration = Field(0.0, ge=0, le=MAX_VIRTUAL_TIME,
                              description="submit time, ns (needs a scheduler section when > 0)")
    walltime: Optional[Duration] = Field(None, le=MAX_VIRTUAL_TIME, description="run-time estimate for backfilling, "
                                                                               "ns; default: estimated_walltime()")
    swf_id: Optional[StrictInt] = Field(None, ge=0, le=2**62, description="the job's number in the SWF trace it was "
                                                                         "mapped from (scenario-from-swf); kept in "
                                                                         "jobs.parquet")

    @field_validator("walltime")
    @classmethod
    def _walltime(cls, v):
        if v is not None and v < 0:
            raise ValueError(f"walltime shorter than zero ({v:g} ns)")
        return v

    @model_validator(mode="after")
    def _check(self) -> "Job":
        w = self.workload
        if self.iterations is None and w.kind not in ("uniform_random", "synthetic1"):
            raise ValueError(f"job {self.name!r}: iterations is required for workload kind {w.kind!r}")
        if isinstance(w, (MilcWorkload, NearestNeighborWorkload)):
            prod = 1
            for d in w.dimension_sizes:
                if d < 1:
                    raise ValueError(f"job {self.name!r}: dimension_sizes must be >= 1, got {w.dimension_sizes}")
                prod *= d
            if prod != self.ranks:
                raise ValueError(
                    f"job {self.name!r}: product of dimension_sizes {w.dimension_sizes} = {prod} != ranks {self.ranks}")
        return self

    @property
    def is_background(self) -> bool:
        return self.workload.kind in ("uniform_random", "synthetic1")

    def estimated_walltime(self) -> float:
        """``walltime`` if set, else a generous estimate: 2 x iterations x (the workload kind's typical iteration
        time, :data:`hybridsim.workloads.ITERATION_TIME_NS`, plus the job's compute delay); ``inf`` for a background
        job (it runs until the others end)."""
        if self.walltime is not None:
            return self.walltime
        if self.is_background or self.iterations is None:
            return float("inf")
        from .workloads import ITERATION_TIME_NS

        return 2.0 * self.iterations * (ITERATION_TIME_NS[self.workload.kind] + self.compute.delay)


# ---------------------------------------------------------------------------------------------------------- placement
class Placement(_Model):
    """How ranks map to terminals. ``contiguous`` fills terminals in order, job after job; ``random`` shuffles all
    terminals; ``random-router`` shuffles whole routers; ``random-group`` shuffles whole groups (each job fills the
    terminals of its groups in order); ``file`` reads a CODES allocation file (line j = terminal ids of job j).
    ``seed`` defaults to the scenario seed."""

    policy: Literal["contiguous", "random", "random-router", "random-group", "file"] = "contiguous"
    seed: Optional[StrictInt] = None
    file: Optional[Path] = None

    @model_validator(mode="after")
    def _check(self) -> "Placement":
        if self.policy == "file" and self.file is None:
            raise ValueError("placement policy 'file' needs placement.file (a CODES allocation file)")
        if self.policy != "file" and self.file is not None:
            raise ValueError(f"placement.file is only used with policy 'file', not {self.policy!r}")
        return self


class SchedulerSection(_Model):
    """A job stream: jobs are submitted at their ``arrival``, wait in the ``queue`` (``fcfs``, or ``easy`` or
    ``conservative`` backfilling on walltimes) and get terminals by ``allocation`` (the placement policies; ``seed`` defaults to the
    scenario seed) when they start; their terminals are freed when they end (:mod:`hybridsim.scheduler`).
    ``slowdown_tau`` is the bounded-slowdown floor of the stream metrics. With ``kill_at_walltime`` a job still running
    at ``start + walltime`` is killed then, as a batch system does (its terminals freed, its outcome marked killed).
    """

    queue: str = Field("fcfs", description="queue policy: fcfs, easy, conservative, an installed hybridsim.queues "
                                           "entry point, or module:Class")
    allocation: Literal["contiguous", "random", "random-router", "random-group"] = "contiguous"
    seed: Optional[StrictInt] = Field(None, ge=0)
    slowdown_tau: Duration = Field(10_000.0, gt=0, le=MAX_VIRTUAL_TIME, description="bounded-slowdown floor, ns (default 10 us)")
    kill_at_walltime: StrictBool = Field(False, description="kill a job still running at start + walltime")

    @field_validator("queue")
    @classmethod
    def _queue(cls, v):
        from .queues import QUEUES  # the queue policies' registry: a name checked, nothing imported

        return QUEUES.check(v)


# ---------------------------------------------------------------------------------------------------------- backend
class EmbeddedBackend(_Model):
    debug: StrictBool = Field(False, description="check invariants (credits, buffers, byte conservation) as it runs")
    progress: StrictBool = True
    max_events: Optional[StrictInt] = Field(None, ge=1)
    end_time: Optional[Duration] = Field(None, gt=0, le=MAX_VIRTUAL_TIME, description="stop at this virtual time (ns)")
    core: Literal["auto", "native", "python"] = Field(
        "auto", description="engine core: native (C++, identical records, 13-16x the events/s), python (the reference), "
                            "auto (native when built, else python with one line on stderr)")


class Backend(_Model):
    """``embedded`` (default), ``remote`` (the embedded engine behind a ``hybridsim serve --engine HOST:PORT`` gRPC
    service; ``backend: {remote: HOST:PORT}`` selects it), or an installed backend plug-in (``codes``: the CODES
    bridge), checked against the backends' registry (:func:`backend_registry`). A plug-in owns its options:
    ``backend.<kind>`` is validated against its class's :attr:`~hybridsim_common.backend.Backend.options` model
    (errors located at the key), and every installed backend that declares options has them here, defaults if the
    file gives none (``scenario.backend.codes``)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, populate_by_name=True, allow_inf_nan=False)

    kind: str = "embedded"
    embedded: EmbeddedBackend = Field(default_factory=EmbeddedBackend)
    remote: Optional[str] = Field(None, pattern=r"^[^\s:]+:[0-9]{1,5}$|^\[[0-9a-fA-F:]+\]:[0-9]{1,5}$",
                                  description="HOST:PORT of a remote engine service")

    @model_validator(mode="before")
    @classmethod
    def _remote_implies_kind(cls, data):
        if isinstance(data, dict) and data.get("remote") and "kind" not in data:
            data = {**data, "kind": "remote"}
        return data

    @field_validator("kind")
    @classmethod
    def _kind(cls, v):
        return backend_registry().check(v)  # a name checked, nothing imported

    @model_validator(mode="wrap")
    @classmethod
    def _options(cls, data, handler):
        """Each ``backend.<kind>`` section of a plug-in validated by the plug-in's options model (its errors keep
        their location); an unknown section is an unknown key, with the closest backend name."""
        if not isinstance(data, dict):
            return handler(data)
        BACKENDS = backend_registry()
        declared = set(cls.model_fields)
        kind = data.get("kind", "remote" if data.get("remote") else "embedded")
        installed = [n for n in BACKENDS.names() if n not in declared]
        out, errors = dict(data), []

        def error(loc: tuple, msg: str) -> None:
            errors.append({"type": "value_error", "loc": loc, "input": data.get(loc[0]), "ctx": {"error": ValueError(msg)}})

        for name in installed:
            given = name in data
            try:
                options = BACKENDS.load(name).options
            except (ImportError, ValueError) as exc:  # a plug-in that does not load: its options cannot be checked
                if given or name == kind:
                    error((name,), str(exc))
                continue
            if options is None:
                if given:
                    error((name,), f"backend {name!r} takes no options")
                continue
            try:
                out[name] = options.model_validate({} if data.get(name) is None else data[name])
            except ValidationError as exc:
                for e in exc.errors():
                    if e["type"] == "extra_forbidden":  # named against the plug-in's model, not this section's
                        keys = list(options.model_fields)
                        error((name,) + e["loc"], f"unknown key {e['loc'][-1]!r}"
                                                  f"{plugins.did_you_mean(e['loc'][-1], keys)} (valid keys: "
                                                  f"{', '.join(keys)})")
                    else:
                        errors.append({**{k: e[k] for k in ("type", "input", "ctx") if k in e},
                                       "loc": (name,) + e["loc"]})
        valid = sorted(declared | set(installed))
        for key in data:
            if key not in declared and key not in installed:
                error((key,), f"unknown key {key!r}{plugins.did_you_mean(key, valid)} (valid keys: {', '.join(valid)})")
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        return handler(out)

    @model_validator(mode="after")
    def _check(self) -> "Backend":
        if self.kind == "remote" and not self.remote:
            raise ValueError("backend kind 'remote' needs backend.remote: HOST:PORT")
        return self


#: entry-point group of backend plug-ins (pyproject ``[project.entry-points."hybridsim.backends"]``)
BACKEND_ENTRY_POINT_GROUP = "hybridsim.backends"


def backend_registry() -> plugins.Registry:
    """The backends as the schema sees them: the built-in ones are :class:`Backend`'s own sections (``embedded``,
    ``remote``: their options are its fields), the others the ``hybridsim.backends`` entry points, whose classes'
    ``options`` validate their sections. (``BACKENDS`` in the runner is the same registry with the built-ins'
    classes, for the runner; the schema imports no backend.)"""
    return plugins.Registry(BACKEND_ENTRY_POINT_GROUP, "backend",
                            {name: None for name in Backend.model_fields if name != "kind"})


class Sampling(_Model):
    interval: Duration = Field(250_000.0, ge=MIN_SAMPLE_INTERVAL, le=MAX_COMPUTE_DELAY,
                               description="port sample window, ns (default 250 us, at least 1 us)")
    ports: StrictBool = Field(True, description="record per-port samples")


class Output(_Model):
    dir: Optional[Path] = Field(None, description="run directory; default results/<scenario file stem>")
    ports: StrictBool = Field(True, description="write ports.parquet")


# ---------------------------------------------------------------------------------------------------------- hybrid loop
class SurrogateSection(_Model):
    """The surrogate used by ``hybridsim run --mode hybrid``: a registered model name (``ridge``, ``smart``, ...) or
    a checkpoint folder written by ``hybridsim train``."""

    model: str = "ridge"
    config: dict[str, Any] = Field(default_factory=dict, description="constructor arguments for a named model")
    lookback: Optional[StrictInt] = Field(None, ge=1,
                                          description="history length given to the model (default: its own)")
    tune: StrictBool = Field(True, description="tune the model online on each truth window")
    volume_scaling: StrictBool = Field(True, description="predict volume-normalised iteration times, using the bytes "
                                                         "each iteration sends (known from the workload definition)")
    history: Literal["mixed", "truth", "window"] = Field(
        "truth", description="what a history model's look-back holds: mixed = the previous iterations, truth where "
                             "simulated and the model's own predictions where predicted (SMART's autoregressive "
                             "roll-out); truth = the latest simulated iterations only (window edges excluded); "
                             "window = those of the latest truth window only")


class ControllerSection(_Model):
    """The switching policy: a built-in name (pdes, surrogate, periodic, error-adaptive, budget, aligned, confident
    (the default: truth windows spaced so each job's completion error stays within ``params.target_error``, 2 %)), an
    installed ``hybridsim.policies`` entry point, or ``module:Class``; ``params`` go to its constructor."""

    policy: str = "confident"
    params: dict[str, Any] = Field(default_factory=dict)
    keep_background: Union[StrictBool, Literal["profile"]] = Field(
        True, description="what a predicted job leaves in the network: false = nothing (its ranks inject no packets); "
                          "true = its last simulated iteration's mean per-port load; profile = that iteration's "
                          "per-port load phase by phase, replayed over each predicted iteration at the predicted pace")
    sync: Literal["job", "skew", "rank"] = Field(
        "skew", description="job: a predicted iteration ends at the same time on every rank of the job (the latest "
                           "start plus the job's iteration time, the mean of the ranks' predictions), as "
                           "bulk-synchronous codes do; skew (default): every rank ends at its own start plus the "
                           "job's iteration time (never before the job's latest start), so the skew between ranks "
                           "that the last simulated iteration left is kept through the predicted iterations; "
                           "rank: each rank ends at its own start plus its own prediction")


# ---------------------------------------------------------------------------------------------------------- limits
class Limits(_Model):
    """Bounds on what a scenario asks for, checked before anything is built or written; raise them here or with
    ``--limit NAME=VALUE`` (which wins). The YAML text itself is bounded by ``yaml_bytes``/``yaml_depth``/
    ``yaml_nodes`` (:class:`hybridsim_common.yamlio.YamlLimits`), settable only with ``--limit``."""

    max_nodes: StrictInt = Field(100_000, ge=1, description="terminals of the topology")
    max_ports: StrictInt = Field(2_000_000, ge=1, description="router ports of the topology")
    max_rank_iterations: StrictInt = Field(10_000_000, ge=1, description="sum over jobs of ranks x iterations")
    max_ops: StrictInt = Field(1_000_000_000, ge=1, description="MPI ops the jobs' generators build, estimated from "
                                                              "the workload parameters (ranks x iterations x ops "
                                                              "per rank-iteration)")
    max_packets: StrictInt = Field(10_000_000_000, ge=1, description="packets the jobs send, estimated from the "
                                                                   "workload parameters")
    max_packets_per_message: StrictInt = Field(65_536, ge=1, description="ceil(message size / packet_size)")
    max_samples: StrictInt = Field(20_000_000, ge=1, description="port samples a run keeps: windows x ports (a run "
                                                              "that writes and reads none is not bounded by it)")
    max_offered_load: float = Field(1.0, gt=0, le=1e6, description="what a background (uniform_random) rank "
                                    "offers, msg_size / interval, as a fraction of its terminal link's bandwidth: "
                                    "above 1 its injection queue grows for as long as it runs")
    max_queued_packets: StrictInt = Field(4_000_000, ge=1, description="packets waiting in the network at once "
                                          "(injection queues and buffers), checked as the engine runs: memory")
    deadline: Optional[float] = Field(None, gt=0, description="wall-clock seconds; a run still going then fails "
                                                              "with reason 'deadline' (default: none)")


#: ``--limit`` names: the :class:`Limits` fields and the YAML bounds
LIMIT_NAMES = tuple(Limits.model_fields) + tuple(YamlLimits.CLI_NAMES)


def parse_limit_args(items: list[str] | None) -> dict:
    """``["max_nodes=2000000", "deadline=600"]`` -> dict; raises :class:`ScenarioError` naming the bad item."""
    out: dict = {}
    for item in items or ():
        name, eq, value = item.partition("=")
        name = name.strip()
        if not eq or name not in LIMIT_NAMES:
            raise ScenarioError(f"--limit {item!r}: expected NAME=VALUE with NAME one of {', '.join(LIMIT_NAMES)}")
        value = value.strip()
        if value.lower() in ("none", "null", ""):
            out[name] = None
            continue
        try:
            num = float(value)
        except ValueError:
            raise ScenarioError(f"--limit {item!r}: {value!r} is not a number") from None
        out[name] = int(num) if num.is_integer() and name != "deadline" else num
    yl = {k: v for k, v in out.items() if k in YamlLimits.CLI_NAMES}
    bad = [k for k, v in yl.items() if not (isinstance(v, int) and v >= 1)]
    if bad:
        raise ScenarioError(f"--limit {bad[0]}: expected a positive integer, got {out[bad[0]]!r}")
    try:
        Limits.model_validate({k: v for k, v in out.items() if k in Limits.model_fields})
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ScenarioError(f"--limit {err['loc'][0]}={out[err['loc'][0]]}: {err['msg']}") from None
    return out


def _job_costs(sc: "Scenario", out: list | None = None) -> list:
    """Per job, its :class:`~hybridsim.workloads.WorkloadCost` (``None`` where it cannot be known beforehand, for a
    job larger than the machine, which is refused on its own, and for parameters the workload cannot run, whose
    (field path, message) goes to ``out``)."""
    from .workloads import WorkloadError, estimate_cost

    n = sc.topology.n_terminals
    costs = []
    for i, j in enumerate(sc.jobs):
        try:
            costs.append(estimate_cost(j, sc.topology.packet_size) if j.ranks <= n else None)
        except WorkloadError as exc:
            costs.append(None)
            if out is not None:
                out.append((("jobs", i, "ranks"), f"job {j.name!r}: {exc}"))
    return costs


def _lower_bound_ns(sc: "Scenario", costs: list) -> tuple[float, int]:
    """A lower bound on the run's virtual duration from the jobs' arrivals, compute phases and injection alone (jobs
    run side by side), and the job that sets it. A rank's iteration takes at least its compute or the time its
    terminal link takes to inject the bytes it sends (``packets`` of ``packet_size`` at the injection bandwidth),
    whichever is longer (they may overlap)."""
    lb, longest = 0.0, 0
    for i, (j, c) in enumerate(zip(sc.jobs, costs)):
        if j.iterations is None:
            continue
        per_it = j.compute.delay + (max(c.compute_ns, bytes_to_ns(c.packets * sc.topology.packet_size,
                                                                  sc.topology.bandwidth.terminal))
                                    if c is not None else 0.0)
        end = (j.arrival if sc.is_stream else 0.0) + per_it * j.iterations
        if end > lb:
            lb, longest = end, i
    if sc.backend.kind == "embedded" and sc.backend.embedded.end_time is not None:
        lb = min(lb, sc.backend.embedded.end_time)
    return lb, longest


def limit_problems(sc: "Scenario") -> list[tuple[tuple, str]]:
    """(field path, message) for every limit the scenario exceeds; arithmetic on the parameters only (each
    workload's closed-form :func:`~hybridsim.workloads.estimate_cost`): nothing is built or generated."""
    lim, topo, out = sc.limits, sc.topology, []
    if topo.n_terminals > lim.max_nodes:
        out.append((("topology",), f"{topo.n_terminals} terminals ({topo.groups} groups x {topo.routers_per_group} "
                                   f"routers x {topo.terminals_per_router}) exceed limits.max_nodes = {lim.max_nodes}"))
    if topo.n_ports > lim.max_ports:
        out.append((("topology",), f"{topo.n_ports} router ports exceed limits.max_ports = {lim.max_ports}"))
    if not out and (topo.n_ports * topo.num_vcs > MAX_CORE_INT32 or topo.n_terminals > MAX_CORE_INT32):
        out.append((("topology",), f"{topo.n_terminals} terminals and {topo.n_ports} ports x {topo.num_vcs} VCs = "
                                   f"{topo.n_ports * topo.num_vcs} port VCs: the engine indexes at most "
                                   f"{MAX_CORE_INT32} of each, whatever limits.max_nodes and max_ports allow"))
    if out:  # the jobs' estimates below assume a machine of sane size
        return out
    work = [(i, j.ranks * j.iterations) for i, j in enumerate(sc.jobs) if j.iterations is not None]
    total = sum(w for _i, w in work)
    if total > lim.max_rank_iterations:
        big = max(work, key=lambda x: x[1])[0]
        out.append((("jobs", big, "iterations"), f"ranks x iterations over all jobs = {total} exceed "
                                                 f"limits.max_rank_iterations = {lim.max_rank_iterations}"))
        return out
    costs = _job_costs(sc, out)
    ps = topo.packet_size
    for i, (j, c) in enumerate(zip(sc.jobs, costs)):
        if c is None:
            continue
        npk = -(-c.max_message // ps)
        if npk > lim.max_packets_per_message:
            out.append((("jobs", i, "workload", c.message_field),
                        f"{c.max_message} B = {npk} packets of {ps} B per message (set by {c.message_field}), over "
                        f"limits.max_packets_per_message = {lim.max_packets_per_message}"))
        elif npk > lim.max_queued_packets:
            out.append((("jobs", i, "workload", c.message_field),
                        f"{c.max_message} B = {npk} packets of {ps} B per message (set by {c.message_field}): one "
                        f"message alone is over limits.max_queued_packets = {lim.max_queued_packets}"))
    for name, attr, what in (("max_ops", "ops", "MPI ops the generators build"),
                             ("max_packets", "packets", "packets the jobs send")):
        per_job = [(i, j.ranks * j.iterations * getattr(c, attr)) for i, (j, c) in enumerate(zip(sc.jobs, costs))
                   if c is not None and j.iterations is not None]
        total = sum(v for _i, v in per_job)
        if total > getattr(lim, name):
            big = max(per_job, key=lambda x: x[1])[0]
            out.append((("jobs", big, "workload"), f"about {total:.3g} {what} (ranks x iterations x "
                                                   f"{getattr(costs[big], attr):.3g} per rank-iteration for job "
                                                   f"{sc.jobs[big].name!r}), over limits.{name} = {getattr(lim, name)}"))
    out += offered_load_problems(sc)
    lb, longest = _lower_bound_ns(sc, costs)
    if lb > MAX_VIRTUAL_TIME:
        out.append((("jobs", longest), f"job {sc.jobs[longest].name!r} runs until at least {lb:.3g} ns (arrival, "
                                       f"compute and injection alone), past the {MAX_VIRTUAL_TIME:.3g} ns (~104 days) of "
                                       "virtual time a run can resolve to the ns"))
    if sc.sampling.ports:
        windows = lb / sc.sampling.interval
        if windows * topo.n_ports > lim.max_samples:
            # point at the sampling section if the file has one, else at the job whose compute sets the duration
            loc = ("sampling", "interval") if "sampling" in sc.model_fields_set else ("jobs", longest)
            out.append((loc, f"at least {windows:.3g} sample windows of sampling.interval = {sc.sampling.interval:g} "
                             f"ns (job {sc.jobs[longest].name!r}'s arrival, compute and injection alone) x {topo.n_ports} "
                             f"ports = {windows * topo.n_ports:.3g} port samples, over limits.max_samples = "
                             f"{lim.max_samples}"))
    longest_job = max((j.iterations for j in sc.jobs if j.iterations is not None), default=0)
    if sc.surrogate.lookback is not None and sc.surrogate.lookback > max(longest_job, 1):
        out.append((("surrogate", "lookback"), f"a look-back of {sc.surrogate.lookback} iterations is longer than "
                                               f"the longest job ({longest_job} iterations): it can never fill, and "
                                               "the hybrid loop would allocate it per rank"))
    emb = sc.backend.embedded
    if sc.backend.kind != "codes" and all(j.is_background for j in sc.jobs) and emb.end_time is None and \
            emb.max_events is None:
        out.append((("jobs",), "only background jobs, which run until every other job has ended: set "
                               "backend.embedded.end_time (or max_events) to end the run"))
    return out


def backend_problems(sc: "Scenario") -> list[tuple[tuple, str]]:
    """(field path, message) for what the scenario's backend refuses in it (its
    :meth:`~hybridsim_common.backend.Backend.scenario_problems`: CODES refuses job streams, for one)."""
    registry = backend_registry()
    if sc.backend.kind in registry.builtin:  # the built-ins' constraints are this schema's own
        return []
    try:
        cls = registry.load(sc.backend.kind)
    except (ImportError, ValueError) as exc:
        return [(("backend", "kind"), str(exc))]
    return list(cls.scenario_problems(sc))


def offered_load_problems(sc: "Scenario") -> list[tuple[tuple, str]]:
    """(field path, message) for each background job whose ranks offer more than their terminal link carries:
    ``msg_size`` B every ``interval`` ns against ``topology.bandwidth.terminal`` (GiB/s), over
    ``limits.max_offered_load``. Every rank injects through its own terminal link, so no placement changes this."""
    from hybridsim_common.units import GIB

    out = []
    cap = sc.topology.bandwidth.terminal * GIB / 1e9  # B/ns
    for i, j in enumerate(sc.jobs):
        w = j.workload
        if not isinstance(w, UniformRandomWorkload) or j.ranks < 2:
            continue
        offered = w.msg_size / w.interval  # B/ns per rank
        load = offered / cap
        if load > sc.limits.max_offered_load:
            need = w.msg_size / (cap * sc.limits.max_offered_load)
            out.append((("jobs", i, "workload", "interval"),
                        f"background job {j.name!r} offers {w.msg_size} B every {w.interval:g} ns per rank = "
                        f"{offered:.4g} B/ns ({offered * 1e9 / GIB:.4g} GiB/s), {load:.3g} x the "
                        f"{sc.topology.bandwidth.terminal:g} GiB/s ({cap:.4g} B/ns) its terminal link carries, over "
                        f"limits.max_offered_load = {sc.limits.max_offered_load:g}: its injection queues would grow "
                        f"without bound; set interval >= {need:.4g} ns or a smaller msg_size"))
    return out




def stream_problems(sc: "Scenario") -> list[tuple[tuple, str]]:
    """(field path, message) for arrivals, walltimes and sizes a job stream cannot run (and arrivals without one)."""
    out = []
    if sc.scheduler is None:
        for i, j in enumerate(sc.jobs):
            if j.arrival > 0:
                out.append((("jobs", i, "arrival"), f"job {j.name!r} arrives at {j.arrival:g} ns: arrivals need a "
                                                     "scheduler section (scheduler: {queue: fcfs})"))
        return out
    if sc.placement.policy == "file":
        out.append((("placement", "policy"), "placement 'file' cannot be used with a scheduler: the scheduler "
                                             "allocates terminals when a job starts (drop the placement section and "
                                             "set scheduler.allocation)"))
    n = sc.topology.n_terminals
    held = sum(j.ranks for j in sc.jobs if j.is_background)
    for i, j in enumerate(sc.jobs):
        if j.is_background and j.arrival > 0:
            out.append((("jobs", i, "arrival"), f"background job {j.name!r} runs until every other job has ended, "
                                                "so it cannot arrive later: drop its arrival"))
        room = n - (0 if j.is_background else held)
        if j.ranks > room:
            what = f"{n} terminals" + (f" minus {held} held by background jobs" if held and not j.is_background else "")
            out.append((("jobs", i, "ranks"), f"job {j.name!r} larger than the machine: {j.ranks} ranks, {what}"))
    if held > n:
        out.append((("jobs",), f"background jobs need {held} ranks but the topology has only {n} terminals"))
    return out


# ---------------------------------------------------------------------------------------------------------- scenario
class Scenario(_Model):
    name: Optional[str] = None
    description: Optional[str] = None
    seed: StrictInt = Field(1, ge=0)
    topology: Topology = Field(default_factory=Topology)
    jobs: list[Job] = Field(min_length=1)
    placement: Placement = Field(default_factory=Placement)
    scheduler: Optional[SchedulerSection] = None
    backend: Backend = Field(default_factory=Backend)
    sampling: Sampling = Field(default_factory=Sampling)
    output: Output = Field(default_factory=Output)
    surrogate: SurrogateSection = Field(default_factory=SurrogateSection)
    controller: ControllerSection = Field(default_factory=ControllerSection)
    # the node model (roofline / energy) validates this section itself (hybridsim.energy)
    machine: Optional[dict[str, Any]] = None
    limits: Limits = Field(default_factory=Limits)

    # where the scenario came from (not part of the schema): see the ``provenance`` property
    _provenance: Provenance = PrivateAttr(default_factory=Provenance)

    @model_validator(mode="after")
    def _check(self) -> "Scenario":
        dups = sorted(n for n, k in collections.Counter(j.name for j in self.jobs).items() if k > 1)
        if dups:
            raise ValueError(f"duplicate job names: {', '.join(dups)}")
        if self.scheduler is not None:
            return self
        total = sum(j.ranks for j in self.jobs)
        if total > self.topology.n_terminals:
            raise ValueError(
                f"the jobs need {total} ranks but the topology has only {self.topology.n_terminals} terminals "
                f"({self.topology.groups} groups x {self.topology.routers_per_group} routers x "
                f"{self.topology.terminals_per_router} terminals)")
        return self

    @property
    def provenance(self) -> Provenance:
        """The file, error name and YAML tree this scenario was loaded from (kept by ``model_copy``)."""
        return self._provenance

    @provenance.setter
    def provenance(self, value: Provenance) -> None:
        self._provenance = value

    @property
    def base_dir(self) -> Path:
        return self._provenance.base_dir

    def resolve(self, path: Path | str) -> Path:
        p = Path(path)
        return p if p.is_absolute() else self.base_dir / p

    def build_topology(self) -> Dragonfly:
        return self.topology.build(self.base_dir)

    @property
    def placement_seed(self) -> int:
        return self.placement.seed if self.placement.seed is not None else self.seed

    @property
    def scheduler_seed(self) -> int:
        sec = self.scheduler
        return sec.seed if sec is not None and sec.seed is not None else self.seed

    @property
    def is_stream(self) -> bool:
        """Jobs start when the scheduler says (``scheduler`` section), not all at t = 0 on ``placement``."""
        return self.scheduler is not None

    def job_index(self, name: str) -> int:
        for i, j in enumerate(self.jobs):
            if j.name == name:
                return i
        raise KeyError(name)

    def where(self, loc: tuple) -> str:
        """``file:line:column`` of the field at ``loc`` (as near as the YAML goes), or the file name."""
        return self._provenance.where(loc)

    def error(self, loc: tuple, message: str) -> "ScenarioError":
        """A :class:`ScenarioError` located at the field ``loc``."""
        return ScenarioError(f"{self.where(loc)}: {'.'.join(str(p) for p in loc)}: {message}")


# ---------------------------------------------------------------------------------------------------------- loading
def format_validation_error(exc: ValidationError, root: yaml.Node | None, filename: str) -> list[str]:
    """Located messages of a scenario's validation error (:func:`hybridsim_common.yamlio.format_validation_error`)."""
    return yamlio.format_validation_error(exc, root, filename, Scenario)


def parse_scenario(text: str, filename: str = "<string>", limits: dict | None = None,
                   yaml_limits: YamlLimits | None = None, *, path: Path | None = None) -> Scenario:
    """Parse and validate scenario YAML text, then check it against its limits (``limits``: ``--limit`` overrides,
    which win over the file's ``limits:`` section; ``yaml_limits``: bounds on the text, default
    :class:`~hybridsim_common.yamlio.YamlLimits`, e.g. a server's own; ``path``: the file it was read from, for
    :attr:`Scenario.provenance`). Raises :class:`ScenarioError`. The provenance keeps the text, not the YAML tree
    (:class:`~hybridsim_common.yamlio.YamlText`): a stream's tree is composed again only if a message needs a place."""
    limits = limits or {}
    yl = (yaml_limits or YamlLimits()).updated(limits)
    # for performance (see yamlio.gc_paused): the YAML tree, the data and a stream's thousands of job models are built
    # with the collector paused, and the tree is gone before it resumes
    with yamlio.gc_paused():
        try:
            data, root = yamlio.load(text, filename, yl)
        except YamlInputError as exc:
            raise ScenarioError(str(exc), exc.problems) from None
        if data is None:
            raise ScenarioError(f"{filename}:1:1: empty scenario file (expected a mapping with at least 'jobs')")
        if not isinstance(data, dict):
            raise ScenarioError(f"{_where(filename, root)}: <top level>: expected a mapping of sections, got "
                                f"{type(data).__name__}")
        del root  # for memory: the provenance composes it again if a message needs it
        prov = Provenance(path=path, filename=filename, text=yamlio.YamlText(text, yl))
        overrides = {k: v for k, v in limits.items() if k in Limits.model_fields}
        if overrides:
            file_limits = data.get("limits") or {}
            if isinstance(file_limits, dict):
                data = {**data, "limits": {**file_limits, **overrides}}
        try:
            scenario = Scenario.model_validate(data)
        except ValidationError as exc:
            problems = format_validation_error(exc, prov.root, filename)
            raise ScenarioError("\n".join(problems), problems) from None
        del data
    scenario.provenance = prov
    problems = [f"{scenario.where(loc)}: {'.'.join(str(p) for p in loc)}: {msg}"
                for loc, msg in stream_problems(scenario) + limit_problems(scenario) + backend_problems(scenario)]
    if problems:
        raise ScenarioError("\n".join(problems), problems)
    return scenario


def load_scenario(path: str | os.PathLike, check_files: bool = True, limits: dict | None = None) -> Scenario:
    """Load a scenario file; with ``check_files`` also build the topology (connection files) and the placement, so
    every error a run would meet is raised here, before anything is written. ``limits``: ``--limit`` overrides."""
    path = Path(path)
    try:
        text = yamlio.read_text(path, YamlLimits().updated(limits or {}))
    except YamlInputError as exc:
        raise ScenarioError(str(exc), exc.problems) from None
    scenario = parse_scenario(text, str(path), limits, path=path.resolve())
    if check_files:
        check_scenario_files(scenario, str(path))
    return scenario


def check_scenario_files(scenario: Scenario, filename: str, text: str | None = None) -> None:
    """Build topology and placement; turn their errors into located :class:`ScenarioError`. (``text`` is accepted for
    callers that have it; the tree :func:`parse_scenario` kept is what locates errors.)"""
    from .placement import PlacementError, place_jobs

    if scenario.provenance.filename is None:
        scenario.provenance = dataclasses.replace(scenario.provenance, filename=filename)
    try:
        topo = scenario.build_topology()
    except TopologyError as exc:
        raise scenario.error(("topology", "connections"), str(exc)) from None
    if scenario.is_stream:
        _dry_run_stream(scenario)
    else:
        try:
            place_jobs(scenario, topo)
        except PlacementError as exc:
            raise scenario.error(("placement",), str(exc)) from None
    if scenario.machine is not None or any(j.compute.kernels for j in scenario.jobs):
        from .energy.roofline import check_scenario

        check_scenario(scenario)


def stream_jobs(scenario: Scenario, run_times=None):
    """The scenario's jobs as :class:`hybridsim.scheduler.StreamJob` (job id = index; run time ``run_times[i]``,
    default the walltime)."""
    from .scheduler import StreamJob

    out = []
    for i, j in enumerate(scenario.jobs):
        wt = j.estimated_walltime()
        out.append(StreamJob(i, j.ranks, j.arrival, wt, wt if run_times is None else run_times[i]))
    return out


def _dry_run_stream(scenario: Scenario) -> None:
    """Schedule the stream with run time = walltime, so a job that can never start fails here, before a run."""
    from .scheduler import SchedulerError, dry_run

    sec = scenario.scheduler
    try:
        dry_run(stream_jobs(scenario), scenario.topology.shape, sec.queue, sec.allocation, scenario.scheduler_seed)
    except SchedulerError as exc:
        raise scenario.error(("scheduler",), str(exc)) from None


def scenario_to_dict(scenario: Scenario) -> dict:
    """JSON-able resolved scenario (aliases, paths as strings)."""
    return scenario.model_dump(mode="json", by_alias=True)

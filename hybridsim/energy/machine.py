"""Machine descriptions: what one compute node (one rank of a job) can do and what it costs in energy.

A machine file is YAML. Where its fields overlap Kerncraft's machine files they have Kerncraft's names (``model
name``, ``clock``, ``sockets``, ``cores per socket``, ``FLOPs per cycle`` with ``SP``/``DP`` and ``total``/``FMA``/
``ADD``/``MUL``, ``memory hierarchy`` with one entry per ``level``); the energy and GPU parts are hybridsim's own.

Quantities are plain numbers in SI base units (Hz, B/s, FLOP/s, J, W, s) or strings with a unit and an optional
prefix: ``"2.6 GHz"``, ``"68 GB/s"``, ``"25 GiB/s"``, ``"9.7 TFLOP/s"``, ``"120 pJ"``, ``"45 W"``, ``"5 us"``.

Bandwidths, peaks and static powers describe the **whole node** (all sockets, all cores), because one rank of a job
runs on one node (one Dragonfly terminal) and its kernels use the whole node.

A scenario's ``machine:`` section holds either a machine description inline or ``{file: path}`` (relative to the
scenario file). Errors name the file, line, column and field (:class:`MachineError`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

from hybridsim_common import yamlio
from hybridsim_common.yamlio import Provenance, ScenarioError
from hybridsim_common.yamlio import locate as _node_for

PRECISIONS = ("DP", "SP", "HP")
Precision = Literal["DP", "SP", "HP"]

#: Kerncraft calls main memory ``MEM``; hybridsim's canonical name is ``DRAM`` (GPUs: device memory, also ``HBM``).
LEVEL_SYNONYMS = {"MEM": "DRAM", "HBM": "DRAM", "GMEM": "DRAM"}


class MachineError(ScenarioError):
    """A machine description (or a kernel referring to it) is invalid. ``str()`` is the full located message."""


# --------------------------------------------------------------------------------------------------------- quantities
_PREFIX = {"": 1.0, "p": 1e-12, "n": 1e-9, "u": 1e-6, "µ": 1e-6, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9,
           "T": 1e12, "P": 1e15, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_UNITS = {
    "frequency": ("Hz",),
    "bandwidth": ("B/s",),
    "flops": ("FLOP/s", "FLOPS", "flop/s", "Flop/s", "FLOP/S"),
    "energy": ("J",),
    "power": ("W",),
    "time": ("s",),
    "bytes": ("B",),
}
_QTY_RE = re.compile(r"^\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*(\S*)\s*$")


def parse_quantity(value: Any, kind: str) -> float:
    """``"2.6 GHz"`` -> 2.6e9 for kind ``frequency``; numbers pass through (SI base units)."""
    units = _UNITS[kind]
    if isinstance(value, bool):
        raise ValueError(f"expected a {kind} (a number or a string like '1 {units[0]}'), got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _QTY_RE.match(value)
        if m:
            number, unit = float(m.group(1)), m.group(2)
            if unit == "":
                return number
            for u in units:
                if unit.endswith(u) and unit[: len(unit) - len(u)] in _PREFIX:
                    return number * _PREFIX[unit[: len(unit) - len(u)]]
        raise ValueError(f"expected a {kind} like '2 G{units[0]}' (unit {units[0]} with an optional prefix "
                         f"p n u m k M G T Ki Mi Gi Ti), got {value!r}")
    raise ValueError(f"expected a {kind} (a number or a string with unit {units[0]}), got {type(value).__name__}")


def _q(kind: str):
    return BeforeValidator(lambda v: parse_quantity(v, kind))


Frequency = Annotated[float, _q("frequency"), Field(gt=0)]
BandwidthQ = Annotated[float, _q("bandwidth"), Field(gt=0)]
FlopRate = Annotated[float, _q("flops"), Field(gt=0)]
Energy = Annotated[float, _q("energy"), Field(ge=0)]
Power = Annotated[float, _q("power"), Field(ge=0)]
Seconds = Annotated[float, _q("time"), Field(ge=0)]


# --------------------------------------------------------------------------------------------------------- models
class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class FlopsPerCycle(_M):
    """Kerncraft's per-precision entry: ``total`` FLOPs per cycle per core (per SM on a GPU); ``FMA``/``ADD``/``MUL``
    are informational. A bare number means ``{total: n}``."""

    total: float = Field(gt=0)
    FMA: Optional[float] = Field(None, ge=0)
    ADD: Optional[float] = Field(None, ge=0)
    MUL: Optional[float] = Field(None, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, v):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return {"total": v}
        return v


class MemoryLevel(_M):
    """One level of the memory hierarchy: the sustained bandwidth of transfers into the core from it, summed over the
    node, and the dynamic energy of moving one byte through it."""

    level: str = Field(min_length=1)
    bandwidth: BandwidthQ
    energy_per_byte: Energy = Field(0.0, alias="energy per byte")
    size_per_group: Optional[Annotated[float, _q("bytes"), Field(gt=0)]] = Field(
        None, alias="size per group", description="informational (Kerncraft)")
    cores_per_group: Optional[int] = Field(None, ge=1, alias="cores per group", description="informational")

    @field_validator("level")
    @classmethod
    def _canon(cls, v: str) -> str:
        return LEVEL_SYNONYMS.get(v.strip(), v.strip())


def _unique_levels(levels: list[MemoryLevel], where: str) -> None:
    names = [lv.level for lv in levels]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError(f"{where}: level(s) {', '.join(dups)} given twice (MEM, HBM and DRAM are the same level)")


class StaticPower(_M):
    """P0: power drawn whatever the node does, for the whole node (all sockets / DIMMs)."""

    package: Power = 0.0
    DRAM: Power = 0.0

    @property
    def total(self) -> float:
        return self.package + self.DRAM


class Network(_M):
    energy_per_byte_per_hop: Energy = Field(0.0, alias="energy per byte per hop",
                                            description="J per byte per link traversed (terminal links included)")


class GPU(_M):
    """Accelerators of one node (``count`` identical devices; a GPU kernel uses all of them)."""

    model_name: str = Field("GPU", alias="model name")
    count: int = Field(1, ge=1)
    SM_count: int = Field(alias="SM count", ge=1)
    clock: Frequency
    FLOPs_per_cycle: dict[Precision, FlopsPerCycle] = Field(default_factory=dict, alias="FLOPs per cycle",
                                                            description="per SM")
    peak_flops: dict[Precision, FlopRate] = Field(default_factory=dict, alias="peak FLOP/s",
                                                  description="per device; overrides FLOPs per cycle")
    memory_bandwidth: BandwidthQ = Field(alias="memory bandwidth", description="device memory, per device")
    memory_energy_per_byte: Energy = Field(0.0, alias="memory energy per byte",
                                           description="informational; GPU energy comes from idle/active power")
    memory_hierarchy: list[MemoryLevel] = Field(default_factory=list, alias="memory hierarchy",
                                                description="extra levels (e.g. L2), bandwidth per device")
    idle_power: Power = Field(alias="idle power", description="per device")
    active_power: Power = Field(alias="active power", description="per device, while a kernel runs")
    host_link_bandwidth: BandwidthQ = Field(alias="host link bandwidth", description="per device, per direction")
    launch_latency: Seconds = Field(0.0, alias="launch latency", description="per kernel launch")

    @model_validator(mode="after")
    def _check(self) -> "GPU":
        if not self.FLOPs_per_cycle and not self.peak_flops:
            raise ValueError("give 'FLOPs per cycle' (per SM) or 'peak FLOP/s' for at least one precision")
        if self.active_power < self.idle_power:
            raise ValueError(f"active power ({self.active_power} W) is below idle power ({self.idle_power} W)")
        _unique_levels(self.memory_hierarchy + [MemoryLevel(level="DRAM", bandwidth=self.memory_bandwidth)],
                       "memory hierarchy + memory bandwidth")
        return self

    # derived
    def peak(self, precision: str) -> float:
        """Node peak FLOP/s (all devices)."""
        if precision in self.peak_flops:
            return self.peak_flops[precision] * self.count
        if precision in self.FLOPs_per_cycle:
            return self.FLOPs_per_cycle[precision].total * self.SM_count * self.clock * self.count
        raise KeyError(precision)

    @property
    def precisions(self) -> list[str]:
        return [p for p in PRECISIONS if p in self.peak_flops or p in self.FLOPs_per_cycle]

    def levels(self) -> dict[str, float]:
        """Level name -> node bandwidth (B/s), device memory as ``DRAM``."""
        out = {lv.level: lv.bandwidth * self.count for lv in self.memory_hierarchy}
        out["DRAM"] = self.memory_bandwidth * self.count
        return out


class Machine(_M):
    model_name: str = Field("unnamed machine", alias="model name")
    sockets: int = Field(1, ge=1)
    cores_per_socket: int = Field(alias="cores per socket", ge=1)
    clock: Frequency
    FLOPs_per_cycle: dict[Precision, FlopsPerCycle] = Field(default_factory=dict, alias="FLOPs per cycle",
                                                            description="per core")
    peak_flops: dict[Precision, FlopRate] = Field(default_factory=dict, alias="peak FLOP/s",
                                                  description="node peak; overrides FLOPs per cycle")
    memory_hierarchy: list[MemoryLevel] = Field(alias="memory hierarchy", min_length=1)
    energy_per_flop: dict[Precision, Energy] = Field(default_factory=dict, alias="energy per flop")
    static_power: StaticPower = Field(default_factory=StaticPower, alias="static power")
    network: Network = Field(default_factory=Network)
    gpu: Optional[GPU] = None
    compute_model: Literal["roofline", "ecm"] = Field("roofline", alias="compute model")
    source: Optional[str] = Field(None, description="where the numbers come from (free text)")

    @model_validator(mode="after")
    def _check(self) -> "Machine":
        if not self.FLOPs_per_cycle and not self.peak_flops:
            raise ValueError("give 'FLOPs per cycle' (per core) or 'peak FLOP/s' for at least one precision")
        _unique_levels(self.memory_hierarchy, "memory hierarchy")
        return self

    # ---------------------------------------------------------------------------------------------- derived values
    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def precisions(self) -> list[str]:
        return [p for p in PRECISIONS if p in self.peak_flops or p in self.FLOPs_per_cycle]

    def peak(self, precision: str = "DP") -> float:
        """Node peak FLOP/s of ``precision``."""
        if precision in self.peak_flops:
            return self.peak_flops[precision]
        if precision in self.FLOPs_per_cycle:
            return self.FLOPs_per_cycle[precision].total * self.cores * self.clock
        raise KeyError(precision)

    def tau_flop(self, precision: str = "DP") -> float:
        """Seconds per FLOP at peak."""
        return 1.0 / self.peak(precision)

    def levels(self) -> dict[str, float]:
        """Level name -> node bandwidth in B/s, in file order."""
        return {lv.level: lv.bandwidth for lv in self.memory_hierarchy}

    def tau(self, level: str) -> float:
        """Seconds per byte through ``level``."""
        return 1.0 / self.levels()[level]

    def eps_flop(self, precision: str = "DP") -> float:
        return self.energy_per_flop.get(precision, 0.0)

    def eps_level(self, level: str) -> float:
        for lv in self.memory_hierarchy:
            if lv.level == level:
                return lv.energy_per_byte
        raise KeyError(level)

    def ridge(self, level: str = "DRAM", precision: str = "DP") -> float:
        """Arithmetic intensity (FLOP/B against ``level``) where the roofline turns from memory- to compute-bound."""
        return self.peak(precision) / self.levels()[level]

    def describe(self) -> dict:
        """Derived figures for ``hybridsim machine show``."""
        out: dict[str, Any] = {
            "model name": self.model_name, "cores": self.cores, "clock_GHz": self.clock / 1e9,
            "peak_GFLOPs": {p: self.peak(p) / 1e9 for p in self.precisions},
            "tau_flop_ps": {p: self.tau_flop(p) * 1e12 for p in self.precisions},
            "levels": {}, "P0_W": {"package": self.static_power.package, "DRAM": self.static_power.DRAM},
            "energy_per_flop_pJ": {p: self.eps_flop(p) * 1e12 for p in self.precisions},
            "compute model": self.compute_model,
            "network_pJ_per_byte_hop": self.network.energy_per_byte_per_hop * 1e12,
        }
        for name, bw in self.levels().items():
            out["levels"][name] = {"bandwidth_GBs": bw / 1e9, "tau_ps_per_B": 1e12 / bw,
                                   "energy_pJ_per_B": self.eps_level(name) * 1e12,
                                   "ridge_FLOP_per_B": {p: self.ridge(name, p) for p in self.precisions}}
        if self.gpu is not None:
            g = self.gpu
            out["gpu"] = {
                "model name": g.model_name, "count": g.count,
                "peak_GFLOPs": {p: g.peak(p) / 1e9 for p in g.precisions},
                "levels": {n: {"bandwidth_GBs": bw / 1e9, "tau_ps_per_B": 1e12 / bw,
                               "ridge_FLOP_per_B": {p: g.peak(p) / bw for p in g.precisions}}
                           for n, bw in g.levels().items()},
                "host_link_GBs": g.host_link_bandwidth * g.count / 1e9,
                "idle_W": g.idle_power * g.count, "active_W": g.active_power * g.count,
            }
        return out


def _compose(text: str, filename: str):
    """``(root node, data)`` of a machine file's text, read with the scenario files' YAML bounds and checks."""
    try:
        data, root = yamlio.load(text, filename)
    except yamlio.YamlInputError as exc:
        raise MachineError(str(exc), exc.problems) from None
    return root, data


def validate_machine(data: Any, root: yaml.Node | None = None, filename: str = "<machine>",
                     prefix: tuple = ()) -> Machine:
    """Validate a machine mapping; errors located in ``root`` (the YAML tree the data came from) under ``prefix``."""
    if not isinstance(data, dict):
        node = _node_for(root, prefix) if root is not None else None
        where = f"{filename}:{node.start_mark.line + 1}:{node.start_mark.column + 1}" if node is not None else filename
        raise MachineError(f"{where}: {'.'.join(map(str, prefix)) or '<top level>'}: expected a mapping describing "
                           f"the machine, got {type(data).__name__}")
    try:
        return Machine.model_validate(data)
    except ValidationError as exc:
        problems = yamlio.format_validation_error(exc, root, filename, Machine, prefix)
        raise MachineError("\n".join(problems), problems) from None


def parse_machine(text: str, filename: str = "<string>") -> Machine:
    root, data = _compose(text, filename)
    if data is None:
        raise MachineError(f"{filename}:1:1: empty machine file")
    return validate_machine(data, root, filename)


def load_machine(path: str | Path) -> Machine:
    """Load a machine YAML file. A scenario file with a ``machine:`` section is accepted too."""
    path = Path(path)
    try:
        text = yamlio.read_text(path)
    except yamlio.YamlInputError as exc:
        raise MachineError(str(exc), exc.problems) from None
    root, data = _compose(text, str(path))
    if isinstance(data, dict) and "jobs" in data and "memory hierarchy" not in data:
        # a scenario file: its machine: section (a file it names is relative to the scenario)
        prov = Provenance(path=path.resolve(), filename=str(path), root=root)
        return machine_from_section(data.get("machine"), prov, required=True)
    if data is None:
        raise MachineError(f"{path}:1:1: empty machine file")
    return validate_machine(data, root, str(path))


def _scenario_text(scenario) -> tuple[yaml.Node | None, str]:
    """The scenario's YAML tree and file name (to locate errors)."""
    return scenario.provenance.root, scenario.provenance.name


def machine_for_scenario(scenario, required: bool = False) -> Machine | None:
    """The :class:`Machine` of a scenario's ``machine:`` section (inline or ``{file: path}``), or ``None``."""
    return machine_from_section(scenario.machine, scenario.provenance, required)


def machine_from_section(sec, prov: Provenance, required: bool = False) -> Machine | None:
    """The :class:`Machine` of a ``machine:`` section (inline or ``{file: path}`` relative to ``prov.base_dir``) of
    the document ``prov`` describes, or ``None``."""
    if sec is None:
        if required:
            raise MachineError("the scenario has no machine: section")
        return None
    root, filename = prov.root, prov.name
    if not isinstance(sec, dict):
        return validate_machine(sec, root, filename, prefix=("machine",))
    if "file" in sec:
        if len(sec) > 1:
            extra = sorted(k for k in sec if k != "file")
            raise MachineError(f"{prov.where_key(('machine', extra[0]))}: machine: 'file' cannot be combined with other "
                               f"keys ({', '.join(extra)}); put them in the machine file")
        f = sec["file"]
        if not isinstance(f, str):
            raise MachineError(f"{filename}: machine.file: expected a path, got {f!r}")
        path = Path(f) if Path(f).is_absolute() else prov.base_dir / f
        if not path.is_file():
            raise MachineError(f"{prov.where(('machine', 'file'))}: machine.file: machine file not found: {path}")
        return load_machine(path)
    return validate_machine(sec, root, filename, prefix=("machine",))


# --------------------------------------------------------------------------------------------------------- writing
def machine_to_dict(machine: Machine) -> dict:
    """JSON/YAML-able dict with the file's key names (plain SI numbers)."""
    d = machine.model_dump(by_alias=True, exclude_none=True, mode="json")

    def clean(x):
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, list):
            return [clean(v) for v in x]
        if isinstance(x, float) and math.isfinite(x) and x == int(x) and abs(x) < 1e15:
            return int(x)
        return x

    return clean(d)


def machine_to_yaml(machine: Machine, header: str = "") -> str:
    body = yaml.safe_dump(machine_to_dict(machine), sort_keys=False, default_flow_style=None, width=120)
    lines = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
    return lines + "# quantities in SI base units (Hz, B/s, FLOP/s, J, W, s)\n" + body

"""The CODES backend's options (``backend.codes`` in a scenario) and the scenarios it refuses before anything runs.

:class:`CodesOptions` is :attr:`CodesBackend.options <codes_bridge.backend.CodesBackend.options>`: the scenario schema
validates ``backend.codes`` against it (hybridsim/scenario.py names no backend; a backend plug-in owns its options),
with errors located at the key. :func:`scenario_problems` is what ``validate`` and ``run`` refuse for CODES: a job
stream (CODES starts every job at t = 0 on fixed terminals) and more pre-allocated samples than ``limits.max_samples``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import Field, StrictInt, field_validator, model_validator

from hybridsim.scenario import Duration, _Model

#: why the codes backend refuses job streams (model-net-mpi-replay starts every job's ranks at t = 0 on fixed LPs)
CODES_NO_STREAMS = ("job streams cannot run on the codes backend: CODES' model-net-mpi-replay starts every job at "
                    "t = 0 on terminals fixed for the whole run (no job start times or arrivals, no reuse of a "
                    "finished job's terminals); use backend.kind: embedded")

#: option keys only hybrid runs read: a pure run is the same whatever they say (a bench judges a scenario's
#: stand-in settings against one pure run)
HYBRID_ONLY = ("standin", "standin_scale")


class CodesOptions(_Model):
    bin_dir: Optional[Path] = Field(None, description="folder with model-net-mpi-replay; default $CODES_BIN_DIR")
    executable: str = "model-net-mpi-replay"
    mpirun: str = "mpirun"
    np: StrictInt = Field(1, ge=1)
    synch: Literal["sequential", "optimistic"] = "sequential"
    extra_args: list[str] = Field(default_factory=list)
    timeout: Optional[Duration] = Field(None, gt=0, description="wall-clock seconds x 1e9 (ns) or '30min'-style")
    sample_count: StrictInt = Field(400, ge=1, description="--sample-count: model-stats samples pre-allocated per LP")
    payload_size: StrictInt = Field(4096, gt=0, description="--payload_sz for synthetic background jobs")
    standin: str = Field("load", description="hybrid runs: what stands in for a predicted job's traffic. load "
                                             "(default): the routers' ports hold the bandwidth share it used in its "
                                             "last simulated iteration, no packets; replay: its ranks keep sending "
                                             "their last simulated iteration's messages (both need CODES built by "
                                             "scripts/build-codes.sh, which patches CODES); none: CODES drops it, "
                                             "co-running jobs run fast (docs/codes.md)")
    standin_scale: float = Field(1.0, gt=0, le=1, description="standin: load: the fraction of the share held; "
                                                              "replay: the fraction of each message's bytes "
                                                              "replayed (fewer events, less load)")

    @field_validator("standin", mode="before")
    @classmethod
    def _standin(cls, v):
        if v not in ("replay", "load", "none"):
            raise ValueError(f"backend.codes.standin must be 'replay' (a predicted job's ranks keep sending their "
                             f"last simulated iteration's messages), 'load' (the routers hold its last simulated "
                             f"iteration's bandwidth share) or 'none' (CODES drops its traffic), got {v!r}")
        return v

    @model_validator(mode="after")
    def _check(self) -> "CodesOptions":
        if self.synch == "sequential" and self.np != 1:
            raise ValueError("backend.codes: sequential synch runs on one MPI rank; set np: 1 or synch: optimistic")
        return self


def scenario_problems(sc) -> list[tuple[tuple, str]]:
    """(field path, message) for what the codes backend cannot run in scenario ``sc``."""
    out = []
    if sc.scheduler is not None:
        out.append((("scheduler",), CODES_NO_STREAMS))
    topo, lim = sc.topology, sc.limits
    if topo.n_ports <= lim.max_ports and sc.backend.codes.sample_count * topo.n_ports > lim.max_samples:
        out.append((("backend", "codes", "sample_count"),
                    f"CODES pre-allocates sample_count = {sc.backend.codes.sample_count} samples per LP: x "
                    f"{topo.n_ports} ports = {sc.backend.codes.sample_count * topo.n_ports:.3g}, over "
                    f"limits.max_samples = {lim.max_samples}"))
    return out

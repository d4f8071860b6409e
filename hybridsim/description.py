"""A scenario's run, described: what ``description.json`` (:class:`hybridsim_common.rundir.RunDescription`) says of
a run of a :class:`hybridsim.scenario.Scenario` -- its topology, each job's workload, ranks, terminals and per-iteration
message volumes, the port sampling -- written by the runner, and for runs made before runs described themselves by
``hybridsim describe-run``. It lives beside the scenario because it reads the scenario, its placement and its
workloads; the format itself is the ground floor's (:mod:`hybridsim_common.rundir`)."""

from __future__ import annotations

import os
from pathlib import Path

from hybridsim_common.rundir import (DESCRIPTION, JOBS, MANIFEST, PORTS, JobDescription, RunDescription, RunDirError,
                                     read_manifest, refresh_digest, write_description)


def describe_scenario(scenario, placement=None, ports=None, *, import_custom: bool = True) -> RunDescription:
    """The description of a run of ``scenario`` (a :class:`hybridsim.scenario.Scenario`): ``placement`` the per-job
    terminal arrays it ran with (default ``place_jobs``), ``ports`` the :class:`hybridsim_common.records.PortSamples` it
    wrote (``None``: none). ``import_custom=False``: a ``custom`` workload's module is not imported (its volumes are
    left unknown), for scenarios read from a file rather than run here."""
    from .workloads import workload_volumes

    if placement is None:
        from .placement import place_jobs

        placement = place_jobs(scenario, scenario.build_topology())
    jobs = []
    for i, (job, terms) in enumerate(zip(scenario.jobs, placement)):
        params = job.workload.model_dump(mode="json", by_alias=True)
        params.pop("kind", None)
        vol = None if job.iterations is None or (job.workload.kind == "custom" and not import_custom) \
            else [float(v) for v in workload_volumes(scenario, i, job.iterations)]
        jobs.append(JobDescription(name=job.name, workload=job.workload.kind, params=params, ranks=job.ranks,
                                   iterations=job.iterations, terminals=[int(t) for t in terms], volumes=vol))
    return RunDescription(scenario.topology.shape, jobs,
                          None if ports is None else float(ports.interval),
                          None if ports is None else [str(x) for x in ports.features])


def describe_existing_run(path: str | os.PathLike, *, force: bool = False) -> Path:
    """Write the missing ``description.json`` of an engine run directory written before runs described themselves,
    from its manifest's resolved scenario (placement re-derived from the scenario and its seed, as the run did; a job
    stream's terminals from its ``jobs.parquet``) and its ``ports.parquet``. CODES imports are refused: importing the
    CODES run again describes it from the CODES inputs. No module the manifest names is imported: a ``custom``
    workload's volumes are left unknown. A run with digests gets the new description's. Returns the file written."""
    from hybridsim_common.records import read_jobs, read_ports
    from .scenario import Scenario, limit_problems

    run_dir = Path(path)
    manifest = read_manifest(run_dir)
    if (run_dir / DESCRIPTION).exists() and not force:
        raise RunDirError(f"{run_dir / DESCRIPTION}: already exists (pass --force to write it again)")
    if manifest.get("kind") == "codes-import":
        raise RunDirError(f"{run_dir}: a CODES import; run `hybridsim import-codes` on the CODES run again instead")
    if manifest.get("status") != "completed":
        raise RunDirError(f"{run_dir}: run status is {manifest.get('status')!r}, not 'completed'")
    scen = manifest.get("scenario")
    if not isinstance(scen, dict):
        raise RunDirError(f"{run_dir / MANIFEST}: no resolved 'scenario' to describe the run from")
    try:
        scenario = Scenario.model_validate(scen)
    except Exception as exc:  # pydantic ValidationError: a manifest from another version
        raise RunDirError(f"{run_dir / MANIFEST}: its scenario does not validate here: {exc}") from None
    over = limit_problems(scenario)
    if over:
        raise RunDirError(f"{run_dir / MANIFEST}: its scenario exceeds its limits: "
                          + "; ".join(f"{'.'.join(map(str, loc))}: {msg}" for loc, msg in over))
    placement = None
    try:
        if scenario.is_stream:
            table = read_jobs(run_dir / JOBS)
            terms = dict(zip(table.column("job").to_pylist(), table.column("terminals").to_pylist()))
            placement = [terms.get(j.name, []) for j in scenario.jobs]
        ports = read_ports(run_dir / PORTS) if (run_dir / PORTS).is_file() else None
        desc = describe_scenario(scenario, placement, ports, import_custom=False)
    except (OSError, ValueError) as exc:  # unreadable table, a placement file that moved (PlacementError)
        raise RunDirError(f"{run_dir}: cannot describe the run: {exc}") from None
    written = write_description(run_dir, desc)
    refresh_digest(run_dir, DESCRIPTION)
    return written

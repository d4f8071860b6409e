"""What the remote engine checks in a client's scenario before it builds anything: the text's size and YAML shape
(through :mod:`hybridsim_common.yamlio` with the operator's bounds, :func:`yaml_limits`), the run's size (ranks, terminals,
ports, iterations, events), and the modules and files it names.

The checks are plain functions of the :class:`~hybridsim.scenario.Scenario`; each raises
:class:`~hybridsim.service._common.ServiceError` naming the field and the serve flag.
"""

from __future__ import annotations

from pathlib import Path

from ._common import Access, invalid, over_limit
from .limits import ScenarioLimits


#: scenario limits a client may lower but not raise: what its workload generates (the serve flags bound the rest)
CLIENT_CAPPED = ("max_ops", "max_packets", "max_packets_per_message", "max_samples", "max_offered_load",
                 "max_queued_packets")


def yaml_limits(limits: ScenarioLimits):
    """The operator's bounds on a client's scenario text as :class:`hybridsim_common.yamlio.YamlLimits` (one home for the
    size / depth / alias-expansion checks, shared with scenario files), messages naming this server's flags."""
    from hybridsim_common.yamlio import YamlLimits

    return YamlLimits(max_bytes=limits.max_scenario_bytes, max_depth=limits.max_yaml_depth,
                      max_nodes=limits.max_yaml_nodes,
                      knobs={"max_bytes": "this server's limit; --max-scenario-kb",
                             "max_depth": "this server's limit",
                             "max_nodes": "this server's limit"})


def check_scenario_limits(scenario, limits: ScenarioLimits, field: str = "start.scenario_yaml") -> None:
    """Refuse a run bigger than the limits (INVALID_ARGUMENT); impose ``max_events`` when the scenario sets none.
    Only arithmetic on the parsed scenario: nothing is built. The scenario's own ``limits`` section (already checked
    against the run's estimated cost by :func:`hybridsim.scenario.parse_scenario`) may lower the defaults of
    :class:`hybridsim.scenario.Limits` that no serve flag stands for (:data:`CLIENT_CAPPED`), not raise them: a
    client cannot lift the bounds that keep its run finite."""
    topo = scenario.topology
    terminals = topo.n_terminals
    if terminals > limits.max_terminals:
        raise over_limit(f"{field}: topology", f"{terminals} terminals", limits.max_terminals, "--max-terminals")
    routers = topo.groups * topo.routers_per_group
    radix = topo.terminals_per_router + topo.routers_per_group - 1 + topo.global_channels_per_router
    if routers * radix > limits.max_ports:
        raise over_limit(f"{field}: topology", f"{routers} routers x radix {radix} = {routers * radix} ports",
                         limits.max_ports, "--max-ports")
    for i, job in enumerate(scenario.jobs):
        if job.ranks > limits.max_ranks:
            raise over_limit(f"{field}: jobs[{i}].ranks", job.ranks, limits.max_ranks, "--max-ranks")
        if job.iterations is not None and job.iterations > limits.max_iterations:
            raise over_limit(f"{field}: jobs[{i}].iterations", job.iterations, limits.max_iterations,
                             "--max-iterations")
    emb = scenario.backend.embedded
    if all(j.is_background for j in scenario.jobs) and emb.end_time is None and emb.max_events is None:
        raise invalid(f"{field}: backend.embedded", "only background jobs: set end_time (or max_events) to end the run")
    if emb.max_events is not None and emb.max_events > limits.max_events:
        raise over_limit(f"{field}: backend.embedded.max_events", emb.max_events, limits.max_events, "--max-events")
    if emb.max_events is None:
        emb.max_events = limits.max_events
    from hybridsim.scenario import Limits

    ceiling = Limits()
    for name in CLIENT_CAPPED:
        own, top = getattr(scenario.limits, name), getattr(ceiling, name)
        if own > top:
            raise over_limit(f"{field}: limits.{name}", own, top, "the default of the scenario limit")


def confine_scenario(scenario, access: Access, base_dir: Path | None, field: str = "start.scenario_yaml") -> None:
    """Refuse (PERMISSION_DENIED) custom workload modules and files outside what the operator allowed, before
    anything is imported or opened. Allowed relative paths are made absolute (against ``base_dir``, else the
    server's working directory), so nothing else resolves against a folder the client named."""
    for i, job in enumerate(scenario.jobs):
        if job.workload.kind == "custom":
            access.check_module(f"{field}: jobs[{i}].workload.function", job.workload.function.split(":", 1)[0])

    def absolute(p) -> Path:
        p = Path(p)
        return p if p.is_absolute() else (base_dir if base_dir is not None else Path.cwd()) / p

    conn = scenario.topology.connections
    if conn is not None:
        for name in ("intra", "inter"):
            p = absolute(getattr(conn, name))
            access.check_path(f"{field}: topology.connections.{name}", p)
            setattr(conn, name, p)
    if scenario.placement.file is not None:
        p = absolute(scenario.placement.file)
        access.check_path(f"{field}: placement.file", p)
        scenario.placement.file = p
    machine = scenario.machine
    if isinstance(machine, dict) and "file" in machine:
        if not isinstance(machine["file"], str):
            raise invalid(f"{field}: machine.file", f"expected a path, got {type(machine['file']).__name__}")
        p = absolute(machine["file"])
        access.check_path(f"{field}: machine.file", p)
        machine["file"] = str(p)

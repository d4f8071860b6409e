"""Job placement: which terminal each rank of each job runs on.

Deterministic for a given seed (``numpy.random.default_rng(seed)``). The result is a list with one int64 array per
job: ``placement[j][r]`` = terminal id of rank ``r`` of job ``j``. Terminals not used by any job stay idle.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hybridsim_common.topology import Dragonfly, DragonflyShape


class PlacementError(ValueError):
    """The placement cannot be made (too few terminals, bad allocation file, overlap)."""


def read_alloc_file(path: str | Path) -> list[list[int]]:
    """CODES allocation file: line j = whitespace-separated terminal ids of job j's ranks (rank order)."""
    out = []
    from hybridsim_common.files import open_regular

    try:
        fh = open_regular(path)  # a FIFO or a device is refused, not waited on
    except OSError as exc:
        raise PlacementError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("ascii")
            except UnicodeDecodeError as exc:
                raise PlacementError(f"{path}:{lineno}:{exc.start + 1}: not a text file of node ids "
                                     f"(byte 0x{raw[exc.start]:02x})") from None
            toks = line.split()
            if not toks:
                continue
            ids = []
            for tok in toks:
                if len(tok) > 19 or not tok.lstrip("-").isdigit():
                    raise PlacementError(f"{path}:{lineno}: node id {tok[:40]!r} is not an integer")
                ids.append(int(tok))
            out.append(ids)
    return out


def write_alloc_file(placement: list[np.ndarray], path: str | Path) -> None:
    with open(path, "w") as fh:
        for arr in placement:
            fh.write(" ".join(str(int(x)) for x in arr) + " \n")


#: the policies that choose terminals themselves (``file`` reads them); the scheduler allocates with the same ones
ORDER_POLICIES = ("contiguous", "random", "random-router", "random-group")


def terminal_order(policy: str, shape: DragonflyShape, rng: np.random.Generator) -> np.ndarray:
    """Every terminal id once, in the order ``policy`` fills them: ``contiguous`` 0, 1, 2, ...; ``random`` a
    permutation; ``random-router`` / ``random-group`` whole routers / groups in a random order, terminals in order
    inside each. :func:`place` gives job after job consecutive slices of it; the scheduler gives a job the first free
    terminals in it (:class:`hybridsim.scheduler.Scheduler`)."""
    p = shape.terminals_per_router
    n_routers = shape.groups * shape.routers_per_group
    if policy == "contiguous":
        return np.arange(n_routers * p)
    if policy == "random":
        return rng.permutation(n_routers * p)
    if policy == "random-router":
        routers = rng.permutation(n_routers)
        return (routers[:, None] * p + np.arange(p)[None, :]).ravel()
    if policy == "random-group":
        groups = rng.permutation(shape.groups)
        per = shape.routers_per_group * p
        return (groups[:, None] * per + np.arange(per)[None, :]).ravel()
    raise PlacementError(f"unknown placement policy {policy!r}")


def place(policy: str, ranks: list[int], topo: Dragonfly, seed: int = 0,
          alloc: list[list[int]] | None = None, source: str = "allocation file") -> list[np.ndarray]:
    """Place jobs with ``ranks[j]`` ranks each on ``topo``'s terminals."""
    n = topo.n_terminals
    need = sum(ranks)
    if need > n:
        raise PlacementError(f"jobs need {need} terminals, topology has {n}")
    if policy == "file":
        if alloc is None:
            raise PlacementError("policy 'file' needs an allocation")
        if len(alloc) < len(ranks):
            raise PlacementError(f"{source}: {len(alloc)} job lines for {len(ranks)} jobs")
        out = []
        seen: dict[int, int] = {}
        for j, (r, ids) in enumerate(zip(ranks, alloc)):
            if len(ids) < r:
                raise PlacementError(f"{source}: line {j + 1} lists {len(ids)} nodes, job {j} needs {r}")
            ids = ids[:r]
            for t in ids:
                if not 0 <= t < n:
                    raise PlacementError(f"{source}: line {j + 1}: node {t} outside 0..{n - 1}")
                if t in seen:
                    where = "twice on that line" if seen[t] == j else f"also on line {seen[t] + 1}"
                    raise PlacementError(f"{source}: line {j + 1}: node {t} is {where} (overlapping placement)")
                seen[t] = j
            out.append(np.asarray(ids, dtype=np.int64))
        return out
    order = terminal_order(policy, topo.shape, np.random.default_rng(seed))
    out, pos = [], 0
    for r in ranks:
        out.append(np.asarray(order[pos:pos + r], dtype=np.int64))
        pos += r
    return out


def place_jobs(scenario, topo: Dragonfly) -> list[np.ndarray]:
    """Placement for a :class:`~hybridsim.scenario.Scenario`."""
    pl = scenario.placement
    alloc = None
    source = "allocation file"
    if pl.policy == "file":
        path = scenario.resolve(pl.file)
        source = str(path)
        if not path.is_file():
            raise PlacementError(f"allocation file not found: {path}" if not path.exists() else
                                 f"allocation file {path}: not a regular file; only regular files are read")
        alloc = read_alloc_file(path)
    return place(pl.policy, [j.ranks for j in scenario.jobs], topo, scenario.placement_seed, alloc, source)

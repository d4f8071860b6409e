"""Reader of CODES' MPI op traces (``model-net-mpi-replay --enable_mpi_debug=1``, file ``mpi-op-logs``), to check a
workload re-implementation message by message (docs/codes-formats.md §6, docs/workloads.md §9).

Line forms (ranks are job-local)::

    (t) APP <job> MPI ISEND|SEND SOURCE <src> DEST <dst> TAG <tag> BYTES <n>      (also "APP ID <job> MPI SEND")
    (t) APP ID <job> MPI IRECV|RECV SOURCE <peer> DEST <me> BYTES 0              (also "APP <job> MPI RECV")
    (t) APP <job> MPI DELAY SOURCE <rank> DURATION <ns>
    (t) APP ID <job> MPI WAIT POSTED SOURCE <rank>
    (t) APP ID <job> MPI WAITALL POSTED SOURCE <rank>     (one per Waitall)
    (t) APP ID <job> MPI WAITALL SOURCE <rank> COMPLETED  (a Waitall that blocked completes; ignored here)

:func:`read_optrace` returns, per rank of one job, the ops in execution order as tuples
``("ISEND", dst, tag, bytes)``, ``("SEND", dst, tag, bytes)``, ``("IRECV", src)``, ``("RECV", src)``,
``("DELAY", ns)``, ``("WAIT",)``, ``("WAITALL",)``, each with its time, and :func:`split_iterations` cuts them at the
rank's ``ITERATION`` marks. :func:`trace_form` maps generated ops to the same alphabet.
"""

from __future__ import annotations

import gzip
import re
from collections import defaultdict
from pathlib import Path

from .ops import COMPUTE, IRECV, ISEND, RECV, SEND, WAITALL

_LINE = re.compile(r"^\s*\(([-0-9.eE+]+)\) APP (?:ID )?(\d+) MPI (\w+) (.*)$")


def _open(path: Path):
    return gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)


def read_optrace(path, job: int) -> dict[int, list[tuple[float, tuple]]]:
    """{rank: [(time, op), ...]} of job ``job`` (its index in the CODES workload file)."""
    out: dict[int, list] = defaultdict(list)
    key1, key2 = f"APP {job} MPI", f"APP ID {job} MPI"
    with _open(Path(path)) as fh:
        for line in fh:
            if key1 not in line and key2 not in line:
                continue
            m = _LINE.match(line)
            if m is None:
                continue
            t = float(m.group(1))
            kind, rest = m.group(3), m.group(4).split()
            f = {rest[i]: rest[i + 1] for i in range(0, len(rest) - 1)}
            if kind in ("ISEND", "SEND"):
                out[int(f["SOURCE"])].append((t, (kind, int(f["DEST"]), int(f["TAG"]), int(f["BYTES"]))))
            elif kind in ("IRECV", "RECV"):
                out[int(f["DEST"])].append((t, (kind, int(f["SOURCE"]))))
            elif kind == "DELAY":
                out[int(f["SOURCE"])].append((t, ("DELAY", float(f["DURATION"]))))
            elif kind in ("WAIT", "WAITALL"):
                if rest[0] == "POSTED":
                    out[int(rest[2])].append((t, (kind,)))
    return dict(out)


def read_iteration_marks(path, job: int) -> dict[int, list[float]]:
    """{rank: [mark time of iteration 0, 1, ...]} from an ``iteration-logs/pe=*.txt`` file."""
    marks: dict[int, dict[int, float]] = defaultdict(dict)
    with open(path) as fh:
        for line in fh:
            p = line.split()
            if len(p) >= 9 and p[0] == "ITERATION" and int(p[5]) == job:
                marks[int(p[7])][int(p[1])] = float(p[9])
    return {r: [m[i] for i in sorted(m)] for r, m in marks.items()}


def split_iterations(ops: list[tuple[float, tuple]], marks: list[float]) -> list[list[tuple]]:
    """Cut one rank's timed ops at its iteration marks; only complete iterations are returned."""
    out: list[list[tuple]] = [[] for _ in marks]
    i = 0
    for t, op in ops:
        while i < len(marks) and t > marks[i] + 1e-6:
            i += 1
        if i == len(marks):
            break
        out[i].append(op)
    return out


def trace_form(ops: list[tuple]) -> list[tuple]:
    """Generated op tuples in the trace alphabet (a one-request WAITALL is CODES' WAIT)."""
    out = []
    for op in ops:
        k = op[0]
        if k == COMPUTE:
            out.append(("DELAY", float(op[1])))
        elif k == ISEND:
            out.append(("ISEND", op[1], op[3], op[2]))
        elif k == SEND:
            out.append(("SEND", op[1], op[3], op[2]))
        elif k == IRECV:
            out.append(("IRECV", op[1]))
        elif k == RECV:
            out.append(("RECV", op[1]))
        elif k == WAITALL:
            out.append(("WAIT",) if len(op[1]) == 1 else ("WAITALL",))
    return out

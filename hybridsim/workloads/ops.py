"""MPI point-to-point operations: the alphabet every workload generator speaks.

A workload produces, for each rank and iteration, a list of op tuples in program order. The first element is one of
the small-int kind constants below; peers are job-local ranks; times are ns; sizes are bytes.

====================================  ==========================================================================
tuple                                 meaning (CODES' MPI replay semantics, docs/workloads.md §2)
====================================  ==========================================================================
``(COMPUTE, ns)``                     the rank is busy for ``ns`` virtual ns (CODES ``DELAY``)
``(ISEND, peer, nbytes, tag, req)``   non-blocking send; request ``req`` completes at local completion
``(IRECV, peer, tag, req)``           non-blocking receive matched on (source=peer, tag); size comes from the send
``(SEND, peer, nbytes, tag)``         blocking send: the rank waits for local completion
``(RECV, peer, tag)``                 blocking receive
``(WAITALL, (req, ...))``             block until every listed request of this iteration has completed
                                      (an MPI ``Wait`` is a ``WAITALL`` of one request)
====================================  ==========================================================================

Request ids are small ints, unique within one rank's iteration (each iteration starts again at 0). A ``WAITALL`` only
names requests created earlier in the same iteration. Every iteration's sends and receives are matched within that
iteration across the job (checked by :func:`hybridsim.workloads.check_matching`), so iterations are self-contained.
"""

from __future__ import annotations

from typing import Iterable, Sequence

COMPUTE = 0
ISEND = 1
IRECV = 2
SEND = 3
RECV = 4
WAITALL = 5

KIND_NAMES = {COMPUTE: "COMPUTE", ISEND: "ISEND", IRECV: "IRECV", SEND: "SEND", RECV: "RECV", WAITALL: "WAITALL"}

#: MPI tags CODES' glue uses for the collectives it expands (GLUE 159-211, 474-668).
BARRIER_TAG = 1234
ALLREDUCE_TAG = 1235


class OpError(ValueError):
    """An op tuple is malformed (wrong kind, arity, type, unknown request...)."""


def compute(ns: float) -> tuple:
    return (COMPUTE, float(ns))


def isend(peer: int, nbytes: int, tag: int, req: int) -> tuple:
    return (ISEND, int(peer), int(nbytes), int(tag), int(req))


def irecv(peer: int, tag: int, req: int) -> tuple:
    return (IRECV, int(peer), int(tag), int(req))


def send(peer: int, nbytes: int, tag: int) -> tuple:
    return (SEND, int(peer), int(nbytes), int(tag))


def recv(peer: int, tag: int) -> tuple:
    return (RECV, int(peer), int(tag))


def waitall(reqs: Iterable[int]) -> tuple:
    return (WAITALL, tuple(int(r) for r in reqs))


def format_op(op: Sequence) -> str:
    """Human-readable form of one op, e.g. ``ISEND(peer=3, 49152 B, tag=0, req=5)``."""
    try:
        k = op[0]
        if k == COMPUTE:
            return f"COMPUTE({op[1]} ns)"
        if k == ISEND:
            return f"ISEND(peer={op[1]}, {op[2]} B, tag={op[3]}, req={op[4]})"
        if k == IRECV:
            return f"IRECV(peer={op[1]}, tag={op[2]}, req={op[3]})"
        if k == SEND:
            return f"SEND(peer={op[1]}, {op[2]} B, tag={op[3]})"
        if k == RECV:
            return f"RECV(peer={op[1]}, tag={op[2]})"
        if k == WAITALL:
            return f"WAITALL({', '.join(str(r) for r in op[1])})"
    except (TypeError, IndexError):
        pass
    return repr(op)


_ARITY = {COMPUTE: 2, ISEND: 5, IRECV: 4, SEND: 4, RECV: 3, WAITALL: 2}


def _is_int(x) -> bool:
    """An int (not a bool) the engine cores hold: 64-bit signed, as the compiled core stores sizes, tags and ids."""
    return isinstance(x, int) and not isinstance(x, bool) and -2**63 <= x < 2**63


def validate_ops(ops: Sequence, n_ranks: int) -> None:
    """Check one rank-iteration's op list; raise :class:`OpError` naming the first bad op (index and text)."""
    reqs: set[int] = set()
    for i, op in enumerate(ops):
        def bad(why: str) -> OpError:
            return OpError(f"op #{i} {format_op(op)}: {why}")

        if not isinstance(op, tuple) or not op:
            raise bad("an op must be a non-empty tuple (use the helpers compute(), isend(), ...)")
        k = op[0]
        if k not in _ARITY:
            raise bad(f"unknown op kind {k!r} (expected one of {sorted(KIND_NAMES)}: "
                      f"{', '.join(KIND_NAMES.values())})")
        if len(op) != _ARITY[k]:
            raise bad(f"{KIND_NAMES[k]} takes {_ARITY[k]} fields, got {len(op)}")
        if k == COMPUTE:
            if not isinstance(op[1], (int, float)) or isinstance(op[1], bool) or not 0 <= op[1] <= 2.0**53:
                raise bad("compute time must be a finite number of ns in 0..2^53")
            continue
        if k == WAITALL:
            if not isinstance(op[1], tuple):
                raise bad("WAITALL takes a tuple of request ids")
            for r in op[1]:
                if r not in reqs:
                    raise bad(f"request {r!r} was not created earlier in this iteration")
            continue
        peer = op[1]
        if not _is_int(peer) or not 0 <= peer < n_ranks:
            raise bad(f"peer must be a rank in 0..{n_ranks - 1}")
        if k in (ISEND, SEND) and (not _is_int(op[2]) or op[2] < 0):
            raise bad("message size must be an int in 0..2^63 - 1 (bytes)")
        tag = op[3] if k in (ISEND, SEND) else op[2]
        if not _is_int(tag):
            raise bad("tag must be an int in -2^63..2^63 - 1")
        if k in (ISEND, IRECV):
            req = op[-1]
            if not _is_int(req):
                raise bad("request id must be an int in -2^63..2^63 - 1")
            if req in reqs:
                raise bad(f"request id {req} used twice in this iteration")
            reqs.add(req)

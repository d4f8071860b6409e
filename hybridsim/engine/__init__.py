"""The embedded packet-level engine (the default backend of ``hybridsim run``).

::

    from hybridsim.engine import Engine
    eng = Engine(scenario, topology=None, placement=None, progress=False, debug=None)
    result = eng.run(director=None, on_record=None, on_samples=None)   # -> hybridsim_common.backend.SimulationResult

Modules, smallest first: :mod:`.core` (the event loop), :mod:`.network` (terminals, routers, credits, routing),
:mod:`.mpi` (ranks and MPI protocol), :mod:`.sampling` (port samples), :mod:`.engine` (wiring, director, records);
:mod:`.cores` puts the same loop, network and MPI layer compiled (``native/``, identical records, 13-16x the
events per second) behind the same :class:`Engine` (``backend.embedded.core: auto | native | python``).
"""

from .core import EventLoop, LimitExceeded
from .engine import Engine, EngineError
from .network import Network, Packet

__all__ = ["Engine", "EngineError", "EventLoop", "LimitExceeded", "Network", "Packet"]

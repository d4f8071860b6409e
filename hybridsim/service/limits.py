"""The services' default limits, one home, light to import (the ``serve`` flags' defaults). Each is checked before
the work it bounds starts; see README.md in this folder."""

from __future__ import annotations

from dataclasses import dataclass

# surrogate service (hybridsim serve flags in brackets)
DEFAULT_MAX_JOBS = 1024                 # --max-jobs
DEFAULT_MAX_RANKS = 65536               # --max-ranks: ranks of one job (engine too)
DEFAULT_MAX_HISTORY = 1024              # --max-history: truth iterations kept per job (and the largest Tune window)
DEFAULT_MAX_STATE_BYTES = 1 << 30       # --max-state-mb: truth + graphs held over all jobs

# engine service
DEFAULT_START_TIMEOUT = 3.0             # --start-timeout: seconds a Run stream may wait before its Start
DEFAULT_MAX_PENDING = 4                 # Run streams waiting for their Start at once (one more evicts the oldest)


@dataclass(frozen=True)
class ScenarioLimits:
    """The remote engine's limits (``hybridsim serve`` flags in brackets)."""

    max_scenario_bytes: int = 1 << 20      # --max-scenario-kb: scenario text
    max_yaml_depth: int = 64               # nesting of mappings / sequences
    max_yaml_nodes: int = 200_000          # YAML nodes with aliases expanded (an alias bomb is small text)
    max_ranks: int = DEFAULT_MAX_RANKS     # --max-ranks: ranks of one job
    max_terminals: int = 65536             # --max-terminals: groups x routers x terminals per router
    max_ports: int = 262144                # --max-ports: routers x router radix
    max_iterations: int = 1_000_000        # --max-iterations: iterations of one job
    max_events: int = 1_000_000_000        # --max-events: events of one run (imposed when the scenario sets none)
    max_sample_bytes: int = 2 << 30        # --max-samples-mb: port samples one run keeps (counted as they come)

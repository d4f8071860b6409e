"""Quantities in scenario files.

Times are virtual **nanoseconds** everywhere inside hybridsim. A YAML file may write a number (ns) or a string with a
unit: ``"250us"``, ``"1.5 ms"``, ``"100ns"``, ``"2s"``. Bandwidths are GiB/s (2^30 bytes per second, as CODES).
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_TIME_UNITS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}
_TIME_RE = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zµ]*)\s*$")


def parse_time_ns(value) -> float:
    """``250`` -> 250.0, ``"250us"`` -> 250000.0. Raises ``ValueError`` with the accepted units."""
    if isinstance(value, bool):
        raise ValueError("expected a time (number of ns or a string like '250us'), got a boolean")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        m = _TIME_RE.match(value)
        if m:
            unit = m.group(2) or "ns"
            if unit in _TIME_UNITS:
                return float(m.group(1)) * _TIME_UNITS[unit]
        raise ValueError(f"expected a time like '250us' (units: ns, us, ms, s), got {value!r}")
    raise ValueError(f"expected a time (number of ns or a string like '250us'), got {type(value).__name__}")


#: A time in ns, accepting unit strings in YAML.
Duration = Annotated[float, BeforeValidator(parse_time_ns)]

GIB = float(2**30)


def bytes_to_ns(nbytes: float, gib_per_s: float) -> float:
    """Serialisation time of ``nbytes`` on a link of ``gib_per_s`` GiB/s, as CODES' ``bytes_to_ns``."""
    return nbytes / GIB / gib_per_s * 1e9

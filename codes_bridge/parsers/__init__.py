"""Streaming parsers of CODES / ROSS outputs into hybridsim records (one module per file family).

* :mod:`.iteration_logs` -- ``iteration-logs/pe=*.txt`` -> IterationRecord
* :mod:`.ross_vt` -- ROSS VT samples (``ross-stats-analysis-lps.bin`` or the decoded CSVs) -> PortSamples + terminal
  and rank samples
* :mod:`.lpio` -- ``lp-io/`` end-of-run and windowed files
* :mod:`.stdout` -- ``model-output.txt``, ``ross.csv``, ``time.txt``
* :mod:`.common` -- located errors (:class:`CodesParseError`), warnings, the tailing :class:`IncrementalReader`
"""

from .common import CodesParseError, CodesWarning, IncrementalReader

__all__ = ["CodesParseError", "CodesWarning", "IncrementalReader"]

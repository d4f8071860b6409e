"""The command line's error type and exit statuses, apart from the CLI itself.

Every module that contributes commands (hybridsim's own and the plug-ins of the ``hybridsim.commands`` entry-point
group) raises :class:`CliError` for bad input; :func:`hybridsim.cli.main` prints it and exits with its ``code``. This
module imports nothing, so a command module reaches it without importing the CLI that loads it.

Exit status: 0 success, 1 run failure, 2 bad input (scenario, files, arguments, an output that cannot be written);
130 Ctrl-C and 128 + N for signal N come from :mod:`hybridsim_common.interrupts`.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class CliError(Exception):
    """A user-facing error: message printed, exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_BAD_INPUT):
        super().__init__(message)
        self.code = code

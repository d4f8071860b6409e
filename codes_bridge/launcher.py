"""Start CODES' ``model-net-mpi-replay`` as a subprocess and watch it.

``backend.codes`` of the scenario (:class:`hybridsim.scenario.CodesBackend`) says how:

* ``bin_dir`` -- folder with the executable (``$CODES_BIN_DIR`` when unset); a CODES build folder works too (the
  executable is looked up in ``bin_dir`` and then ``bin_dir/src``);
* ``synch: sequential`` -> ``mpirun -np 1 model-net-mpi-replay --synch=1 ...``;
  ``synch: optimistic`` -> ``mpirun -np N model-net-mpi-replay --synch=3 ...`` (``np``);
* ``mpirun`` -- the MPI launcher (name on ``PATH`` or a path, optionally followed by its own options, e.g.
  ``"mpirun --hostfile hosts"``; ``-np N`` is appended); an empty string starts the executable directly (sequential
  only);
* ``extra_args`` -- more ``model-net-mpi-replay`` options (an ``--name=`` given here replaces the generated one);
* ``timeout`` -- wall-clock limit (a duration with a unit: ``"1800s"``; plain numbers are ns as everywhere in
  hybridsim).

CODES runs in the folder that holds its inputs. Its stdout and stderr are streamed, line by line as they come, to
``model-output.txt`` and ``model-output.stderr.txt`` in that folder (the reference runs' names); ``command.txt`` records
the exact command. A missing executable or launcher, a non-zero exit, a death by signal or a timeout raise
:class:`CodesRunError`, whose message names the cause and quotes the last lines of CODES' stderr; whatever CODES
wrote stays in the folder.
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .writers import merge_extra_args

STDOUT_NAME = "model-output.txt"
STDERR_NAME = "model-output.stderr.txt"
COMMAND_NAME = "command.txt"
#: how many trailing stderr lines a CodesRunError quotes
TAIL_LINES = 20
#: seconds between SIGTERM and SIGKILL when stopping CODES
KILL_GRACE_S = 5.0

#: stdout lines worth showing as progress (ROSS' start/end banners, GVT progress, job completions)
_PROGRESS = re.compile(r"(\*\*\* (START|END) |GVT|complete|Per App Max Elapsed|finished workload|Running Time)")


class CodesRunError(RuntimeError):
    """CODES could not be run, or did not finish cleanly.

    ``cause`` is one of ``missing-binary``, ``missing-mpirun``, ``bad-config``, ``start-failed``, ``exit``, ``signal``,
    ``timeout``, ``no-output``; ``returncode`` and ``stderr_tail`` (last lines of CODES' stderr) where known;
    ``run_dir`` is the folder CODES ran in (its files are kept)."""

    def __init__(self, message: str, *, cause: str, run_dir: Path | None = None, returncode: int | None = None,
                 stderr_tail: str = ""):
        full = message
        if stderr_tail.strip():
            full += "\nlast lines of CODES' stderr:\n" + "\n".join("  " + l for l in stderr_tail.splitlines())
        if run_dir is not None:
            full += f"\n(CODES' files are kept in {run_dir})"
        super().__init__(full)
        self.cause = cause
        self.run_dir = run_dir
        self.returncode = returncode
        self.stderr_tail = stderr_tail


@dataclass
class LaunchResult:
    command: list[str]
    cwd: Path
    returncode: int
    wall_s: float
    stdout: Path
    stderr: Path


# ------------------------------------------------------------------------------------------------------ discovery
def resolve_bin_dir(codes_cfg, env: dict | None = None) -> Path:
    env = os.environ if env is None else env
    if codes_cfg.bin_dir is not None:
        return Path(codes_cfg.bin_dir).expanduser()
    if env.get("CODES_BIN_DIR"):
        return Path(env["CODES_BIN_DIR"]).expanduser()
    raise CodesRunError("no CODES executable folder: set backend.codes.bin_dir in the scenario or the CODES_BIN_DIR "
                        "environment variable to the folder holding model-net-mpi-replay", cause="missing-binary")


def find_executable(codes_cfg, env: dict | None = None) -> Path:
    """The ``model-net-mpi-replay`` to run (absolute); :class:`CodesRunError` (``missing-binary``) if there is none."""
    bin_dir = resolve_bin_dir(codes_cfg, env)
    name = codes_cfg.executable
    tried = [bin_dir / name, bin_dir / "src" / name]
    for cand in tried:
        if cand.is_file():
            if not os.access(cand, os.X_OK):
                raise CodesRunError(f"CODES executable {cand} is not executable (chmod +x?)", cause="missing-binary")
            return cand.resolve()
    where = "backend.codes.bin_dir" if codes_cfg.bin_dir is not None else "CODES_BIN_DIR"
    raise CodesRunError(f"CODES executable {name!r} not found (looked for {', '.join(map(str, tried))}; "
                        f"{where} = {bin_dir})", cause="missing-binary")


def find_mpirun(codes_cfg, env: dict | None = None) -> list[str] | None:
    """The MPI launcher command (absolute path + any launcher options written after it in ``mpirun``, e.g.
    ``"mpirun --hostfile hosts --bind-to core"``), or None when ``mpirun`` is empty (direct start)."""
    env = os.environ if env is None else env
    try:
        words = shlex.split(codes_cfg.mpirun)
    except ValueError as exc:
        raise CodesRunError(f"backend.codes.mpirun {codes_cfg.mpirun!r}: {exc}", cause="bad-config") from None
    if not words:
        if codes_cfg.synch != "sequential" or codes_cfg.np != 1:
            raise CodesRunError("backend.codes.mpirun is empty (start CODES directly), which only works for a "
                                "sequential run on one process; set mpirun for optimistic runs", cause="bad-config")
        return None
    found = shutil.which(words[0], path=env.get("PATH"))
    if found is None:
        raise CodesRunError(f"MPI launcher {words[0]!r} (backend.codes.mpirun) not found on PATH",
                            cause="missing-mpirun")
    return [found] + words[1:]


def build_command(codes_cfg, exe: Path | str, replay_args: Sequence[str], mpirun: list[str] | None) -> list[str]:
    args = merge_extra_args(replay_args, codes_cfg.extra_args)
    np_ = codes_cfg.np if codes_cfg.synch == "optimistic" else 1
    head = [] if mpirun is None else list(mpirun) + ["-np", str(np_)]
    return head + [str(exe)] + args


# ------------------------------------------------------------------------------------------------------ running
def _pump(stream, path: Path, tail: collections.deque | None, echo: Callable[[str], None] | None) -> None:
    with open(path, "ab") as fh:
        for raw in iter(stream.readline, b""):
            fh.write(raw)
            fh.flush()
            if tail is not None or echo is not None:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if tail is not None:
                    tail.append(line)
                if echo is not None:
                    echo(line)
    stream.close()


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the whole process group (mpirun and its children), SIGKILL after a grace period."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def launch(command: Sequence[str], cwd: Path, *, timeout_s: float | None = None, progress: bool | Callable = False,
           env: dict | None = None) -> LaunchResult:
    """Run ``command`` in ``cwd``, streaming stdout/stderr to files there; raise :class:`CodesRunError` on failure.

    ``progress``: True echoes ROSS' progress lines to this process' stderr; a callable receives every stdout line."""
    cwd = Path(cwd)
    out_p, err_p = cwd / STDOUT_NAME, cwd / STDERR_NAME
    for p in (out_p, err_p):
        p.write_bytes(b"")
    (cwd / COMMAND_NAME).write_text(shlex.join(command) + "\n")
    if callable(progress):
        echo = progress
    elif progress:
        def echo(line: str) -> None:
            if _PROGRESS.search(line):
                print(f"[codes] {line}", file=sys.stderr, flush=True)
    else:
        echo = None
    tail: collections.deque = collections.deque(maxlen=TAIL_LINES)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(list(command), cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, env=env)
    except OSError as exc:
        raise CodesRunError(f"could not start CODES ({shlex.join(command[:1])}): {exc}", cause="start-failed",
                            run_dir=cwd) from None
    threads = [threading.Thread(target=_pump, args=(proc.stdout, out_p, None, echo), daemon=True),
               threading.Thread(target=_pump, args=(proc.stderr, err_p, tail, None), daemon=True)]
    for th in threads:
        th.start()
    timed_out = False
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _stop(proc)
    except BaseException:  # KeyboardInterrupt etc.: never leave CODES running
        _stop(proc)
        raise
    finally:
        for th in threads:
            th.join(10.0)
    wall = time.monotonic() - t0
    rc = proc.returncode
    tail_text = "\n".join(tail)
    if timed_out:
        raise CodesRunError(f"CODES timed out after {timeout_s:g} s wall clock (backend.codes.timeout) and was "
                            f"stopped", cause="timeout", run_dir=cwd, returncode=rc, stderr_tail=tail_text)
    if rc < 0:
        raise CodesRunError(f"CODES was killed by {_signal_name(-rc)} after {wall:.1f} s", cause="signal",
                            run_dir=cwd, returncode=rc, stderr_tail=tail_text)
    if rc != 0:
        hint = ""
        if rc > 128 and rc - 128 < 65:
            hint = f" (128 + {_signal_name(rc - 128)}: a process was probably killed by that signal)"
        raise CodesRunError(f"CODES exited with status {rc}{hint} after {wall:.1f} s", cause="exit", run_dir=cwd,
                            returncode=rc, stderr_tail=tail_text)
    return LaunchResult(command=list(command), cwd=cwd, returncode=rc, wall_s=wall, stdout=out_p, stderr=err_p)


def timeout_seconds(codes_cfg) -> float | None:
    """``backend.codes.timeout`` (ns, as every hybridsim duration) in seconds."""
    if codes_cfg.timeout is None:
        return None
    if codes_cfg.timeout < 1e6:
        raise CodesRunError(f"backend.codes.timeout is {codes_cfg.timeout:g} ns (under 1 ms): plain numbers are ns; "
                            f"write a unit, e.g. '1800s' (units: ns, us, ms, s)", cause="bad-config")
    return float(codes_cfg.timeout) / 1e9


def run_inputs(scenario, inputs, *, progress: bool | Callable = False, env: dict | None = None) -> LaunchResult:
    """Launch CODES on inputs written by :func:`codes_bridge.writers.write_codes_inputs`."""
    codes_cfg = scenario.backend.codes
    exe = find_executable(codes_cfg, env)
    mpirun = find_mpirun(codes_cfg, env)
    cmd = build_command(codes_cfg, exe, inputs.args, mpirun)
    return launch(cmd, inputs.dir, timeout_s=timeout_seconds(codes_cfg), progress=progress, env=env)

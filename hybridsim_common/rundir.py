"""Run directories: the one place results land.

Layout::

    OUTDIR/
      manifest.json       resolved scenario, seed, versions, git revision, command line, times, status
      iterations.parquet  IterationRecord rows (+ mode / prediction columns for hybrid runs)
      ports.parquet       port samples, long format (see hybridsim_common.records)
      summary.json        per-job completion times, event counts, wall-time split
      description.json    what a dataset needs, independent of how the run was made (:class:`RunDescription`):
                          topology shape, each job's workload, ranks, terminals and per-iteration message volumes,
                          the port sampling interval and features

``manifest.json`` is written first with ``status: "running"`` and rewritten at the end with ``"completed"`` or
``"failed"`` plus the reason. Tables are written atomically (temp file + rename) only once complete, so a failed or
interrupted run never leaves a table that looks complete. The final manifest lists the ``files`` the run wrote and,
for a completed run, the SHA-256 ``digest`` of each table of :data:`TABLES` and of the manifest's identity (kind,
mode, backend, scenario, seed, partial): :func:`verify_digests` tells a run as it was written from one edited since.
The digests catch an accident or a careless edit, not a forger: whoever can edit the tables can rewrite the digests.

Where a run is written (:class:`StagedDir`, also used for bench directories, datasets and checkpoints): in a fresh
hidden sibling ``.OUTDIR.XXXXXXXX.partial`` (same parent, so the final move is a rename), while an advisory lock on
``.OUTDIR.lock`` turns a second writer of the same ``OUTDIR`` away. A completed run is renamed into place, replacing
the old ``OUTDIR`` only then, so an interrupted or concurrent ``--force`` never destroys a finished run. ``--force``
only replaces a directory hybridsim recognises (its manifest), never the working directory, one of its parents, ``/``
or ``$HOME``, and never one holding a file the run did not write (:func:`foreign_files`). A failed run is moved to
``OUTDIR`` with its failed manifest, unless ``OUTDIR`` holds a completed run: that one stays and the failed attempt
goes to ``OUTDIR.failed``.

Why one module of this size: a run directory's format is one contract -- staging, locking, the manifest, digests and
``description.json`` are written and checked together.

Over 600 lines: the run-directory format (staging, manifest, digests, tables, summary, description) is one contract
every layer reads and writes.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .topology import DragonflyShape

MANIFEST = "manifest.json"
ITERATIONS = "iterations.parquet"
PORTS = "ports.parquet"
SUMMARY = "summary.json"
DESCRIPTION = "description.json"
JOBS = "jobs.parquet"
#: the files whose digests a completed run records (those it wrote)
TABLES = (ITERATIONS, PORTS, SUMMARY, DESCRIPTION, JOBS)
#: the manifest fields that say what a run is; their digest is recorded beside the tables'
IDENTITY = ("kind", "mode", "backend", "scenario", "seed", "partial")
DIGEST_ALGORITHM = "sha256"

_PACKAGES = ("hybridsim", "numpy", "torch", "transformers", "pydantic", "pyarrow", "grpcio", "pyzmq")


class RunDirError(RuntimeError):
    """An output directory that cannot be written or replaced; the message names the path and why."""


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    here = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        if rev.returncode == 0:
            dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=5)
            return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return None


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as strict JSON (temp file + rename): a NaN or infinite number becomes ``null``, so every JSON
    file hybridsim writes parses anywhere (``NaN`` and ``Infinity`` are not JSON)."""
    text = json.dumps(finite_json(data), indent=2, sort_keys=False, allow_nan=False)
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w") as fh:
        fh.write(text + "\n")
    os.replace(tmp, path)


def finite_json(o: Any) -> Any:
    """``o`` with numpy scalars and arrays as Python values, paths as strings, tuples as lists and every non-finite
    float as ``None``; raises ``TypeError`` for anything JSON cannot hold."""
    if isinstance(o, dict):
        return {k: finite_json(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [finite_json(v) for v in o]
    if isinstance(o, (str, bool, int)) or o is None:
        return o
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    import numpy as np

    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return finite_json(float(o))
    if isinstance(o, np.ndarray):
        return finite_json(o.tolist())
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def load_json(path: str | os.PathLike, what: str = "file") -> Any:
    """The JSON value in ``path``; :class:`RunDirError` naming the file for one that is missing, unreadable, not
    UTF-8, not JSON or nested too deep to read (``FileNotFoundError`` passes through for callers that explain it)."""
    from .files import read_bytes

    try:
        raw = read_bytes(path, MAX_JSON_BYTES)  # a regular file only: a FIFO or a device is refused, not waited on
        return json.loads(raw.decode("utf-8"))
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise RunDirError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise RunDirError(f"{path}: corrupt {what}: not UTF-8 text") from None
    except ValueError as exc:  # not JSON, or an integer too long to convert
        raise RunDirError(f"{path}: corrupt {what}: {exc}") from None
    except (RecursionError, MemoryError):
        raise RunDirError(f"{path}: corrupt {what}: nested too deep to read") from None


#: the largest JSON file hybridsim reads back (a manifest with its scenario, a summary, a bench, a corpus index)
MAX_JSON_BYTES = 256 << 20


def load_corpus_index(path: str | os.PathLike) -> dict:
    """The corpus index ``path`` (``DIR/corpus.json``, written by ``hybridsim corpus``): a JSON object of kind
    ``corpus`` with a ``runs`` list of objects, each with an ``id`` and a ``dir``. :class:`RunDirError` naming the
    file and field for anything else (another program's ``corpus.json`` is not taken for one);
    ``FileNotFoundError`` passes through."""
    meta = load_json(path, "corpus index")
    if not isinstance(meta, dict) or meta.get("kind") != "corpus":
        raise RunDirError(f"{path}: not a corpus index written by `hybridsim corpus` (no \"kind\": \"corpus\")")
    runs = meta.get("runs")
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("dir"), str) and
                                             isinstance(r.get("id"), int) for r in runs):
        raise RunDirError(f"{path}: corrupt corpus index: field 'runs' must be a list of objects with an integer "
                          "'id' and a 'dir'")
    return meta


def is_hybridsim_dir(path: Path) -> bool:
    """A run or bench directory: a ``manifest.json`` that hybridsim wrote (or an older bench's ``bench.json``)."""
    for name, key in ((MANIFEST, "status"), ("bench.json", "runs")):
        try:
            data = load_json(Path(path) / name)
        except (OSError, RunDirError):
            continue
        if isinstance(data, dict) and key in data:
            return True
    return False


def _protected(path: Path) -> str | None:
    """Why ``path`` must never be replaced: /, the working directory or a parent of it, $HOME."""
    real = Path(path).resolve()
    if real == Path(real.anchor):
        return "it is the root directory"
    cwd = Path.cwd().resolve()
    if real == cwd or real in cwd.parents:
        return "it is the working directory or one of its parents"
    home = os.environ.get("HOME")
    if home and real == Path(home).resolve():
        return "it is your home directory ($HOME)"
    return None


def _is_empty_dir(path: Path) -> bool:
    try:
        if not path.is_dir() or path.is_symlink():
            return False
        with os.scandir(path) as it:
            return next(it, None) is None
    except OSError:
        return False


def _cannot(path, exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(path) else ""
    return f"cannot write {path}: {exc.strerror or exc}{where}"


def check_replaceable(dest: str | os.PathLike, *, force: bool, what: str = "run directory",
                      recognise=is_hybridsim_dir, foreign=None) -> None:
    """Raise :class:`RunDirError` unless ``dest`` is absent, an empty directory, or (with ``force``) a ``what``
    that ``recognise`` accepts, that is not protected (see :func:`_protected`) and in which ``foreign(dest)`` (when
    given, e.g. :func:`foreign_files`) finds no file hybridsim did not write."""
    p = Path(dest)
    if not os.path.lexists(p):
        return
    why = _protected(p)
    if why is None and _is_empty_dir(p):
        return
    if not force:
        raise RunDirError(f"{p} already exists; choose another -o or pass --force to replace it")
    if why is None:
        if p.is_symlink():
            why = "it is a symbolic link"
        elif not p.is_dir():
            why = f"it is a file, not a {what}"
        elif not recognise(p):
            why = f"it is not a hybridsim {what}"
        elif foreign is not None:
            theirs = foreign(p)
            if theirs:
                more = f" and {len(theirs) - 5} more" if len(theirs) > 5 else ""
                why = (f"it holds files hybridsim did not write: {', '.join(theirs[:5])}{more} (move them out "
                       "first)")
    if why:
        raise RunDirError(f"refusing to replace {p}: {why}; --force only replaces a {what} hybridsim wrote "
                          "(remove it yourself or choose another -o)")


def acquire_lock(lock_path: Path, busy: str) -> int:
    """Take the advisory lock ``lock_path`` (``flock``, created if absent) without waiting; returns its descriptor.
    Raises :class:`RunDirError` with the message ``busy`` when another process holds it."""
    import fcntl

    while True:
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RunDirError(_cannot(lock_path, exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirError(busy) from None
        except OSError as exc:
            os.close(fd)
            raise RunDirError(_cannot(lock_path, exc)) from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # the previous holder removed the file after we opened it: lock the new one
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def release_lock(lock_path: Path, fd: int) -> None:
    """Remove ``lock_path`` (while still holding it, so no one locks a file that is gone) and close ``fd``."""
    try:
        os.unlink(lock_path)
    except OSError:
        pass
    os.close(fd)


@contextlib.contextmanager
def locked(lock_path: Path, busy: str):
    """Hold the advisory lock ``lock_path`` for the block (:func:`acquire_lock`)."""
    fd = acquire_lock(lock_path, busy)
    try:
        yield
    finally:
        release_lock(lock_path, fd)


class StagedDir:
    """A directory written under a hidden temporary name beside ``dest`` (:attr:`path`) and moved into place by
    :meth:`commit`, or dropped by :meth:`discard`. Holds ``.NAME.lock`` (``flock``) from creation to the end, so a
    second writer of the same ``dest`` gets a :class:`RunDirError` instead of racing. ``recognise(path) -> bool``
    says whether an existing ``dest`` may be replaced with ``force``, ``foreign(path) -> list`` (optional) names the
    files in it that must not be deleted; ``what`` names the kind in messages."""

    def __init__(self, dest: str | os.PathLike, *, force: bool = False, what: str = "run directory",
                 recognise=is_hybridsim_dir, foreign=None):
        self.dest = Path(dest)
        self.force, self.what, self.recognise, self.foreign = force, what, recognise, foreign
        self._abs = Path(os.path.abspath(self.dest))
        self._lock_fd: int | None = None
        self.committed = False
        check_replaceable(self.dest, force=force, what=what, recognise=recognise, foreign=foreign)
        parent = self._abs.parent
        existing = next(p for p in (parent, *parent.parents) if os.path.lexists(p))
        if not existing.is_dir():
            raise RunDirError(f"cannot write {self.dest}: {existing} is not a directory")
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunDirError(_cannot(self.dest, exc)) from None
        self._lock_path = parent / f".{self._abs.name}.lock"
        self._lock()
        try:
            # checked again under the lock: another writer may have finished in between
            check_replaceable(self.dest, force=force, what=what, recognise=recognise, foreign=foreign)
            self.path = Path(tempfile.mkdtemp(prefix=f".{self._abs.name}.", suffix=".partial", dir=parent))
        except OSError as exc:
            self._unlock()
            raise RunDirError(_cannot(self.dest, exc)) from None
        except BaseException:
            self._unlock()
            raise

    def _lock(self) -> None:
        self._lock_fd = acquire_lock(self._lock_path, f"{self.dest} is being written by another process (lock "
                                     f"{self._lock_path} is held); wait for it to finish or choose another -o")

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            release_lock(self._lock_path, self._lock_fd)
            self._lock_fd = None

    def _place(self, target: Path) -> None:
        """Rename the staging folder to ``target``; a non-empty ``target`` is renamed aside first and removed only
        once the new one is in place."""
        target = Path(os.path.abspath(target))
        if os.path.lexists(target) and not _is_empty_dir(target):
            check_replaceable(target, force=True, what=self.what, recognise=self.recognise, foreign=self.foreign)
            aside = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            os.rename(target, aside)  # replaces the empty ``aside``
            try:
                os.rename(self.path, target)
            except BaseException:
                os.rename(aside, target)
                raise
            shutil.rmtree(aside, ignore_errors=True)
        else:
            os.rename(self.path, target)  # replaces an empty directory
        self.path = target

    def commit(self) -> Path:
        """Move the finished folder to ``dest`` and release the lock. Raises :class:`RunDirError` (the folder stays
        at :attr:`path`, the lock held) when ``dest`` cannot be replaced."""
        if not self.force and os.path.lexists(self._abs) and not _is_empty_dir(self._abs):
            raise RunDirError(f"{self.dest} appeared while it was being written; the result is in {self.path}")
        try:
            self._place(self._abs)
        except OSError as exc:
            raise RunDirError(f"{_cannot(self.dest, exc)}; the result is in {self.path}") from None
        self.path = self.dest
        self.committed = True
        self._unlock()
        return self.dest

    def discard(self) -> None:
        """Remove the staging folder (nothing lands at ``dest``) and release the lock."""
        if self._lock_fd is not None:
            shutil.rmtree(self.path, ignore_errors=True)
        self._unlock()

    def failed_target(self) -> Path | None:
        """Where a failed attempt goes: ``dest``, unless that holds a completed result, then ``dest.failed``; None
        (stay in the staging folder) when that is taken by something hybridsim did not write."""
        for target in (self._abs, self._abs.with_name(self._abs.name + ".failed")):
            if not os.path.lexists(target) or _is_empty_dir(target):
                return target
            if _protected(target) or not self.recognise(target) or (self.foreign and self.foreign(target)):
                continue
            if target != self._abs or _status(target) != "completed":
                return target
        return None

    def keep_failed(self, target: Path | None) -> Path:
        """Move the failed folder to ``target`` (see :meth:`failed_target`) when possible; release the lock."""
        try:
            if target is not None:
                self._place(target)
                if self.path == self._abs:
                    self.path = self.dest
        except (OSError, RunDirError):
            pass  # it stays in the staging folder, which the messages name
        finally:
            self._unlock()
        return self.path


def _status(path: Path) -> str | None:
    try:
        return read_manifest(path).get("status")
    except (OSError, RunDirError):
        return None


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until the block is done (a manifest written, a folder moved into place), then
    are delivered again."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])
    old = {s: signal.signal(s, lambda signum, _frame: pending.append(signum)) for s in sigs}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if pending:
            signal.raise_signal(pending[0])


def _write_minimal_manifest(path: Path, kind, reason: str) -> None:
    """The failed manifest without the run's details, for when writing the full one failed (no memory, ...)."""
    try:
        data = json.dumps({"kind": kind, "status": "failed", "reason": str(reason)[:2000], "end_time": now_iso()})
    except BaseException:
        data = '{"status": "failed", "reason": "the failure handler could not describe the failure"}'
    try:
        tmp = f"{path}.partial"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data.encode() + b"\n")
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        pass  # nothing left to try; the caller re-raises the run's own error


class RunDir:
    """A run directory being written (in its :class:`StagedDir`). Use :meth:`create`, then :meth:`complete` or
    :meth:`fail`. :attr:`path` is the staging folder while the run is going, its final place afterwards."""

    def __init__(self, staged: StagedDir, manifest: dict):
        self.staged = staged
        self.manifest = manifest

    @property
    def path(self) -> Path:
        return self.staged.path

    @classmethod
    def create(cls, path: str | os.PathLike, *, kind: str, scenario: dict | None = None, seed: int | None = None,
               force: bool = False, argv: list[str] | None = None, extra: dict | None = None) -> "RunDir":
        staged = StagedDir(path, force=force, foreign=foreign_files)
        manifest = {
            "kind": kind,
            "status": "running",
            "reason": None,
            "scenario": scenario,
            "seed": seed,
            "versions": package_versions(),
            "git_revision": git_revision(),
            "command_line": list(argv if argv is not None else sys.argv),
            "start_time": now_iso(),
            "end_time": None,
            "host": platform.node(),
        }
        if extra:
            manifest.update(extra)
        rd = cls(staged, manifest)
        try:
            rd.write_manifest()
        except BaseException as exc:
            staged.discard()
            if isinstance(exc, OSError):
                raise RunDirError(_cannot(staged.dest, exc)) from None
            raise
        return rd

    def write_manifest(self) -> None:
        write_json_atomic(self.path / MANIFEST, self.manifest)

    def file(self, name: str) -> Path:
        return self.path / name

    def complete(self, **extra) -> None:
        """Mark completed, record the files written and the digests of the tables and of the manifest's identity
        (:func:`digests`), and move into place (replacing the old run with ``force``)."""
        self.manifest.update(extra)
        self.manifest["status"] = "completed"
        self.manifest["end_time"] = now_iso()
        self.manifest["files"] = written_files(self.path)
        self.manifest["digest"] = digests(self.path, self.manifest)
        self.write_manifest()
        with signals_deferred():
            self.staged.commit()

    def fail(self, reason: str, **extra) -> Path:
        """Mark failed, remove any table that may be incomplete (``*.partial``) and move the folder to where a
        failed run goes (:meth:`StagedDir.failed_target`); returns that place. Never raises: when the full manifest
        cannot be written, a minimal one is."""
        if self.staged.committed:  # complete() went through: nothing failed that the folder should say
            return self.path
        with signals_deferred():
            staging = self.path
            try:
                target = self.staged.failed_target()
            except BaseException:
                target = None
            try:
                # messages from inside the run name the staging folder; name the place the user will look at
                where = self.staged.dest if target == self.staged._abs else (target or staging)
                reason = str(reason).replace(str(staging), str(where))
                for p in staging.glob("*.partial"):
                    if p.is_file():
                        p.unlink(missing_ok=True)
                self.manifest.update(extra)
                self.manifest["status"] = "failed"
                self.manifest["reason"] = reason
                self.manifest["end_time"] = now_iso()
                self.manifest["files"] = written_files(staging)
                self.write_manifest()
            except BaseException:
                _write_minimal_manifest(staging / MANIFEST, self.manifest.get("kind"), reason)
            return self.staged.keep_failed(target)


def load_json_object(p: Path, name: str, missing: str) -> dict:
    """The JSON object in file ``p`` (read by :func:`load_json`, within its limits); :class:`RunDirError` naming
    ``p`` when it is missing (``missing``: what that means) or holds anything but an object."""
    try:
        data = load_json(p, name)
    except FileNotFoundError:
        raise RunDirError(f"{p}: {missing}") from None
    if not isinstance(data, dict):
        raise RunDirError(f"{p}: corrupt {name}: a JSON object expected, not {type(data).__name__}")
    return data


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of run directory ``path`` (or the file itself); :class:`RunDirError` for one that is missing,
    corrupt or not a JSON object."""
    p = Path(path)
    return load_json_object(p / MANIFEST if p.is_dir() else p, MANIFEST,
                            "no manifest.json (is this a hybridsim run directory?)")


# ------------------------------------------------------------------------------------------- what a run wrote
def written_files(path: str | os.PathLike) -> list[str]:
    """Every file below ``path`` (relative, ``/``-separated, sorted; symbolic links count as files and are not
    followed), but the manifest itself: what a run records as written by it."""
    root = Path(path)
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        out += [(rel / n).as_posix() for n in filenames]
        out += [(rel / d).as_posix() for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
    return sorted(f for f in out if f != MANIFEST)


#: what a run directory written before runs listed their files may hold (the tables, ``bench.json``, ``report/``'s
#: plots, text tables and index pages)
_KNOWN = set(TABLES) | {"bench.json", "tradeoff-ft.png"}


def _known_file(rel: str) -> bool:
    parts = rel.split("/")
    if len(parts) == 1:
        return rel in _KNOWN or (rel.startswith("tradeoff-ft") and rel.endswith(".png"))
    return parts[0] == "report" and (rel.endswith(".png") or parts[-1] in ("energy.txt", "curves.txt", "index.html"))


def foreign_files(path: str | os.PathLike) -> list[str]:
    """Files in the run (or bench) directory ``path`` that hybridsim did not write there: not in its manifest's
    ``files``, not a plot of ``hybridsim report`` (``report/``). A directory whose manifest lists no files (written
    before runs listed them, or killed) is judged by the names hybridsim writes (and a bench's runs by their own
    manifests). ``--force`` refuses to delete any of them."""
    root = Path(path)
    try:
        listed = read_manifest(root).get("files")
    except RunDirError:
        listed = None
    listed = set(listed) if isinstance(listed, list) and all(isinstance(f, str) for f in listed) else None
    out = []
    for entry in sorted(os.listdir(root)):
        full = root / entry
        if entry == MANIFEST:
            continue
        if full.is_dir() and not full.is_symlink():
            if listed is None and entry != "report" and (full / MANIFEST).is_file():
                out += [f"{entry}/{f}" for f in foreign_files(full)]  # an older bench's run of its own
                continue
            files = [f"{entry}/{f}" for f in written_files(full)] + (
                [f"{entry}/{MANIFEST}"] if (full / MANIFEST).exists() else [])
        else:
            files = [entry]
        out += [f for f in files if not ((listed is not None and f in listed) or _known_file(f))]
    return out


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, DIGEST_ALGORITHM).hexdigest()


def _identity_digest(manifest: dict) -> str:
    ident = {k: manifest.get(k) for k in IDENTITY}
    return hashlib.new(DIGEST_ALGORITHM, json.dumps(finite_json(ident), sort_keys=True,
                                                    separators=(",", ":")).encode()).hexdigest()


def digests(path: str | os.PathLike, manifest: dict) -> dict:
    """The manifest's ``digest`` record of the run in ``path``: the SHA-256 of each table of :data:`TABLES` it holds
    and of the manifest's :data:`IDENTITY` fields."""
    root = Path(path)
    return {"algorithm": DIGEST_ALGORITHM,
            "files": {name: _sha256(root / name) for name in TABLES if (root / name).is_file()},
            "identity": _identity_digest(manifest)}


def verify_digests(path: str | os.PathLike, manifest: dict | None = None, *, redo: str = "") -> None:
    """Raise :class:`RunDirError` unless the run in ``path`` is as it was written: every table it recorded a digest
    of is there, unchanged, no table appeared since, and its manifest's identity (kind, mode, backend, scenario, seed,
    partial) is the one recorded. ``redo``: how to make the run again, for the messages."""
    root = Path(path)
    m = read_manifest(root) if manifest is None else manifest
    rec = m.get("digest")
    again = f"; {redo}" if redo else ""
    if rec is None:
        raise RunDirError(f"{root}: its manifest records no digest of its tables (written before hybridsim recorded "
                          f"them, or edited), so nothing shows they are as the run wrote them{again}")
    files = rec.get("files") if isinstance(rec, dict) else None
    if (not isinstance(files, dict) or rec.get("algorithm") != DIGEST_ALGORITHM
            or not all(isinstance(v, str) for v in files.values())):
        raise RunDirError(f"{root / MANIFEST}: field 'digest' is not a {DIGEST_ALGORITHM} digest record{again}")
    changed = []
    for name in TABLES:
        p = root / name
        if name not in files:
            if os.path.lexists(p):
                changed.append(f"{name} (appeared after the run)")
            continue
        if not p.is_file():
            changed.append(f"{name} (missing)")
        elif _sha256(p) != files[name]:
            changed.append(name)
    if rec.get("identity") != _identity_digest(m):
        changed.append(f"{MANIFEST}'s kind, mode, backend, scenario, seed or partial")
    if changed:
        raise RunDirError(f"{root}: changed since the run completed: {', '.join(changed)} (its digest no longer "
                          f"matches){again}")


def refresh_digest(path: str | os.PathLike, name: str) -> None:
    """Record the new digest of table ``name`` in the manifest of the run in ``path`` (after hybridsim itself wrote
    the table again, e.g. ``describe-run --force``); nothing for a run without digests."""
    root = Path(path)
    m = read_manifest(root)
    rec = m.get("digest")
    if not isinstance(rec, dict) or not isinstance(rec.get("files"), dict):
        return
    rec["files"][name] = _sha256(root / name)
    if isinstance(m.get("files"), list) and name not in m["files"]:
        m["files"] = sorted(m["files"] + [name])
    write_json_atomic(root / MANIFEST, m)


# ------------------------------------------------------------------------------------------------- run description
DESCRIPTION_FORMAT = "hybridsim-run-description"
DESCRIPTION_VERSION = 1


@dataclass
class JobDescription:
    """One job of a run as a dataset sees it.

    Attributes:
        name, ranks: as in the scenario
        workload:    workload kind (``milc``, ``lammps``, ``nearest_neighbor``, ...)
        params:      the workload's parameters (the scenario's ``workload`` section without ``kind``; ``{}`` unknown)
        iterations:  iterations the job was set to run (``None``: background traffic, or unknown)
        terminals:   terminal id of rank 0, 1, ... (``None``: unknown)
        volumes:     bytes sent per iteration from the workload definition, mean over up to four evenly spread
                     ranks (:func:`hybridsim.workloads.workload_volumes`), one per iteration (``None``: unknown)
    """

    name: str
    workload: str
    params: dict
    ranks: int
    iterations: int | None
    terminals: list[int] | None
    volumes: list[float] | None


@dataclass
class RunDescription:
    """What the surrogate pipeline needs to know about a run (``description.json``), written once by whoever made the
    run directory (:func:`hybridsim.runner.run_scenario`, :func:`codes_bridge.importer.import_codes_run`) so that
    readers never rebuild scenarios. ``sampling_interval`` (ns) and ``port_features`` describe ``ports.parquet``
    (``None`` when the run wrote none)."""

    shape: DragonflyShape
    jobs: list[JobDescription]
    sampling_interval: float | None = None
    port_features: list[str] | None = None

    def job(self, name: str) -> JobDescription | None:
        return next((j for j in self.jobs if j.name == name), None)

    def to_dict(self) -> dict:
        s = self.shape
        return {"format": DESCRIPTION_FORMAT, "version": DESCRIPTION_VERSION,
                "topology": {"groups": s.groups, "routers_per_group": s.routers_per_group,
                             "terminals_per_router": s.terminals_per_router,
                             "global_channels_per_router": s.global_channels_per_router},
                "sampling": {"interval_ns": self.sampling_interval, "port_features": self.port_features},
                "jobs": [{"name": j.name, "workload": j.workload, "params": j.params, "ranks": j.ranks,
                          "iterations": j.iterations, "terminals": j.terminals, "volumes": j.volumes}
                         for j in self.jobs]}


def write_description(path: str | os.PathLike, desc: RunDescription) -> Path:
    """Write ``desc`` as ``description.json`` of the run directory ``path`` (atomically)."""
    p = Path(path) / DESCRIPTION
    write_json_atomic(p, desc.to_dict())
    return p


class _Fields:
    """Typed field access for :func:`read_description`: a missing or mistyped field raises :class:`RunDirError`
    naming the file and the field's path."""

    def __init__(self, path: Path):
        self.path = path

    def get(self, obj: dict, key: str, where: str, types: tuple, nullable: bool = False):
        name = f"{where}.{key}" if where else key
        if not isinstance(obj, dict) or key not in obj:
            raise RunDirError(f"{self.path}: missing field {name!r}")
        v = obj[key]
        if v is None and nullable:
            return None
        if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
            want = " or ".join(t.__name__ for t in types) + (" or null" if nullable else "")
            raise RunDirError(f"{self.path}: field {name!r} must be {want}, not {type(v).__name__}")
        return v

    def numbers(self, obj: dict, key: str, where: str, kind: type, nullable: bool = True):
        v = self.get(obj, key, where, (list,), nullable)
        if v is None:
            return None
        ok = (int,) if kind is int else (int, float)
        bad = next((i for i, x in enumerate(v) if not isinstance(x, ok) or isinstance(x, bool)), None)
        if bad is not None:
            raise RunDirError(f"{self.path}: field '{where}.{key}[{bad}]' must be a number, not {v[bad]!r}")
        return [kind(x) for x in v]


def read_description(path: str | os.PathLike) -> RunDescription:
    """The :class:`RunDescription` of run directory ``path`` (or of a ``description.json``). Raises
    :class:`RunDirError` naming the file, and the field for one that is missing or of the wrong type; run
    directories written before descriptions existed have none and are named as such."""
    from .topology import DragonflyShape

    p = Path(path)
    if p.is_dir():
        p = p / DESCRIPTION
    data = load_json_object(p, DESCRIPTION, f"missing (run directories written before hybridsim described its runs "
                                            f"have no {DESCRIPTION}: write it with `hybridsim describe-run RUN_DIR`, "
                                            "or import the CODES run again with `hybridsim import-codes`)")
    f = _Fields(p)
    if data.get("format") != DESCRIPTION_FORMAT:
        raise RunDirError(f"{p}: not a {DESCRIPTION_FORMAT} file")
    if data.get("version") != DESCRIPTION_VERSION:
        raise RunDirError(f"{p}: description version {data.get('version')!r} not supported "
                          f"(expected {DESCRIPTION_VERSION})")
    topo = f.get(data, "topology", "", (dict,))
    sizes = []
    for k in ("groups", "routers_per_group", "terminals_per_router", "global_channels_per_router"):
        sizes.append(f.get(topo, k, "topology", (int,)))
        if sizes[-1] < 1:
            raise RunDirError(f"{p}: field 'topology.{k}' must be >= 1, not {sizes[-1]}")
    sampling = f.get(data, "sampling", "", (dict,))
    interval = f.get(sampling, "interval_ns", "sampling", (int, float), nullable=True)
    features = f.get(sampling, "port_features", "sampling", (list,), nullable=True)
    bad = next((i for i, x in enumerate(features or []) if not isinstance(x, str)), None)
    if bad is not None:
        raise RunDirError(f"{p}: field 'sampling.port_features[{bad}]' must be a string, not {features[bad]!r}")
    jobs = []
    for i, j in enumerate(f.get(data, "jobs", "", (list,))):
        w = f"jobs[{i}]"
        if not isinstance(j, dict):
            raise RunDirError(f"{p}: field {w!r} must be an object")
        jobs.append(JobDescription(
            name=f.get(j, "name", w, (str,)), workload=f.get(j, "workload", w, (str,)),
            params=f.get(j, "params", w, (dict,)), ranks=f.get(j, "ranks", w, (int,)),
            iterations=f.get(j, "iterations", w, (int,), nullable=True),
            terminals=f.numbers(j, "terminals", w, int), volumes=f.numbers(j, "volumes", w, float)))
    return RunDescription(DragonflyShape(*sizes), jobs, None if interval is None else float(interval), features)

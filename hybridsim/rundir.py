"""Run directories: the one place results land.

Layout::

    OUTDIR/
      manifest.json       resolved scenario, seed, versions, git revision, command line, times, status
      iterations.parquet  IterationRecord rows (+ mode / prediction columns for hybrid runs)
      ports.parquet       port samples, long format (see hybridsim.records)
      summary.json        per-job completion times, event counts, wall-time split

``manifest.json`` is written first with ``status: "running"`` and rewritten at the end with ``"completed"`` or
``"failed"`` plus the reason. Tables are written atomically (temp file + rename) only once complete, so a failed or
interrupted run never leaves a table that looks complete.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

MANIFEST = "manifest.json"
ITERATIONS = "iterations.parquet"
PORTS = "ports.parquet"
SUMMARY = "summary.json"

_PACKAGES = ("hybridsim", "numpy", "torch", "torch-geometric", "transformers", "pydantic", "pyarrow", "simpy",
             "grpcio", "pyzmq")


class RunDirError(RuntimeError):
    pass


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
    tmp = path.with_name(path.name + ".partial")
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=_json_default)
        fh.write("\n")
    os.replace(tmp, path)


def _json_default(o):
    import numpy as np

    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


class RunDir:
    """A run directory being written. Use :meth:`create`, then :meth:`complete` or :meth:`fail`."""

    def __init__(self, path: Path, manifest: dict):
        self.path = Path(path)
        self.manifest = manifest

    @classmethod
    def create(cls, path: str | os.PathLike, *, kind: str, scenario: dict | None = None, seed: int | None = None,
               force: bool = False, argv: list[str] | None = None, extra: dict | None = None) -> "RunDir":
        path = Path(path)
        if path.exists():
            if not force:
                raise RunDirError(f"{path} already exists; choose another -o or pass --force to overwrite it")
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        path.mkdir(parents=True)
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
        rd = cls(path, manifest)
        rd.write_manifest()
        return rd

    def write_manifest(self) -> None:
        write_json_atomic(self.path / MANIFEST, self.manifest)

    def file(self, name: str) -> Path:
        return self.path / name

    def complete(self, **extra) -> None:
        self.manifest.update(extra)
        self.manifest["status"] = "completed"
        self.manifest["end_time"] = now_iso()
        self.write_manifest()

    def fail(self, reason: str, **extra) -> None:
        """Mark failed; remove any table that may be incomplete (``*.partial``)."""
        for p in self.path.glob("*.partial"):
            p.unlink(missing_ok=True)
        self.manifest.update(extra)
        self.manifest["status"] = "failed"
        self.manifest["reason"] = reason
        self.manifest["end_time"] = now_iso()
        self.write_manifest()


def read_manifest(path: str | os.PathLike) -> dict:
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST
    try:
        with open(p) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise RunDirError(f"{p}: no manifest.json (is this a hybridsim run directory?)") from None
    except json.JSONDecodeError as exc:
        raise RunDirError(f"{p}: corrupt manifest.json: {exc}") from None

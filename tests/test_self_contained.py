"""The repository stands on its own: no file refers to a folder beside the checkout or to documents that are not in
it (the design notes, CODES formats and workload notes live in docs/). Only ``.ci/run`` may name the reference data
folder CI keeps beside the checkout. Works on a bare clone (``git ls-files``) and on a copy without ``.git`` (a walk
that skips what .gitignore ignores)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

ALLOWED = {".ci/run"}
#: a folder beside the checkout, or a document that exists only there (built so this file does not match itself)
FORBIDDEN = re.compile("|".join([
    re.escape(".." + "/shared"), re.escape("shared" + "/data/"), re.escape("/work" + "/shared"),
    r"(?<![\w/.-])(DESIGN|STYLE|WORKLOADS|ROSS-STATS-FORMAT)\.md\b", r"(?<![\w/.-])FORMATS\.txt\b",
]).encode())
SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", "build", "dist", "results", ".venv", "out"}


def repo_files(repo: Path) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             capture_output=True, check=True).stdout
        return [p for p in out.decode().split("\0") if p and (repo / p).is_file()]
    except (OSError, subprocess.CalledProcessError):  # no git, or a copy without .git
        files = []
        for root, dirs, names in os.walk(repo):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            files += [os.path.relpath(os.path.join(root, n), repo) for n in names
                      if not n.endswith((".pyc", ".partial"))]
        return files


def test_nothing_refers_outside_the_repository(repo):
    files = repo_files(repo)
    assert "tests/test_self_contained.py" in files and len(files) > 100
    hits = []
    for rel in files:
        if rel in ALLOWED:
            continue
        data = (repo / rel).read_bytes()
        for m in FORBIDDEN.finditer(data):
            line = data.count(b"\n", 0, m.start()) + 1
            hits.append(f"{rel}:{line}: {m.group().decode()}")
    assert not hits, "references to files outside the repository (cite docs/ instead):\n" + "\n".join(hits)


def test_the_check_finds_a_reference(tmp_path):
    """The pattern catches each kind of reference it is meant to catch, and leaves docs/ citations alone."""
    bad = ["see " + ".." + "/shared/x", "data in " + "shared" + "/data/codes", "/work" + "/shared/data",
           "(" + "DESIGN" + ".md section 4)", "``" + "FORMATS" + ".txt``", "WORKLOADS" + ".md §7"]
    good = ["docs/design.md §4", "docs/codes-formats.md", "a shared link", "README.md"]
    assert all(FORBIDDEN.search(s.encode()) for s in bad)
    assert not any(FORBIDDEN.search(s.encode()) for s in good)

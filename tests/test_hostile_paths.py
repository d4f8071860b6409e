"""Paths a careless or hostile user names (issue 35, item 3): a device (``/dev/zero``, ``/dev/urandom``), a FIFO with
no writer, a gzip bomb. Every command that reads a path refuses them at once with exit 2 and the path named: only
regular files are read, and what is read is bounded (:mod:`hybridsim_common.files`). Each command runs in a
subprocess under a timeout, so a regression (a hang, a memory blow-up) fails the test instead of stalling the run."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           HF_HUB_OFFLINE="1")
TOPO = "topology: {groups: 9, routers_per_group: 4, terminals_per_router: 2, global_channels_per_router: 2%s}\n"
JOB = "jobs:\n  - {name: a, ranks: 4, iterations: 2, workload: {kind: allreduce}}\n"


def _hybridsim(args, cwd, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hybridsim", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def bombs(tmp_path_factory) -> Path:
    """``bomb.gz`` (64 MiB of zeros, no newline, in 64 KB) and ``lines.gz`` (64 MiB of short malformed lines)."""
    d = tmp_path_factory.mktemp("bombs")
    for name, chunk in (("bomb.gz", b"0" * (1 << 22)), ("lines.gz", b"0\n" * (1 << 21))):
        with gzip.open(d / name, "wb", compresslevel=9) as fh:
            for _ in range(16):
                fh.write(chunk)
    return d


@pytest.fixture
def hostile(tmp_path, bombs) -> Path:
    """``zero``, ``random`` (links to the devices), ``fifo`` (no writer), the :func:`bombs` and ``base.yaml``."""
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "random").symlink_to("/dev/urandom")
    os.mkfifo(tmp_path / "fifo")
    for name in ("bomb.gz", "lines.gz"):
        (tmp_path / name).symlink_to(bombs / name)
    (tmp_path / "base.yaml").write_text(TOPO % "" + JOB)
    return tmp_path


DEVICES = {"zero": "not a regular file (a device)", "random": "not a regular file (a device)",
           "fifo": "not a regular file (a FIFO)"}


def _check(r: subprocess.CompletedProcess, *fragments: str) -> None:
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    for f in fragments:
        assert f in r.stderr, r.stderr


@pytest.mark.parametrize("kind", sorted(DEVICES))
@pytest.mark.parametrize("command", ["schedule", "scenario-from-swf", "scenario-from-swf --system", "validate",
                                     "run", "connections", "placement"])
def test_a_device_or_fifo_is_refused_without_blocking(hostile, command, kind):
    path = hostile / (kind + (".swf" if command in ("schedule", "scenario-from-swf") else ".yaml"))
    path.symlink_to(hostile / kind)
    if command == "schedule":
        args = ["schedule", str(path), "-o", "out"]
    elif command == "scenario-from-swf":
        args = ["scenario-from-swf", str(path), "--system", "base.yaml", "-o", "out.yaml"]
    elif command == "scenario-from-swf --system":
        (hostile / "t.swf").write_text("1 0 0 10 4 -1 -1 4 20 -1 1 1 1 1 1 -1 -1 -1\n")
        args = ["scenario-from-swf", "t.swf", "--system", str(path), "-o", "out.yaml"]
    elif command in ("validate", "run"):
        args = [command, str(path)] + (["-o", "out", "--no-progress"] if command == "run" else [])
    elif command == "connections":
        (hostile / "s.yaml").write_text(TOPO % f", connections: {{intra: {kind}, inter: {kind}}}" + JOB)
        args, path = ["validate", "s.yaml"], hostile / kind
    else:
        (hostile / "s.yaml").write_text(TOPO % "" + JOB + f"placement: {{policy: file, file: {kind}}}\n")
        args, path = ["validate", "s.yaml"], hostile / kind
    r = _hybridsim(args, hostile)
    if command in ("connections", "placement"):  # the file is asked for before it is read
        _check(r, str(path), "not a regular file")
    else:
        _check(r, str(path), DEVICES[kind])
    assert not (hostile / "out").exists() and not (hostile / "out.yaml").exists()


@pytest.mark.parametrize("bomb,why", [("bomb.gz", "line 1 is longer than 1,048,576 characters"),
                                      ("lines.gz", "reading stopped after")])
@pytest.mark.parametrize("command", ["schedule", "scenario-from-swf"])
def test_a_gzip_bomb_is_refused_within_its_bounds(hostile, command, bomb, why):
    path = hostile / bomb.replace(".gz", ".swf.gz")
    path.symlink_to(hostile / bomb)
    args = ["schedule", str(path), "-o", "out"] if command == "schedule" else \
        ["scenario-from-swf", str(path), "--system", "base.yaml", "-o", "out.yaml"]
    r = _hybridsim(args, hostile)
    _check(r, str(path), why)


def test_text_lines_bounds():
    """The bounded reader itself: lines, a byte bound on decompressed data, a truncated gzip."""
    import tempfile

    from hybridsim_common.files import FileRefused, read_bytes, text_lines

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.gz"
        p.write_bytes(gzip.compress(b"ab\ncd\n" * 10))
        assert list(text_lines(p, max_bytes=60, max_line=3)) == ["ab\n", "cd\n"] * 10
        with pytest.raises(FileRefused, match="more than 59 bytes once decompressed"):
            list(text_lines(p, max_bytes=59, max_line=3))
        with pytest.raises(FileRefused, match="line 1 is longer than 1 characters"):  # the newline not counted
            list(text_lines(p, max_bytes=60, max_line=1))
        p.write_bytes(gzip.compress(b"ab\ncd\n" * 10)[:-12])
        with pytest.raises(FileRefused, match="truncated"):
            list(text_lines(p, max_bytes=60, max_line=3))
        q = Path(d) / "b"
        q.write_bytes(b"x" * 11)
        assert read_bytes(q, 11) == b"x" * 11
        with pytest.raises(FileRefused, match="larger than 10 bytes"):
            read_bytes(q, 10)
        with pytest.raises(FileRefused, match="a folder"):
            read_bytes(d, 10)


def test_schedule_takes_the_limit_its_message_names(tmp_path, capsys):
    """Issue 35, item 10: schedule said "raise it with --limit yaml_bytes=N" and had no --limit."""
    from hybridsim.cli import main

    sc = tmp_path / "s.yaml"
    sc.write_text(TOPO % "" + "scheduler: {queue: fcfs}\n" + JOB)
    assert main(["schedule", str(sc), "-o", str(tmp_path / "o"), "--limit", "yaml_bytes=100"]) == 2
    err = capsys.readouterr().err
    assert "larger than 100 bytes" in err and "--limit yaml_bytes=N" in err, err
    assert main(["schedule", str(sc), "-o", str(tmp_path / "o"), "--limit", f"yaml_bytes={10**6}"]) == 0

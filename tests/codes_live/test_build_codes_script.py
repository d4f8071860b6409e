"""scripts/build-codes.sh and docker/Dockerfile.codes without building anything (runs everywhere, CI included):
option handling, the pinned commits the docs quote, and the image building CODES with the same script."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "build-codes.sh"
PINS = {"codes": "CODES_COMMIT", "ROSS": "ROSS_COMMIT", "SWM": "SWM_COMMIT", "argobots": "ARGOBOTS_COMMIT"}

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="build-codes.sh tests: no bash on this machine")


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, **kw)


def _pins() -> dict[str, str]:
    text = SCRIPT.read_text()
    out = {}
    for name, var in PINS.items():
        m = re.search(rf"^{var}=\$\{{{var}:-([0-9a-f]{{40}})\}}$", text, re.M)
        assert m, f"{var} is not pinned to a full commit hash in {SCRIPT.name}"
        out[name] = m.group(1)
    return out


def test_script_parses_and_help_lists_the_pins():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    proc = _run("--help")
    assert proc.returncode == 0
    for name, commit in _pins().items():
        assert re.search(rf"^\s+{name}\s+{commit}$", proc.stdout, re.M), (name, proc.stdout)
    for opt in ("--prefix", "--jobs", "--codes-src", "--ross-src", "--swm-src", "--argobots-src", "--no-patches"):
        assert opt in proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unknown option: --bogus"),
    (["--jobs", "0"], "--jobs must be a positive integer"),
    (["--prefix"], "--prefix needs a value"),
])
def test_bad_options_exit_2_before_doing_anything(tmp_path, args, message):
    proc = _run(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created


def test_missing_source_folder_is_refused(tmp_path):
    proc = _run("--prefix", str(tmp_path / "p"), "--codes-src", str(tmp_path / "nope"), "--no-deps")
    assert proc.returncode == 2
    assert f"--codes-src: no such folder: {tmp_path / 'nope'}" in proc.stderr


def test_patches_are_plain_unified_diffs_of_codes_files():
    """scripts/codes-patches: NNNN-name.patch files, applied in name order with ``patch -p1`` to a copy of CODES'
    source; each one a unified diff of CODES files (a/... b/...), adding nothing outside CODES' own folders."""
    patches = sorted((REPO / "scripts" / "codes-patches").glob("*.patch"))
    assert patches and all(re.fullmatch(r"\d{4}-[a-z0-9-]+\.patch", p.name) for p in patches)
    for p in patches:
        files = re.findall(r"^\+\+\+ b/(\S+)", p.read_text(), re.M)
        assert files and all(f.split("/")[0] in ("src", "codes") for f in files), (p.name, files)
        assert re.findall(r"^--- a/(\S+)", p.read_text(), re.M) == files  # changes existing files only


def test_script_without_its_patches_folder_is_refused(tmp_path):
    """A copy of the script without scripts/codes-patches would build CODES without the stand-in: refused unless
    --no-patches says so (the image copies both)."""
    (tmp_path / "s").mkdir()
    shutil.copy(SCRIPT, tmp_path / "s" / "build-codes.sh")
    proc = subprocess.run(["bash", str(tmp_path / "s" / "build-codes.sh"), "--prefix", str(tmp_path / "p"),
                           "--no-deps"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no CODES patches folder" in proc.stderr and "--no-patches" in proc.stderr
    assert not (tmp_path / "p").exists()


def test_docs_quote_the_pinned_commits():
    doc = (REPO / "docs" / "codes.md").read_text()
    for name, commit in _pins().items():
        assert commit in doc, f"docs/codes.md does not name the pinned {name} commit {commit}"


def test_codes_image_builds_codes_with_the_script():
    df = (REPO / "docker" / "Dockerfile.codes").read_text()
    assert "COPY scripts/build-codes.sh" in df
    assert "COPY scripts/codes-patches /tmp/codes-patches" in df  # beside the script, where it looks for them
    run = re.search(r"^RUN bash /tmp/build-codes.sh --prefix (\S+)", df, re.M)
    assert run, "Dockerfile.codes does not build CODES with scripts/build-codes.sh"
    assert f"CODES_BIN_DIR={run.group(1)}/bin" in df  # the bin_dir the script prints
    assert "pip install -e ." in df
    doc = (REPO / "docs" / "codes.md").read_text()
    assert "docker build -f docker/Dockerfile.codes" in doc

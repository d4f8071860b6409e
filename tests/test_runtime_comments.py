"""The run times that shipped comments and docs state agree with the measurements in benchmarks/RESULTS_runtimes.md
(written by benchmarks/runtime_comments.py) within its factor: no timing here, only the stated figures against the
recorded ones, so a figure cannot drift 10-100x from what was measured again."""

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
import runtime_comments  # noqa: E402

STATED = re.compile(r"about ([0-9.]+) s of CPU", re.I)


def recorded() -> dict[str, float]:
    """Case name -> CPU s median, from RESULTS_runtimes.md's table."""
    out = {}
    for line in (REPO / "benchmarks" / "RESULTS_runtimes.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0] in runtime_comments.CLAIMS:
            out[cells[0]] = float(cells[3])
    return out


def stated(text: str, case: str, path: str) -> list[float]:
    """The figures a file states for a case: a scenario's opening comment; in a Markdown file, the lines that name
    the case's scenario."""
    if path.endswith(".yaml"):
        lines = []
        for line in text.splitlines():
            if not line.startswith("#"):
                break
            lines.append(line)
    else:
        key = runtime_comments.CLAIMS[case][0][1].rsplit("/", 1)[-1].removesuffix(".yaml")
        lines = [line for line in text.splitlines() if key in line]
    return [float(x) for x in STATED.findall("\n".join(lines))]


def test_every_case_is_recorded():
    assert set(recorded()) == set(runtime_comments.CLAIMS)


@pytest.mark.parametrize("case,path", [(c, p) for c, (_cmd, files) in runtime_comments.CLAIMS.items()
                                       for p in files])
def test_stated_run_time_is_the_measured_one(case, path):
    figures = stated((REPO / path).read_text(), case, path)
    assert figures, f"{path} states no 'about N s of CPU' for {case}"
    measured = recorded()[case]
    for f in figures:
        assert measured / runtime_comments.FACTOR <= f <= measured * runtime_comments.FACTOR, (path, f, measured)


def test_the_check_would_catch_the_old_comments():
    old = "# Quickstart ...\n# with two small jobs sharing it. Runs in about 60 s of CPU on 2 cores.\nname: q\n"
    f = stated(old, "quickstart", "examples/quickstart.yaml")
    assert f == [60.0] and not f[0] <= recorded()["quickstart"] * runtime_comments.FACTOR
    assert stated("# no figure\nname: q\n# about 1 s of CPU after the header\n", "quickstart", "x.yaml") == []

"""What a user gets from the package: the files a wheel ships (no build-machine paths in them, the examples inside),
`hybridsim example list|copy`, LICENSE and CITATION.cff in step with pyproject, the README's reference scenario."""

import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml

from hybridsim.cli import main

#: an absolute path of a machine: a POSIX path under a root folder where build machines keep files, a Windows drive
ABSOLUTE = re.compile(r"(?<![\w.:/~-])/(?:work|home|root|tmp|Users|mnt|scratch|srv|data|opt|var|net|gpfs|lustre)/\w"
                      r"|\b[A-Za-z]:\\\\?\w")


def absolute_paths(text: str) -> list[str]:
    return [text[max(0, m.start() - 20):m.end() + 20] for m in ABSOLUTE.finditer(text)]


@pytest.fixture(scope="module")
def built(repo, tmp_path_factory):
    """The files a wheel ships (setuptools' build_py: packages, package data and the examples) from a copy of the
    checkout: the wheel less the compiled core and its metadata, built without compiling anything."""
    src = tmp_path_factory.mktemp("src")
    for name in ("setup.py", "pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(repo / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "_examples", "*.egg-info")
    for d in ("hybridsim_common", "hybridsim", "surrogate", "controllers", "codes_bridge", "examples"):
        shutil.copytree(repo / d, src / d, ignore=skip)
    out = tmp_path_factory.mktemp("lib")
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)], cwd=src,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_no_shipped_file_holds_an_absolute_path(built):
    files = [f for f in built.rglob("*") if f.is_file()]
    assert len(files) > 100 and (built / "surrogate/checkpoints/pretrained/pretrain.json").is_file()
    found = {}
    for f in files:
        try:
            text = f.read_text()
        except UnicodeDecodeError:  # weights: binary
            continue
        if absolute_paths(text):
            found[str(f.relative_to(built))] = absolute_paths(text)
    assert not found


def test_the_absolute_path_check_finds_one():
    assert absolute_paths('{"corpus": ["/work/corpus/pretrain"]}')
    assert absolute_paths("data in C:\\Users\\me\\runs")
    assert absolute_paths("home is /home/alice/x, /Users/bob/y") and len(absolute_paths("/home/a/x /Users/b/y")) == 2
    assert not absolute_paths("results/quickstart, ../other, http://www.cs.huji.ac.il/labs/parallel/workload/, "
                              "s/data/x, 1/tmp/x, 12 B/s")


def test_the_wheel_carries_every_example_and_finds_them(repo, built):
    shipped = built / "hybridsim" / "_examples"
    for f in (repo / "examples").rglob("*.yaml"):
        assert (shipped / f.relative_to(repo / "examples")).read_bytes() == f.read_bytes()
    assert (shipped / "policies" / "every_other.py").is_file()
    # the installed package (the built tree alone on the path) resolves its own copy, not a checkout's
    r = subprocess.run([sys.executable, "-c", "from hybridsim.examples import examples_dir; print(examples_dir())"],
                       cwd=built, capture_output=True, text=True, env={"PYTHONPATH": str(built), "PATH": "/usr/bin"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(shipped)


def test_example_list_and_copy(repo, tmp_path, capsys):
    assert main(["example", "list"]) == 0
    listed = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    scenarios = {f.stem for f in (repo / "examples").glob("*.yaml")}
    assert scenarios <= set(listed) and "machines/haswell-ep" in listed and "policies/every_other" in listed
    assert listed["quickstart"].startswith("Quickstart: the 72-node Dragonfly")
    assert all(len(k) + 2 + len(v) <= 120 for k, v in listed.items())

    assert main(["example", "copy", "quickstart", str(tmp_path / "mine")]) == 0
    copied = tmp_path / "mine" / "quickstart.yaml"
    assert copied.read_bytes() == (repo / "examples" / "quickstart.yaml").read_bytes()
    assert capsys.readouterr().out.strip() == str(copied)
    assert main(["validate", str(copied)]) == 0
    # not replaced without --force; an unknown name gets the closest one; nothing half-written
    copied.write_text("mine\n")
    assert main(["example", "copy", "quickstart", str(tmp_path / "mine")]) == 2
    assert "exists (use --force" in capsys.readouterr().err and copied.read_text() == "mine\n"
    assert main(["example", "copy", "quickstart", str(tmp_path / "mine"), "--force"]) == 0
    assert copied.read_bytes() == (repo / "examples" / "quickstart.yaml").read_bytes()
    assert main(["example", "copy", "quickstrat", str(tmp_path / "other")]) == 2
    assert "did you mean quickstart?" in capsys.readouterr().err and not (tmp_path / "other").exists()
    assert main(["example", "copy", "machines/haswell-ep", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "haswell-ep.yaml").is_file()
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["quickstart.yaml"]


def test_license_and_citation_match_pyproject(repo):
    project = tomllib.loads((repo / "pyproject.toml").read_text())["project"]
    assert project["license"] == {"text": "BSD-3-Clause"}
    text = (repo / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License") and "Neither the name of the copyright holder" in text
    cff = yaml.safe_load((repo / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "BSD-3-Clause"
    assert cff["version"] == project["version"] and cff["title"].startswith("hybridsim")
    assert cff["authors"] and cff["message"]


def test_the_readmes_reference_scenario_validates_as_copied(repo, tmp_path):
    readme = (repo / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, re.S) if b.startswith("name: my-study"))
    f = tmp_path / "my-study.yaml"
    f.write_text(block)
    assert main(["validate", str(f)]) == 0

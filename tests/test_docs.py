"""The README's two commands, CI and the Dockerfile cannot drift apart."""

import re


def readme_blocks(repo):
    text = (repo / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_readme_commands_match_ci_and_docker(repo):
    blocks = readme_blocks(repo)
    run_cmd = next(b for b in blocks if "examples/quickstart.yaml" in b and "pip install" in b).strip()
    test_cmd = next(b for b in blocks if "pytest" in b and "pip install" in b).strip()
    install_run, _, _ = run_cmd.partition(" && ")
    install_test, _, pytest_cmd = test_cmd.partition(" && ")
    ci = (repo / ".ci" / "run").read_text()
    assert install_test in ci and pytest_cmd in ci
    docker = (repo / "docker" / "Dockerfile").read_text()
    assert f"RUN {install_run}" in docker
    assert "examples/quickstart.yaml" in docker


def test_reference_data_command_matches_ci(repo):
    """The README's reference-data command is the one CI runs, with the variable tests/refdata.py reads."""
    import refdata

    readme = (repo / "README.md").read_text()
    ci = (repo / ".ci" / "run").read_text()
    cmd = "python -m pytest -q -rs -m reference_data tests"
    assert f"{refdata.ENV}=/path/to/data {cmd}" in readme
    assert cmd in ci and f"{refdata.ENV}=" in ci


def test_docker_images_take_cpu_torch_and_leave_host_builds_out(repo):
    """Both images install the pinned torch from the CPU-only index the README names; .dockerignore keeps a host-built
    native core, build folders and .git out of the build context."""
    import tomllib

    pin = next(d for d in tomllib.loads((repo / "pyproject.toml").read_text())["project"]["dependencies"]
               if d.startswith("torch"))
    readme = (repo / "README.md").read_text()
    cpu = "https://download.pytorch.org/whl/cpu"
    assert f"pip install --index-url {cpu} {pin}" in readme
    for name in ("Dockerfile", "Dockerfile.codes"):
        text = (repo / "docker" / name).read_text()
        assert f"ARG TORCH_INDEX={cpu}" in text and f'pip install --index-url "${{TORCH_INDEX}}" "{pin}"' in text
        assert text.index("TORCH_INDEX}") < text.index("RUN pip install -e .")
    ignored = (repo / ".dockerignore").read_text().split()
    assert {"**/*.so", ".git", "build", "*.egg-info", "**/__pycache__", "results"} <= set(ignored)


def test_codes_image_has_the_runtime_libraries_of_what_build_codes_links(repo):
    """The CODES image's last stage installs the run-time package of every MPI/ZeroMQ development package
    scripts/build-codes.sh builds against (Debian bookworm names), and the mount recipes mount the scenario."""
    script = (repo / "scripts" / "build-codes.sh").read_text()
    runtime = {"libopenmpi-dev": "libopenmpi3", "openmpi-bin": "openmpi-bin", "libzmq3-dev": "libzmq5"}
    assert all(dev in script for dev in runtime)
    codes = (repo / "docker" / "Dockerfile.codes").read_text()
    last_stage = codes[codes.rindex("\nFROM "):]
    assert all(lib in last_stage.split() for lib in runtime.values())
    plain = (repo / "docker" / "Dockerfile").read_text()
    assert "openmpi-bin libopenmpi3 libzmq5" in plain
    for text in (plain, codes, (repo / "README.md").read_text()):
        assert '-v "$PWD:/work"' in text

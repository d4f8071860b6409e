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

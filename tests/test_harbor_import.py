"""Reading Harbor tasks the way their Dockerfiles and test.sh mean them: the
parser cases that were refused for things our sandbox has, the standard
Harbor verifier (uv, uvx, pytest) run offline from the toolchain, and the
task's own resources (memory) carried to the sandbox."""

import json
import shutil
from pathlib import Path

import pytest

from clawloop_assets.harbor.task_format import (
    _parse_dockerfile,
    harbor_verifier_mounts,
    import_harbor_task,
    task_memory_bytes,
)
from clawloop_assets.harbor.toolchain import ensure_toolchain
from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.task_bundle import load_task_bundle
from resources.sandbox import BubblewrapSandbox

RUNNABLE = Path(__file__).parent / "harbor_tasks" / "count-error-lines"
# The standard Harbor test.sh: its toolchain from the network, then pytest through uvx.
STANDARD_TEST_SH = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
if [ "$PWD" = "/" ]; then echo "no WORKDIR"; exit 1; fi
uvx \\
  -p 3.13 \\
  -w pytest==8.4.1 \\
  -w pytest-json-ctrf==0.3.5 \\
  pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
TEST_OUTPUTS = """from pathlib import Path

def test_error_count():
    assert Path("error_count.txt").read_text().strip() == "3"
"""


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def parse(tmp_path: Path, dockerfile: str):
    context = tmp_path / "environment"
    context.mkdir(exist_ok=True)
    (context / "Dockerfile").write_text(dockerfile)
    return _parse_dockerfile(context / "Dockerfile", context)


def task_copy(tmp_path: Path, files: dict[str, str]) -> Path:
    src = Path(shutil.copytree(RUNNABLE, tmp_path / "src" / RUNNABLE.name))
    for rel, text in files.items():
        (src / rel).write_text(text)
    return src


def test_from_with_a_platform_flag_names_the_image(tmp_path):
    env = parse(tmp_path, "FROM --platform=linux/amd64 python:3.11-slim AS base\nWORKDIR /app\n")
    assert env.base_image == "python:3.11-slim" and env.reasons == []


def test_quoted_shell_in_run_is_parsed_as_shell(tmp_path):
    env = parse(tmp_path, 'FROM python:3.11-slim\nWORKDIR /app\n'
                          'RUN python3 -c "import sys; print(sys.version)" && apt-get install -y psmisc 2>&1 >/dev/null\n')
    assert not any("No closing quotation" in r or "cannot parse" in r for r in env.reasons), env.reasons
    assert list(env.apt) == ["psmisc"]
    assert env.reasons == [f"{tmp_path}/environment/Dockerfile:3: `python3 -c 'import sys; print(sys.version)'` "
                           "is a build step our sandbox cannot replay"]


def test_here_document_lines_are_not_instructions(tmp_path):
    env = parse(tmp_path, "FROM python:3.11-slim\nWORKDIR /app\nCOPY <<EOF notes.txt\nFROM not-a-stage\nEOF\n"
                          "RUN <<-SCRIPT\n\tFROM neither\nSCRIPT\n")
    assert not any("second FROM" in r for r in env.reasons), env.reasons
    assert env.inline_files == {"/app/notes.txt": "FROM not-a-stage\n"}
    assert env.reasons == [f"{tmp_path}/environment/Dockerfile:6: RUN with a here-document is a build step "
                           "our sandbox cannot replay"]


def test_env_symlinked_commands_and_a_workspace_workdir_are_understood(tmp_path):
    env = parse(tmp_path, "FROM ubuntu:24.04\nENV TEST_DIR=/tests PYTHONPATH=/workspace:$PYTHONPATH\n"
                          "ENV LEGACY value with spaces\nWORKDIR /usr/local/bin\nRUN ln -s python3 python\n"
                          "WORKDIR /workspace\n")
    assert env.reasons == []
    assert env.variables == {"TEST_DIR": "/tests", "PYTHONPATH": "/workspace:", "LEGACY": "value with spaces"}
    assert "python" in env.binaries and env.workdir == "/workspace"


def test_packages_are_judged_by_what_is_installed_not_by_their_names(sandbox, tmp_path):
    """binutils provides objdump, not a `binutils` command; pyOpenSSL is
    imported as OpenSSL: both are installed here, so the task runs."""
    dockerfile = (RUNNABLE / "environment" / "Dockerfile").read_text().replace(
        "install -y --no-install-recommends grep", "install -y --no-install-recommends grep binutils psmisc")
    dockerfile += "RUN pip install --break-system-packages pyopenssl==0.0.1 PyYAML\n"
    result = import_harbor_task(task_copy(tmp_path, {"environment/Dockerfile": dockerfile}), tmp_path / "out", sandbox)
    assert result.runnable, result.reasons
    assert any("pyopenssl 0.0.1 pinned" in a for a in result.adaptations), result.adaptations


def test_the_standard_harbor_verifier_runs_offline_and_says_what_it_adapted(sandbox, tmp_path):
    ensure_toolchain()  # what `make setup` does
    src = task_copy(tmp_path, {"tests/test.sh": STANDARD_TEST_SH, "tests/test_outputs.py": TEST_OUTPUTS})
    result = import_harbor_task(src, tmp_path / "out", sandbox)
    assert result.runnable, result.reasons  # validated: the oracle passes, the untouched workspace fails
    adapted = "\n".join(result.adaptations)
    assert "test.sh:2: `apt-get update` not run" in adapted and "test.sh:4: uv's installer not run" in adapted
    assert "test.sh:7: Python 3.13 asked for, our sandbox's python3 3.11" in adapted
    bundle = load_task_bundle(result.bundle_dir)
    test_sh = (bundle.tests_dir / "test.sh").read_text()
    assert "true  # clawloop offline: curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh" in test_sh
    assert len(test_sh.splitlines()) == len(STANDARD_TEST_SH.splitlines())  # line numbers kept

    # The agent cannot reach the toolchain: it is mounted read-only, for the tests only.
    workspace = Path(shutil.copytree(bundle.environment_dir, tmp_path / "ws"))
    (workspace / "error_count.txt").write_text("3\n")
    (workspace / "conftest.py").write_text("")
    verdict = run_verifier(sandbox, bundle, workspace)
    assert (verdict.status, verdict.reward) == ("scored", 1.0), (verdict.error, verdict.checks)
    hostile = Path(shutil.copytree(bundle.environment_dir, tmp_path / "hostile"))
    (hostile / "error_count.txt").write_text("2\n")
    (hostile / "conftest.py").write_text(
        "import pathlib\n"
        "for p in ('/harbor-toolchain/bin/uvx', '/harbor-toolchain/wheels/x.whl'):\n"
        "    try:\n        pathlib.Path(p).write_text('forged')\n    except OSError:\n        pass\n")
    verdict = run_verifier(sandbox, bundle, hostile)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), (verdict.error, verdict.checks)
    assert (ensure_toolchain().root / "bin" / "uvx").read_bytes()[:4] == b"\x7fELF"


def test_task_memory_reaches_the_sandbox_and_a_missing_wheel_is_named(sandbox, tmp_path):
    toml = (RUNNABLE / "task.toml").read_text().replace("memory_mb = 2048", 'memory = "3G"')
    result = import_harbor_task(task_copy(tmp_path, {"task.toml": toml}), tmp_path / "out", sandbox)
    assert result.runnable, result.reasons
    bundle = load_task_bundle(result.bundle_dir)
    assert json.loads(bundle.answer_path.read_text())["checks"][0]["memory_bytes"] == 3 << 30
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _, limits = harbor_verifier_mounts(bundle, bundle.environment_dir, scratch)
    assert limits.memory_bytes == 3 << 30 and limits.wall_seconds == 40.0
    assert task_memory_bytes(bundle, 1 << 30) == 3 << 30  # the agent's commands too

    ensure_toolchain()
    test_sh = STANDARD_TEST_SH.replace("-w pytest==8.4.1", "-w pytest==8.4.1 -w clawloop-absent==1.0")
    result = import_harbor_task(task_copy(tmp_path / "b", {"tests/test.sh": test_sh}), tmp_path / "out", sandbox)
    assert not result.runnable
    assert any("test.sh:7: uv requirement 'clawloop-absent==1.0' is not in the offline wheelhouse" in r
               for r in result.reasons), result.reasons


def test_an_import_is_evaluated_only_on_the_backend_it_was_validated_on(sandbox, tmp_path):
    from clawloop_assets.evaluation.fixed_set import EvaluationSetError, imported_tasks
    from clawloop_assets.harbor.task_format import import_harbor_directory
    from resources.sandbox import DockerSandbox

    (result,), manifest = import_harbor_directory(task_copy(tmp_path, {}), tmp_path / "out", sandbox)
    assert result.runnable and json.loads(manifest.read_text())["runnable"][0]["sandbox"] == "bubblewrap"
    assert [t.task_id for t in imported_tasks(tmp_path / "out", sandbox)] == ["count-error-lines"]
    with pytest.raises(EvaluationSetError, match="validated on the bubblewrap backend and this evaluation runs on docker"):
        imported_tasks(tmp_path / "out", DockerSandbox())


def test_a_pip_install_in_test_sh_installs_from_the_wheelhouse_only_where_pip_can_write(tmp_path):
    from clawloop_assets.harbor.task_format import _adapt_test_sh

    toolchain = ensure_toolchain()
    text = ("#!/bin/bash\npip install pytest==8.4.1 pytest-json-ctrf==0.3.5 --break-system-packages\n"
            "pip3 install requests==2.32.5\npytest /tests/test_outputs.py\n")
    in_image = _adapt_test_sh(text, Path("tests/test.sh"), toolchain, "3.11.2", in_image=True)
    assert in_image.text.splitlines()[1] == ("pip install --no-index --find-links /harbor-wheels "
                                             "pytest==8.4.1 pytest-json-ctrf==0.3.5 --break-system-packages")
    assert in_image.uses_toolchain and "tests/test.sh:2" in in_image.adaptations[0]
    # What the wheelhouse lacks is fetched before the tests in an image, never a reason there.
    assert in_image.reasons == [] and in_image.fetch == {"requests==2.32.5": "tests/test.sh:3"}
    uvx = "uvx -p 3.13 -w pytest==8.4.1 -w numpy==2.3.1 pytest /tests\n"
    assert _adapt_test_sh(uvx, Path("t.sh"), toolchain, "3.12.3", in_image=True).fetch == {"numpy==2.3.1": "t.sh:1"}
    assert "numpy==2.3.1' is not in the offline wheelhouse" in _adapt_test_sh(uvx, Path("t.sh"), toolchain,
                                                                              "3.11.2").reasons[0]
    in_sandbox = _adapt_test_sh(text, Path("tests/test.sh"), toolchain, "3.11.2")
    assert [r.split(":")[1] for r in in_sandbox.reasons] == ["2", "3"]
    assert all("needs the network" in r for r in in_sandbox.reasons)

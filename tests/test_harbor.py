"""Harbor task format, both ways, against the real bubblewrap sandbox: the
Harbor tasks under tests/harbor_tasks/ imported and scored through our
verifier path, tasks we cannot run reported with the reason, malformed ones
refused naming the file, and our generated tasks exported and imported back."""

import json
import shutil
import tomllib
from pathlib import Path

import pytest

from clawloop_assets.cli import main
from clawloop_assets.evaluation.fixed_set import imported_tasks
from clawloop_assets.harbor.task_format import (
    MANIFEST_NAME,
    HarborTaskError,
    export_harbor_task,
    import_harbor_directory,
    import_harbor_task,
)
from clawloop_assets.harness.agent_loop import AgentSettings, run_rollouts
from clawloop_assets.harness.verification import run_verifier
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from resources import paths
from resources.sandbox import BubblewrapSandbox, Mount

HARBOR_TASKS = Path(__file__).parent / "harbor_tasks"
RUNNABLE = HARBOR_TASKS / "count-error-lines"


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def fresh_workspace(bundle: TaskBundle, tmp_path: Path, name: str = "workspace") -> Path:
    return Path(shutil.copytree(bundle.environment_dir, tmp_path / name))


def run_oracle(sandbox, bundle: TaskBundle, workspace: Path) -> None:
    done = sandbox.run(["bash", "/solution/solve.sh"],
                       [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")])
    assert done.exit_code == 0, done.output


def imported(sandbox, src: Path, tmp_path: Path) -> TaskBundle:
    result = import_harbor_task(src, tmp_path / "imported", sandbox)
    assert result.runnable, result.reasons
    return load_task_bundle(result.bundle_dir)


def with_test_sh(bundle: TaskBundle, text: str, timeout_s: float | None = None) -> TaskBundle:
    """A validated import with its tests replaced afterwards: what a verifier
    must make of a test.sh that no import would admit (one that never gives
    a valid reward)."""
    (bundle.tests_dir / "test.sh").write_text(f"#!/bin/bash\n{text}\n")
    if timeout_s is not None:
        answer = json.loads(bundle.answer_path.read_text())
        answer["checks"][0]["timeout_s"] = timeout_s
        bundle.answer_path.write_text(json.dumps(answer))
    return bundle


def harbor_copy(tmp_path: Path, src: Path = RUNNABLE, name: str | None = None) -> Path:
    return Path(shutil.copytree(src, tmp_path / "src" / (name or src.name)))


def test_imported_task_scores_its_oracle_1_and_the_untouched_workspace_0(sandbox, tmp_path):
    bundle = imported(sandbox, RUNNABLE, tmp_path)
    assert (bundle.capability, bundle.track, bundle.format) == ("harbor", "terminal", "files")
    # The Dockerfile's COPYs replayed: a directory into /app/logs/, a file into the WORKDIR.
    workspace_files = sorted(str(p.relative_to(bundle.environment_dir)) for p in bundle.environment_dir.rglob("*"))
    assert workspace_files == ["CONTRACT.md", "README.txt", "logs", "logs/day1.log", "logs/day2.log"]
    # The agent and the oracle work in /workspace, the task's tests in /app.
    assert "/workspace/logs" in bundle.instruction and "/app" not in bundle.instruction
    assert "/app" not in bundle.solution_path.read_text()
    assert (bundle.tests_dir / "check_outputs.py").is_file()

    untouched = fresh_workspace(bundle, tmp_path, "untouched")
    verdict = run_verifier(sandbox, bundle, untouched)
    assert (verdict.status, verdict.reward) == ("scored", 0.0), verdict.error
    assert "reward.txt says 0" in verdict.checks[0]["detail"]

    solved = fresh_workspace(bundle, tmp_path, "solved")
    run_oracle(sandbox, bundle, solved)
    assert (solved / "error_count.txt").read_text().strip() == "3"
    verdict = run_verifier(sandbox, bundle, solved)
    assert (verdict.status, verdict.reward) == ("scored", 1.0), verdict.error
    # The tests ran on a copy: the workspace the rollout left is unchanged.
    assert sorted(p.name for p in solved.iterdir()) == ["CONTRACT.md", "README.txt", "error_count.txt", "logs"]


@pytest.mark.parametrize(("test_sh", "expected"), [
    ("echo banana > /logs/verifier/reward.txt", "not a number in [0, 1]"),
    ("echo 1.5 > /logs/verifier/reward.txt", "not a number in [0, 1]"),
    ("echo nan > /logs/verifier/reward.txt", "not a number in [0, 1]"),
    ("echo tests ran", "left no /logs/verifier/reward.txt: no reward counts (last output: tests ran)"),
    ("echo '{\"score\": 1, \"style\": 1}' > /logs/verifier/reward.json",
     "reward.json holds no 'reward' and 2 other numbers (score, style)"),
    ("echo '[1]' > /logs/verifier/reward.json", "not an object of named rewards"),
    ("echo crashed; exit 3", "tests/test.sh exited with code 3: its reward does not count (last output: crashed)"),
])
def test_a_test_sh_without_a_valid_reward_scores_zero_with_the_reason(sandbox, tmp_path, test_sh, expected):
    """test.sh may run the agent's code, which can cause each of these: a
    zero, never an error that would exclude the rollout."""
    bundle = with_test_sh(imported(sandbox, RUNNABLE, tmp_path), test_sh, timeout_s=2.0)
    verdict = run_verifier(sandbox, bundle, fresh_workspace(bundle, tmp_path))
    assert (verdict.status, verdict.reward) == ("scored", 0.0), verdict.error
    assert expected in verdict.checks[0]["detail"]


def test_copy_of_the_whole_context_and_of_a_glob_are_replayed(sandbox, tmp_path):
    src = harbor_copy(tmp_path)
    dockerfile = src / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("COPY logs/ /app/logs/\nCOPY README.txt .",
                                                         "COPY . .\nCOPY logs/*.log archive/"))
    bundle = imported(sandbox, src, tmp_path)
    files = sorted(str(p.relative_to(bundle.environment_dir)) for p in bundle.environment_dir.rglob("*") if p.is_file())
    assert files == ["CONTRACT.md", "Dockerfile", "README.txt", "archive/day1.log", "archive/day2.log",
                     "logs/day1.log", "logs/day2.log"]


def test_a_partial_or_json_reward_is_read_and_only_a_full_reward_passes(sandbox, tmp_path):
    bundle = with_test_sh(imported(sandbox, RUNNABLE, tmp_path), "echo 0.5 > /logs/verifier/reward.txt")
    verdict = run_verifier(sandbox, bundle, fresh_workspace(bundle, tmp_path))
    assert (verdict.status, verdict.reward) == ("scored", 0.0)
    assert "says 0.5" in verdict.checks[0]["detail"] and "partial credit" in verdict.checks[0]["detail"]

    bundle = with_test_sh(bundle, "echo '{\"reward\": 1}' > /logs/verifier/reward.json")
    verdict = run_verifier(sandbox, bundle, fresh_workspace(bundle, tmp_path, "again"))
    assert (verdict.status, verdict.reward) == ("scored", 1.0)


@pytest.mark.parametrize(("test_sh", "reward", "detail"), [
    # Several named rewards, as Harbor reads them: "reward" is the task's.
    ("""echo '{"reward": 1, "accuracy": 0.5, "note": "x"}' > /logs/verifier/reward.json""", 1.0,
     "reward.json says 1; test.sh exited with code 0; other rewards: accuracy=0.5"),
    ("""echo '{"reward": 0.5, "format": 1}' > /logs/verifier/reward.json""", 0.0, "reward.json says 0.5"),
    # Without a "reward" key: reward.txt beside it, else its only number.
    ("""echo '{"a": 0, "b": 0}' > /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt""", 1.0,
     "reward.txt says 1; test.sh exited with code 0; other rewards: a=0, b=0"),
    ("""echo '{"score": 1}' > /logs/verifier/reward.json""", 1.0, "reward.json 'score' says 1"),
])
def test_a_multi_key_reward_json_is_read_as_harbor_reads_it(sandbox, tmp_path, test_sh, reward, detail):
    bundle = with_test_sh(imported(sandbox, RUNNABLE, tmp_path), test_sh)
    verdict = run_verifier(sandbox, bundle, fresh_workspace(bundle, tmp_path))
    assert (verdict.status, verdict.reward) == ("scored", reward), verdict.error
    assert detail in verdict.checks[0]["detail"]


def test_a_task_no_longer_runnable_loses_the_bundle_of_its_earlier_import(sandbox, tmp_path):
    src = harbor_copy(tmp_path)
    first = import_harbor_task(src, tmp_path / "imported", sandbox)
    assert first.runnable and first.bundle_dir.is_dir()
    dockerfile = src / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("grep &&", "grep clawloop-absent-tool &&"))
    again = import_harbor_task(src, tmp_path / "imported", sandbox)
    assert not again.runnable and not first.bundle_dir.exists()
    assert any("the bundle of an earlier import was removed" in reason for reason in again.reasons)


def test_a_tampered_workdir_in_the_answer_key_is_a_verifier_error(sandbox, tmp_path):
    bundle = imported(sandbox, RUNNABLE, tmp_path)
    answer = json.loads(bundle.answer_path.read_text())
    answer["checks"][0]["workdir"] = "/usr/bin"
    bundle.answer_path.write_text(json.dumps(answer))
    verdict = run_verifier(sandbox, bundle, fresh_workspace(bundle, tmp_path))
    assert verdict.status == "error" and "harbor check 'workdir'" in verdict.error and "/usr/bin" in verdict.error


def test_a_crashing_test_sh_fails_its_own_oracle_so_the_task_is_refused(sandbox, tmp_path):
    """A crash of test.sh scores 0 (agent code it runs could cause one), so a
    task whose tests crash whatever the workspace fails its own oracle at
    import, with the crash in the reason, and no bundle is written."""
    src = HARBOR_TASKS / "crashing-verifier"
    result = import_harbor_task(src, tmp_path / "imported", sandbox)
    assert not result.runnable and result.bundle_dir is None and not (tmp_path / "imported" / "crashing-verifier").exists()
    (reason,) = result.reasons
    assert reason.startswith(f"{src / 'tests' / 'test.sh'}: the oracle's workspace fails the task's own tests")
    assert "tests/test.sh exited with code 2" in reason and "check_greeting.py" in reason


def test_a_task_needing_a_package_we_lack_is_not_runnable_with_the_reason(sandbox, tmp_path):
    src = HARBOR_TASKS / "needs-numpy"
    result = import_harbor_task(src, tmp_path / "imported", sandbox)
    assert not result.runnable and result.bundle_dir is None
    assert result.reasons == (f"{src / 'environment' / 'Dockerfile'}:3 (pip install numpy==1.26.4): "
                              "our sandbox's python3 lacks the distribution 'numpy'",)
    assert not (tmp_path / "imported" / "needs-numpy").exists()


@pytest.mark.parametrize(("edit", "expected"), [
    (("environment/Dockerfile", "grep && \\", "grep clawloop-absent-tool && \\"),
     "Dockerfile:3 (apt-get install clawloop-absent-tool): the apt package 'clawloop-absent-tool' is not installed "
     "in our sandbox"),
    (("environment/Dockerfile", "FROM python:3.11-slim", "FROM nvidia/cuda:12.4.1-runtime-ubuntu22.04"),
     "base image 'nvidia/cuda:12.4.1-runtime-ubuntu22.04' is not one whose tools we can check for"),
    (("environment/Dockerfile", "COPY README.txt .", "COPY README.txt /etc/motd"),
     "COPY README.txt to /etc/motd, outside the WORKDIR /app"),
    (("environment/Dockerfile", "COPY README.txt .", "RUN make -C /app"),
     "Dockerfile:9: `make -C /app` is a build step our sandbox cannot replay"),
    (("environment/Dockerfile", "WORKDIR /app", "WORKDIR /etc"),
     "Dockerfile: WORKDIR /etc is a system path or one of our sandbox's mount points"),
    (("task.toml", "cpus = 1", "cpus = 1\ngpus = 1"), "task.toml: [environment] gpus = 1; our sandbox has no GPU"),
    (("tests/test.sh", "python3 /tests", "curl -sSfO https://example.com/expected.csv\npython3 /tests"),
     "tests/test.sh:3: `curl -sSfO https://example.com/expected.csv` needs the network"),
    (("tests/test.sh", "python3 /tests", "uvx -w numpy==1.26.4 pytest /tests\npython3 /tests"),
     "tests/test.sh:3: uv requirement 'numpy==1.26.4' is not in the offline wheelhouse"),
    (("solution/solve.sh", "#!/bin/bash", "#!/bin/bash\npip install ruff"), "solution/solve.sh: `pip install ruff` needs the network"),
    (("task.toml", "memory_mb = 2048", "memory = '64T'"), "task.toml: [environment] memory of 67108864 MiB is more"),
])
def test_environment_needs_our_sandbox_cannot_meet_are_reported(sandbox, tmp_path, edit, expected):
    src = harbor_copy(tmp_path)
    rel, old, new = edit
    text = (src / rel).read_text()
    assert text.count(old) == 1
    (src / rel).write_text(text.replace(old, new))
    result = import_harbor_task(src, tmp_path / "imported", sandbox)
    assert not result.runnable and not (tmp_path / "imported").exists()
    assert any(expected in reason for reason in result.reasons), result.reasons


@pytest.mark.parametrize(("damage", "expected"), [
    (lambda src: (src / "instruction.md").unlink(), "instruction.md: missing file"),
    (lambda src: (src / "task.toml").write_text("[verifier\ntimeout_sec = 1\n"), "task.toml: not valid TOML"),
    (lambda src: (src / "task.toml").write_text("[verifier]\ntimeout_sec = 'soon'\n"),
     "task.toml: [verifier] timeout_sec must be a positive number, got 'soon'"),
    (lambda src: (src / "tests" / "test.sh").unlink(), "tests/test.sh: missing file"),
    (lambda src: (src / "environment" / "link").symlink_to("/etc/passwd"), "environment/link: only regular files"),
])
def test_a_malformed_task_is_refused_naming_the_file(sandbox, tmp_path, damage, expected):
    src = harbor_copy(tmp_path)
    damage(src)
    with pytest.raises(HarborTaskError) as refused:
        import_harbor_task(src, tmp_path / "imported", sandbox)
    assert str(refused.value).startswith(str(src)) and expected in str(refused.value)


def test_cli_imports_a_directory_listing_every_task_and_writes_the_manifest(sandbox, clawloop_home, tmp_path, capsys):
    src = Path(shutil.copytree(HARBOR_TASKS, tmp_path / "tasks"))
    (src / "no-instruction").mkdir()
    (src / "no-instruction" / "task.toml").write_text("[metadata]\n")
    main(["harbor-import", str(src)])
    out = capsys.readouterr().out
    dest = paths.evaluation_imports_dir()
    assert "1 runnable (imported and validated), 3 not runnable here" in out
    assert "needs-numpy" in out and "numpy" in out and "no-instruction" in out and "crashing-verifier" in out
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert [r["task_id"] for r in manifest["runnable"]] == ["count-error-lines"]
    assert [r["task_id"] for r in manifest["not_runnable"]] == ["crashing-verifier", "needs-numpy", "no-instruction"]
    assert manifest["not_runnable"][2]["reasons"][0].startswith(f"malformed: {src / 'no-instruction' / 'instruction.md'}")
    # What the evaluation set will do: load the validated bundles, only those.
    assert [t.task_id for t in imported_tasks()] == ["count-error-lines"]
    # A second import into the same place keeps the first's validated tasks.
    (src / "count-error-lines").rename(tmp_path / "elsewhere")
    main(["harbor-import", str(src)])
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert [r["task_id"] for r in manifest["runnable"]] == ["count-error-lines"]


def test_export_then_import_round_trip_of_a_generated_task(sandbox, clawloop_home, tmp_path, capsys):
    from test_transfer import ROUND, record_round

    from clawloop_assets.synthesis import catalogs

    domain = catalogs.load_domain_catalog()[0].id
    warehouse, task_ids = record_round(tmp_path, [("file_reorganization", domain, 21), ("log_analysis", domain, 22),
                                                  ("file_reorganization", domain, 23)], admitted=2, heldout=set())
    out = tmp_path / "harbor"
    main(["harbor-export", "--round", ROUND, "--out", str(out)])
    assert sorted(p.name for p in out.iterdir()) == sorted(task_ids[:2])  # the admitted ones only
    for task_id in task_ids[:2]:
        original = load_task_bundle(tmp_path / "tasks" / task_id)
        exported = out / task_id
        config = tomllib.loads((exported / "task.toml").read_text())
        # Harbor's norms, and the harness's own worst case for the agent.
        assert config["verifier"]["timeout_sec"] >= 600 and config["agent"]["timeout_sec"] >= 600
        assert config["agent"]["timeout_sec"] >= original.max_turns * original.command_timeout_s
        assert config["environment"]["gpus"] == 0 and config["metadata"]["clawloop_task_id"] == task_id
        # Built from its own Dockerfile: a prebuilt image would skip the COPY into /app.
        assert "docker_image" not in config["environment"]
        dockerfile = (exported / "environment" / "Dockerfile").read_text()
        assert dockerfile.startswith("FROM python:3.11-slim\n") and "WORKDIR /app\nCOPY workspace/ /app/\n" in dockerfile
        assert (exported / "tests" / "answer.json").read_bytes() == original.answer_path.read_bytes()

        back = imported(sandbox, exported, tmp_path / task_id)
        assert back.instruction == original.instruction
        untouched = run_verifier(sandbox, back, fresh_workspace(back, tmp_path / task_id, "untouched"))
        assert (untouched.status, untouched.reward) == ("scored", 0.0), untouched.error
        solved = fresh_workspace(back, tmp_path / task_id, "solved")
        run_oracle(sandbox, back, solved)
        verdict = run_verifier(sandbox, back, solved)
        assert (verdict.status, verdict.reward) == ("scored", 1.0), verdict.error
    with pytest.raises(FileExistsError):
        export_harbor_task(original, out)
    # The whole exported round imports back, every task validated (oracle 1, untouched 0).
    results, manifest = import_harbor_directory(out, tmp_path / "reimported", sandbox)
    assert [(r.source.name, r.runnable) for r in results] == [(t, True) for t in sorted(task_ids[:2])], \
        [r.reasons for r in results]
    assert len(json.loads(manifest.read_text())["runnable"]) == 2


@pytest.mark.slow
def test_one_rollout_of_the_real_agent_on_an_imported_task(sandbox, base_checkpoint_dir, tmp_path):
    from resources.embedded_policy import EmbeddedPolicyModel

    bundle = imported(sandbox, RUNNABLE, tmp_path)
    session = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent)).load(base_checkpoint_dir)
    try:
        (rollout,) = run_rollouts(session, sandbox, [bundle], 1, AgentSettings(max_turns=2), tmp_path / "rollouts", seed=5)
    finally:
        session.close()
    assert rollout.turns >= 1
    # Whatever the agent did, the task's own tests scored it.
    assert rollout.status == "scored", rollout.error
    assert rollout.reward in (0.0, 1.0) and rollout.verifier_checks[0]["name"] == "harbor_reward"

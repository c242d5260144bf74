"""Our agent on a Harbor task that validates only in its own image
(clawloop_assets/harbor/image_task.py): on the Docker backend its
commands and then its tests/test.sh run in one container of that image,
as Harbor runs them; on bubblewrap the task stays named and left out.
The policy is scripted (a unit-test double; the 135M model solves
nothing), the image, the container and the verifier are real."""

import dataclasses
import shutil
from pathlib import Path

import pytest
from conftest import docker_sandbox
from test_agent_loop import ScriptedSession
from test_harbor_docker import _PROXY_GONE_CHECK, IMAGE_ONLY_DOCKERFILE, IMAGE_ONLY_TEST_SH, task_capabilities_mask

from clawloop_assets.harness.agent_loop import AgentSettings, run_rollouts

ORACLE = "cat /app/logs/*.log | grep -c ERROR > /app/error_count.txt"


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A task whose tests need its image (a RUN step writes the expected
    count), imported on Docker: validated only in its image."""
    from clawloop_assets.harbor.task_format import import_harbor_directory

    root = tmp_path_factory.mktemp("image-episode")
    src = Path(shutil.copytree(Path(__file__).parent / "harbor_tasks" / "count-error-lines",
                               root / "bench" / "image-step-task"))
    (src / "environment" / "Dockerfile").write_text(IMAGE_ONLY_DOCKERFILE)
    (src / "tests" / "test.sh").write_text(IMAGE_ONLY_TEST_SH)
    # Its tests pip-install pytest through the registry proxy on every run, as
    # the benchmark's do: 30 s ran out on a machine busy with two loops.
    toml = src / "task.toml"
    toml.write_text(toml.read_text().replace("[verifier]\ntimeout_sec = 30.0", "[verifier]\ntimeout_sec = 120.0"))
    assert "timeout_sec = 120.0" in toml.read_text()
    for path in src.rglob("*"):  # read-only, as a mirror of a benchmark may be; a checkout's modes are used
        path.chmod(0o555 if path.is_dir() else 0o444)
    (result,), _ = import_harbor_directory(src.parent, root / "dest", docker_sandbox(), task_budget_s=300)
    assert result.image is not None and not result.runnable, result.reasons
    yield root / "dest", src
    from clawloop_assets.harbor.docker_run import remove_task_image

    remove_task_image(result.image)


def rollouts_of(task, replies, tmp_path, max_turns=2):
    return run_rollouts(ScriptedSession(replies), docker_sandbox(), [task], 1, AgentSettings(max_turns=max_turns),
                        tmp_path / "rollouts", seed=0)


@pytest.mark.slow
def test_an_image_only_task_is_scored_in_its_image_on_docker_and_left_out_on_bubblewrap(imported, tmp_path):
    from clawloop_assets.evaluation.task_dir import EvalError, evaluate_tasks, load_eval_tasks, not_evaluated
    from clawloop_assets.harbor.image_task import ImageTaskBundle
    from resources.sandbox import BubblewrapSandbox

    dest, _src = imported
    with pytest.raises(EvalError, match="1 validate only in their own image, where our agent runs on the Docker"):
        load_eval_tasks(dest, BubblewrapSandbox())
    assert "image-step-task" in not_evaluated(dest, BubblewrapSandbox())
    (task,) = load_eval_tasks(dest, docker_sandbox())
    assert isinstance(task.bundle, ImageTaskBundle) and task.task_set == "bench"
    assert not_evaluated(dest, docker_sandbox()) is None

    # Nothing done: the tests run on the untouched image and fail.
    (idle,) = rollouts_of(task.bundle, ["submit\n```"], tmp_path)
    assert (idle.status, idle.reward) == ("scored", 0.0), idle.error
    assert "reward.txt says 0" in idle.verifier_checks[0]["detail"]
    # The oracle's commands as the agent's: scored 1 (the expected count exists only in the image).
    (solved,) = rollouts_of(task.bundle, [ORACLE + "\n```", "submit\n```"], tmp_path)
    assert (solved.status, solved.reward, solved.exit_codes) == ("scored", 1.0, [0, 0]), solved.error
    report = evaluate_tasks(ScriptedSession(["submit\n```"]), docker_sandbox(), [task], "ckpt-test", 1,
                            AgentSettings(max_turns=1), tmp_path / "eval", seed=0)
    assert report.by_set["bench"].pass_at_1 == 0.0 and report.by_set["bench"].tasks == 1


@pytest.mark.slow
def test_the_agent_runs_without_network_and_with_the_task_capabilities_in_its_limits(imported, tmp_path):
    from clawloop_assets.evaluation.task_dir import load_eval_tasks

    (task,) = load_eval_tasks(imported[0], docker_sandbox())
    probe = ("pwd; echo more >> README.txt && echo writable; grep CapEff /proc/self/status; "
             "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
             "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 3)\" 2>/dev/null || echo offline")
    (rollout,) = rollouts_of(task.bundle, [probe + "\n```", "submit\n```"], tmp_path)
    # The image's WORKDIR, the task capabilities, task.toml's memory_mb = 2048, no network.
    # The task's files as a checkout has them (rewritable), though its source is read-only.
    assert rollout.last_output.split() == ["/app", "writable", "CapEff:", task_capabilities_mask(),
                                           str(2048 << 20), "offline"], \
        rollout.last_output


@pytest.mark.slow
def test_an_agent_on_a_task_whose_oracle_fetched_gets_the_registries_until_the_tests(imported, tmp_path):
    from clawloop_assets.evaluation.task_dir import load_eval_tasks

    (task,) = load_eval_tasks(imported[0], docker_sandbox())
    assert not task.bundle.registries  # its oracle fetched nothing
    checked = Path(shutil.copytree(task.bundle.root, tmp_path / "checked"))
    for path in [checked, *checked.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    # The tests pass only when neither the proxy nor the agent's apt file is there any more.
    (checked / "tests" / "test.sh").write_text(
        "#!/bin/bash\n" + _PROXY_GONE_CHECK + "test ! -e /etc/apt/apt.conf.d/99clawloop-registry-proxy || "
        "{ echo 0 > /logs/verifier/reward.txt; exit 0; }\necho 1 > /logs/verifier/reward.txt\n")
    fetch = ("pip install --quiet --no-deps --target /tmp/site six==1.16.0 && ls /tmp/site/six.py; "
             "curl -sf -o /dev/null https://github.com/ && echo reached || echo refused")
    again = "curl -sf -o /dev/null https://pypi.org/simple/six/ && echo again || echo offline"  # a new command, a new relay
    (rollout,) = rollouts_of(dataclasses.replace(task.bundle, root=checked, registries=True),
                             [fetch + "\n```", again + "\n```"], tmp_path)
    observations = [m["content"] for m in rollout.messages if m["role"] == "user"]
    assert any("/tmp/site/six.py" in text and "refused" in text for text in observations), observations
    assert rollout.last_output.split() == ["again"], rollout.last_output
    assert (rollout.status, rollout.reward, rollout.exit_codes) == ("scored", 1.0, [0, 0]), rollout.error
    (offline,) = rollouts_of(dataclasses.replace(task.bundle, root=checked), [again + "\n```"], tmp_path, max_turns=1)
    assert offline.last_output.split() == ["offline"], offline.last_output


@pytest.mark.slow
def test_nothing_the_agent_plants_or_leaves_running_reaches_the_verdict(imported, tmp_path):
    from clawloop_assets.evaluation.task_dir import load_eval_tasks

    (task,) = load_eval_tasks(imported[0], docker_sandbox())
    forge = ("echo 1 > /logs/verifier/reward.txt; printf 'import sys\\nsys.exit(0)\\n' > /tests/conftest.py; "
             "(sleep 3; echo 1 > /logs/verifier/reward.txt) > /dev/null 2>&1 &")
    later = "sleep 4; cat /logs/verifier/reward.txt"  # the background writer did not outlive its command
    (rollout,) = rollouts_of(task.bundle, [forge + "\n```", later + "\n```"], tmp_path)
    assert rollout.exit_codes[1] == 0 and rollout.last_output.strip() == "1"  # its own file, until the tests
    assert (rollout.status, rollout.reward) == ("scored", 0.0), rollout.error
    # The agent's time is task.toml's [agent] timeout_sec, for its commands together.
    short = dataclasses.replace(task.bundle, agent_timeout_s=3.0)
    (timed,) = rollouts_of(short, ["sleep 10\n```", "echo late\n```"], tmp_path, max_turns=2)
    assert timed.exit_codes == [None, None] and "agent time of 3 s is spent" in timed.last_output, timed.last_output


@pytest.mark.slow
def test_a_verifier_that_leaves_no_reward_is_an_error_not_a_score(imported, tmp_path):
    from clawloop_assets.evaluation.fixed_set import pass_at_1
    from clawloop_assets.evaluation.task_dir import load_eval_tasks
    from clawloop_assets.harness.agent_loop import rollout_row
    from resources.warehouse import table_frame

    (task,) = load_eval_tasks(imported[0], docker_sandbox())
    crashing = Path(shutil.copytree(task.bundle.root, tmp_path / "crashing"))
    for path in [crashing, *crashing.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (crashing / "tests" / "test.sh").write_text("#!/bin/bash\necho 'the tests crashed' >&2\nexit 3\n")
    (rollout,) = rollouts_of(dataclasses.replace(task.bundle, root=crashing), [ORACLE + "\n```", "submit\n```"],
                             tmp_path)
    assert (rollout.status, rollout.reward) == ("verifier_error", None)
    assert "left no valid reward" in rollout.error and "exited with 3" in rollout.error, rollout.error
    score = pass_at_1(table_frame("rollouts", [rollout_row(rollout, round_key="eval", phase="evaluation",
                                                           checkpoint_id="c")]))
    assert (score.pass_at_1, score.errors) == (0.0, 1)  # counted as not passed, and reported


def test_a_tasks_files_get_the_modes_a_checkout_gives_them(tmp_path):
    from clawloop_assets.harbor.docker_run import with_checkout_modes

    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "data.txt").write_text("x")
    (tmp_path / "d" / "run.sh").write_text("x")
    (tmp_path / "d" / "data.txt").chmod(0o400)
    (tmp_path / "d" / "run.sh").chmod(0o500)
    (tmp_path / "d").chmod(0o500)
    with_checkout_modes(tmp_path)
    modes = {p.name: p.stat().st_mode & 0o777 for p in [tmp_path, tmp_path / "d", *(tmp_path / "d").iterdir()]}
    assert modes == {tmp_path.name: 0o755, "d": 0o755, "data.txt": 0o644, "run.sh": 0o755}


def test_an_image_only_row_is_refused_once_its_source_changed_or_without_its_hash(tmp_path):
    from clawloop_assets.harbor.image_task import load_image_task, source_digest
    from clawloop_assets.harbor.task_format import HarborTaskError

    src = Path(shutil.copytree(Path(__file__).parent / "harbor_tasks" / "count-error-lines", tmp_path / "t"))
    row = {"task_id": "t", "source": str(src), "image": "clawloop-harbor/t:0", "source_sha256": source_digest(src)}
    with pytest.raises(HarborTaskError, match="import it again with --sandbox docker"):
        load_image_task({k: v for k, v in row.items() if k != "source_sha256"})
    (src / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(HarborTaskError, match=f"{src}: changed since"):
        load_image_task(row)


@pytest.mark.slow
def test_a_task_asking_more_cpus_than_this_machine_has_gets_them_all(imported, tmp_path):
    import os

    from clawloop_assets.evaluation.task_dir import load_eval_tasks

    (task,) = load_eval_tasks(imported[0], docker_sandbox())
    more = dataclasses.replace(task.bundle, cpus=float(os.cpu_count() + 2))
    (rollout,) = rollouts_of(more, ["cat /sys/fs/cgroup/cpu.max 2>/dev/null || cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us"
                                    "\n```", "submit\n```"], tmp_path)
    assert rollout.status == "scored" and rollout.exit_codes[0] == 0, rollout.error
    assert str(os.cpu_count() * 100000) in rollout.last_output, rollout.last_output

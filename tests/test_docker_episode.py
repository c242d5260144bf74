"""The Docker backend's episodes (slow suite): one container, its commands
run by the trusted runner inside. Every assertion the security suite makes
of `run` is made of the episode path too (`EPISODE_BACKENDS`, through
`OneCommandEpisodes`); these tests cover what only an episode has."""

import subprocess
import threading
import time

import pytest
from conftest import SANDBOX_BACKENDS, docker_sandbox, make_sandbox

import resources.sandbox as sandbox_module
from resources.sandbox import DockerSandbox, Mount, SandboxError, SandboxLimits

pytestmark = pytest.mark.slow


class OneCommandEpisodes:
    """A sandbox whose `run` opens a Docker episode sized by the command's
    limits, runs the command in it and closes it: the episode path under
    every test written against `run`."""

    def __init__(self, **overrides) -> None:
        self.overrides = overrides
        docker_sandbox(**overrides)  # a missing engine fails the test with the fix

    def run(self, argv, mounts, *, cwd="/workspace", limits=None, env=None, uid=None) -> sandbox_module.CommandResult:
        assert not env, "an episode's commands get the sandbox's environment only"
        overrides = self.overrides if uid is None else {**self.overrides, "sandbox_uid": uid, "sandbox_gid": uid}
        limits = limits or SandboxLimits()
        with DockerSandbox(**overrides).episode(mounts, cwd=cwd, limits=limits) as episode:
            return episode.run(argv, limits)


# The backends of the tests written against `run`: the conftest's, and Docker's episode path.
EPISODE_BACKENDS = [*SANDBOX_BACKENDS, pytest.param("docker-episode", marks=pytest.mark.slow)]


def make_backend(backend: str, **overrides):
    return OneCommandEpisodes(**overrides) if backend == "docker-episode" else make_sandbox(backend, **overrides)


def container_exists(name: str) -> bool:
    return subprocess.run(["docker", "container", "inspect", name], capture_output=True).returncode == 0


def container_name(episode) -> str:
    return episode.run_command.__self__.name


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "workspace"
    path.mkdir()
    return path


def bash(episode, command: str, **limits):
    return episode.run(["bash", "-c", command], SandboxLimits(**limits))


def test_files_persist_between_commands_and_processes_do_not(workspace):
    with docker_sandbox().episode([Mount(workspace, "/workspace", writable=True)]) as episode:
        first = bash(episode, "echo kept > /tmp/state; echo made > here; cd /tmp; sleep 300 & setsid sleep 301 & echo $$")
        assert first.exit_code == 0
        # A background writer that never stops is killed when the command ends, not waited for.
        noisy = bash(episode, "yes & echo started", wall_seconds=20)
        assert noisy.exit_code == 0 and "started" in noisy.output and noisy.seconds < 5
        second = bash(episode, "cat /tmp/state here; pwd; ps -eo pid=,comm=")
    lines = second.output.splitlines()
    assert lines[:3] == ["kept", "made", "/workspace"]
    # What the first command left running was killed when it ended: only the runner (pid 1) and ps.
    assert [line.split()[1] for line in lines[3:]] == ["python3", "ps"]
    assert (workspace / "here").read_text() == "made\n"


def test_each_command_gets_its_own_limits(workspace):
    with docker_sandbox().episode([Mount(workspace, "/workspace", writable=True)]) as episode:
        started = time.monotonic()
        spin = bash(episode, "echo spinning; trap '' TERM INT; while :; do :; done", wall_seconds=1)
        assert spin.timed_out and spin.exit_code is None and "spinning" in spin.output
        assert time.monotonic() - started < 5
        after = bash(episode, "cat /proc/self/limits; cat /sys/fs/cgroup/pids/pids.max", cpu_seconds=3,
                     file_size_bytes=1 << 20, max_processes=40)
        assert after.exit_code == 0 and not after.timed_out
        seen = {line[:26].strip(): line[26:].split()[:2] for line in after.output.splitlines()[1:-1]}
        assert seen["Max cpu time"] == ["3", "3"]
        assert seen["Max file size"] == [str(1 << 20)] * 2
        assert seen["Max core file size"] == ["0", "0"]
        assert after.output.split()[-1] == "40"  # the container's pids limit, updated for this command
        capped = bash(episode, "head -c 100000 /dev/zero | tr '\\0' y", output_bytes=1000)
        assert capped.truncated and len(capped.output) < 1200
        assert bash(episode, "cat /proc/self/limits | grep 'Max cpu'").output.split()[3] == "20"
        # The memory cgroup's OOM killer takes a command (1000) before the runner (0). The runner
        # lowers its own just after the command starts, so the command waits for that (at most 5 s).
        oom = bash(episode, "for i in $(seq 50); do [ $(cat /proc/1/oom_score_adj) = 0 ] && break; sleep 0.1; done; "
                            "cat /proc/self/oom_score_adj /proc/1/oom_score_adj")
        assert oom.output.split() == ["1000", "0"]


# A frame as the runner writes one: length, then a JSON header claiming success.
FORGED = '\\x00\\x00\\x00\\x3c{"exit": 0, "timed_out": false, "total": 6, "head": 6, "tail": 0}forged'


def test_the_runner_and_its_stream_are_out_of_the_commands_reach(workspace):
    with docker_sandbox().episode([Mount(workspace, "/workspace", writable=True)]) as episode:
        forged = bash(episode, f"printf '{FORGED}'; exit 7")
        assert forged.exit_code == 7
        assert forged.output == FORGED.encode().decode("unicode_escape")  # just output
        attack = bash(episode, "ls /proc/1/fd; echo x > /proc/1/fd/1; cat /proc/1/fd/0; cat /proc/1/environ; "
                               "kill -9 1; kill -INT 1; kill -TERM 1; kill -9 -1; echo survived")
        assert attack.output.count("Permission denied") == 4 and "survived" in attack.output
        assert bash(episode, "echo next").output == "next\n"


def test_the_container_dying_mid_command_is_that_commands_result(workspace):
    with docker_sandbox().episode([Mount(workspace, "/workspace", writable=True)]) as episode:
        results = []
        running = threading.Thread(target=lambda: results.append(bash(episode, "sleep 30", wall_seconds=60)))
        running.start()
        time.sleep(0.5)
        subprocess.run(["docker", "kill", container_name(episode)], capture_output=True, check=True)
        running.join(timeout=20)
        (result,) = results
        assert result.exit_code is None and "the sandbox ended" in result.output
        started = time.monotonic()
        later = bash(episode, "echo again")
        assert later.exit_code is None and "the sandbox ended" in later.output and time.monotonic() - started < 1


# Runners that fail after saying they are ready: garbage on the stream, or no answer.
GARBAGE_RUNNER = """
import os, struct
body = b'{"ready": true, "head": 0, "tail": 0}'
os.write(1, struct.pack(">I", len(body)) + body)
os.read(0, 65536)
os.write(1, b"\\xff" * 64)
os.read(0, 65536)
"""
SILENT_RUNNER = GARBAGE_RUNNER.replace('os.write(1, b"\\xff" * 64)', "import time; time.sleep(60)")
NEVER_READY_RUNNER = "import sys; sys.exit('no runner here')"


@pytest.mark.parametrize("runner", [GARBAGE_RUNNER, SILENT_RUNNER], ids=["garbage", "silent"])
def test_a_broken_stream_ends_the_episode_as_the_commands_result(workspace, monkeypatch, runner):
    monkeypatch.setattr(sandbox_module, "_runner_source", lambda: runner)
    with docker_sandbox(episode_grace_seconds=0.5).episode([Mount(workspace, "/workspace")]) as episode:
        result = bash(episode, "true", wall_seconds=0.5)
        assert result.exit_code is None and "the sandbox ended" in result.output
        assert result.timed_out == (runner == SILENT_RUNNER)
        assert not container_exists(container_name(episode))  # removed when it ended
        assert "the sandbox ended" in bash(episode, "true").output


def test_a_container_that_does_not_start_is_a_sandbox_error(workspace, monkeypatch):
    monkeypatch.setattr(sandbox_module, "_runner_source", lambda: NEVER_READY_RUNNER)
    with pytest.raises(SandboxError, match="no runner here"):
        with docker_sandbox().episode([Mount(workspace, "/workspace")]):
            pass
    with pytest.raises(SandboxError, match="does not exist"):
        with docker_sandbox().episode([Mount(workspace / "missing", "/workspace")]):
            pass


def test_closing_removes_the_container_and_everything_it_ran(workspace):
    mounts = [Mount(workspace, "/workspace", writable=True)]
    results = []
    with docker_sandbox().episode(mounts) as episode:
        name = container_name(episode)
        writer = threading.Thread(target=lambda: results.append(
            bash(episode, "while :; do date >> ticks; sleep 0.02; done", wall_seconds=60)))
        writer.start()
        while not (workspace / "ticks").exists():
            time.sleep(0.05)
    assert not container_exists(name)
    size = (workspace / "ticks").stat().st_size
    time.sleep(0.3)
    assert (workspace / "ticks").stat().st_size == size  # nothing writes to the workspace any more
    writer.join(timeout=10)
    assert "the sandbox ended" in results[0].output and results[0].exit_code is None
    with pytest.raises(RuntimeError, match="the caller's"):
        with docker_sandbox().episode(mounts) as episode:
            name = container_name(episode)
            raise RuntimeError("the caller's")
    assert not container_exists(name)

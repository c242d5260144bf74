"""The bubblewrap sandbox against the real backend: isolation and limits."""

import os
import shutil
import subprocess
import time

import pytest

from resources.sandbox import (
    BubblewrapSandbox,
    Mount,
    SandboxError,
    SandboxLimits,
    SandboxUnavailable,
    write_bytecode_cache,
)

sandbox = BubblewrapSandbox()


def run(workspace, command, **limits):
    return sandbox.run(["bash", "-c", command], [Mount(workspace, "/workspace", writable=True)],
                       limits=SandboxLimits(**limits) if limits else None)


def test_workspace_is_writable_and_system_is_not(tmp_path):
    result = run(tmp_path, "echo hi > out.txt; echo x > /etc/clawloop-test; echo x > /usr/clawloop-test; id -u")
    assert (tmp_path / "out.txt").read_text() == "hi\n"
    assert "Read-only file system" in result.output
    assert result.output.strip().splitlines()[-1] != "0"  # never root inside


def test_no_network_and_clean_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_SECRET", "s3cret")
    result = run(tmp_path, "env; tail -n +3 /proc/net/dev | cut -d: -f1")
    assert result.output.split()[-1] == "lo"
    assert "s3cret" not in result.output


def test_wall_timeout_kills_the_whole_tree(tmp_path):
    # The background child sleeps a duration no other process uses: after the
    # timeout, no process of that command line may be left on the host.
    marker = f"{100 + os.getpid() % 1000}.{time.time_ns() % 10**9}"
    result = run(tmp_path, f"sleep {marker} & echo started; trap '' TERM; while :; do :; done", wall_seconds=1)
    assert result.timed_out and result.exit_code is None and result.seconds < 5
    assert "started" in result.output
    for _ in range(20):  # a killed process may take a moment to be reaped
        left = [line for line in subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout.splitlines()
                if line.strip() == f"sleep {marker}"]
        if not left:
            break
        time.sleep(0.05)
    assert left == [], "the command's background child outlived the timeout"


def test_output_is_capped_and_flagged(tmp_path):
    result = run(tmp_path, "head -c 10000000 /dev/zero | tr '\\0' y", output_bytes=1000)
    assert result.truncated and len(result.output) < 1200


def test_process_limit_holds(tmp_path):
    result = run(tmp_path, "for i in $(seq 200); do sleep 2 & done; wait", max_processes=20, wall_seconds=10)
    assert "Resource temporarily unavailable" in result.output


def test_memory_limit_holds(tmp_path):
    result = sandbox.run(["python3", "-c", "b = bytearray(3 << 30)"], [Mount(tmp_path, "/workspace", writable=True)],
                         limits=SandboxLimits(memory_bytes=512 << 20))
    assert result.exit_code != 0 and "MemoryError" in result.output


def test_every_limit_reaches_the_command(tmp_path):
    # The rlimits are applied outside the sandboxed process (prlimit before
    # bwrap); the command must still see each one as configured.
    limits = dict(cpu_seconds=7, memory_bytes=700 << 20, file_size_bytes=5 << 20, max_processes=33)
    result = run(tmp_path, "cat /proc/self/limits", **limits)
    seen = {line[:26].strip(): line[26:].split()[:2] for line in result.output.splitlines()[1:]}
    assert seen["Max cpu time"] == ["7", "7"]
    assert seen["Max address space"] == [str(700 << 20)] * 2
    assert seen["Max file size"] == [str(5 << 20)] * 2
    assert seen["Max processes"] == ["33", "33"]
    assert seen["Max core file size"] == ["0", "0"]


def test_missing_mount_source_is_a_sandbox_error(tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        sandbox.run(["true"], [Mount(tmp_path / "nope", "/workspace")])


def test_missing_bubblewrap_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr("resources.sandbox.shutil.which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run(tmp_path, "true")


def test_a_bytecode_cache_serves_only_the_source_it_was_compiled_from(tmp_path):
    trusted = tmp_path / "trusted" / "helper.py"
    trusted.parent.mkdir()
    trusted.write_text("VALUE = 'trusted'\n")
    same, other = tmp_path / "same", tmp_path / "other"
    same.mkdir()
    shutil.copyfile(trusted, same / "helper.py")
    write_bytecode_cache(trusted, same)
    # Another source of the same name and size beside that cache, as old as the copy.
    shutil.copytree(same, other)
    (other / "helper.py").write_text("VALUE = 'changed'\n")
    os.utime(other / "helper.py", ns=(os.stat(same / "helper.py").st_mtime_ns,) * 2)

    for directory, value, cached in ((same, "trusted", True), (other, "changed", False)):
        run = subprocess.run(["python3", "-I", "-B", "-v", "-c", "import sys; sys.path[:0] = ['.']; import helper; "
                              "print(helper.VALUE)"], cwd=directory, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == value
        assert (f"code object from '{directory}/__pycache__/helper." in run.stderr) is cached

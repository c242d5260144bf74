"""The bubblewrap sandbox against the real backend: isolation and limits."""

import pytest

from resources.sandbox import BubblewrapSandbox, Mount, SandboxError, SandboxLimits, SandboxUnavailable

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
    result = run(tmp_path, "sleep 100 & trap '' TERM; while :; do :; done", wall_seconds=1)
    assert result.timed_out and result.exit_code is None and result.seconds < 5


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


def test_missing_mount_source_is_a_sandbox_error(tmp_path):
    with pytest.raises(SandboxError, match="does not exist"):
        sandbox.run(["true"], [Mount(tmp_path / "nope", "/workspace")])


def test_missing_bubblewrap_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.setattr("resources.sandbox.shutil.which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        run(tmp_path, "true")

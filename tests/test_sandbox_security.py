"""Hostile commands against each real sandbox backend (bubblewrap; Docker in
the slow suite, one container per command and an episode's runner): any
visible effect on the host is a failure."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_docker_episode import EPISODE_BACKENDS, make_backend

from resources import sandbox as sandbox_module
from resources.sandbox import (
    Mount,
    SandboxLimits,
    directory_bytes,
    disk_quota,
    orphaned_quotas,
    release_orphaned_quotas,
)

# A uid of its own, so that "no process left" sees only these tests' sandboxes.
SANDBOX_UID = 64999


@pytest.fixture(params=EPISODE_BACKENDS)
def sandbox(request):
    return make_backend(request.param, sandbox_uid=SANDBOX_UID, sandbox_gid=SANDBOX_UID)


@pytest.fixture
def run(sandbox):
    def run(workspace: Path, command: str, **limits):
        return sandbox.run(["bash", "-c", command], [Mount(workspace, "/workspace", writable=True)],
                           limits=SandboxLimits(**limits) if limits else None)

    return run


def sandbox_processes() -> list[str]:
    uid = str(SANDBOX_UID)
    out = subprocess.run(["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.split()[0] == uid]


@pytest.fixture
def workspace(tmp_path):
    path = tmp_path / "workspace"
    path.mkdir()
    return path


def test_writes_outside_the_workspace_never_reach_the_host(run, workspace, tmp_path):
    outside = tmp_path / "outside.txt"
    marker = "clawloop-pwned"
    run(workspace, f"echo {marker} > /etc/pwned; echo {marker} > ~/pwned; echo {marker} > ../../pwned; "
                   f"echo {marker} > {outside}; mkdir -p /root/.ssh && echo {marker} >> /root/.ssh/authorized_keys")
    assert not Path("/etc/pwned").exists()
    assert not outside.exists()
    assert not (Path.home() / "pwned").exists()
    keys = Path("/root/.ssh/authorized_keys")
    assert not keys.exists() or marker not in keys.read_text()


def test_a_symlink_out_of_the_workspace_reaches_nothing_writable(run, workspace, tmp_path):
    target = tmp_path / "host_file.txt"
    target.write_text("host\n")
    result = run(workspace, f"ln -s {target} link; echo agent > link; ln -s /etc/passwd pw; echo x >> pw; cat link")
    assert "No such file or directory" in result.output  # the host path does not exist in there
    assert target.read_text() == "host\n"
    assert (workspace / "link").is_symlink()  # left for the verifier, which refuses to follow links


def test_no_network_but_an_empty_loopback(run, workspace):
    # Checked without sending a packet, so a broken sandbox cannot send any:
    # no interface but lo and no route means every outside address (the
    # metadata service 169.254.169.254, DNS servers) is unreachable.
    result = run(workspace, "tail -n +3 /proc/net/dev | cut -d: -f1; echo ROUTES; tail -n +2 /proc/net/route")
    interfaces, routes = result.output.split("ROUTES")
    assert interfaces.split() == ["lo"]
    assert routes.strip() == ""


def test_loopback_services_of_the_host_are_out_of_reach(run, workspace):
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        result = run(workspace, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo REACHED", wall_seconds=10)
    assert "REACHED" not in result.output


def test_host_secrets_are_unreadable(run, workspace, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_TEST_SECRET", "hunter2")
    result = run(workspace, "env; cat /proc/1/environ; ls -a ~/.ssh /root; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'")
    assert "hunter2" not in result.output
    from resources import paths

    for secret_path in (paths.warehouse_path(), paths.model_cache_dir()):
        probe = run(workspace, f"ls {secret_path} && echo VISIBLE")
        assert "VISIBLE" not in probe.output


def test_fork_bomb_is_contained_and_leaves_nothing(run, workspace):
    started = time.monotonic()
    result = run(workspace, ":(){ :|:& };:", wall_seconds=5, max_processes=32)
    assert result.timed_out or result.exit_code is not None
    assert time.monotonic() - started < 15
    time.sleep(0.5)
    assert sandbox_processes() == []
    assert run(workspace, "echo alive").output.strip() == "alive"  # the harness stays usable


@pytest.mark.parametrize("command", ["yes", "head -c 10G /dev/zero"])
def test_endless_output_is_capped_and_flagged(run, workspace, command):
    result = run(workspace, command, wall_seconds=5, output_bytes=4096)
    assert result.truncated
    assert len(result.output.encode()) < 4096 + 200


def test_a_background_child_holding_the_pipe_does_not_hang_the_harness(run, workspace):
    started = time.monotonic()
    result = run(workspace, "(sleep 60; echo late) & echo done", wall_seconds=30)
    assert result.output.strip() == "done" and not result.timed_out
    assert time.monotonic() - started < 5
    assert sandbox_processes() == []


def test_a_command_that_ignores_term_is_killed_at_the_timeout(run, workspace):
    result = run(workspace, "trap '' TERM INT; while :; do :; done", wall_seconds=2)
    assert result.timed_out and result.exit_code is None
    assert sandbox_processes() == []


def test_a_memory_hog_is_stopped_and_recorded(run, workspace):
    result = run(workspace, "python3 -c 'x = bytearray(4 << 30)'; echo exit=$?", memory_bytes=256 << 20)
    # bubblewrap's address-space rlimit fails the allocation; Docker's memory
    # cgroup kills the process (SIGKILL, 137). Either way the shell goes on.
    assert ("MemoryError" in result.output and "exit=1" in result.output) or "exit=137" in result.output


def test_a_file_past_the_size_limit_is_cut(run, workspace):
    result = run(workspace, "head -c 100M /dev/zero > big; echo exit=$?", file_size_bytes=1 << 20)
    assert (workspace / "big").stat().st_size <= 1 << 20
    assert "exit=0" not in result.output


def test_kill_everything_inside_reaches_no_host_process(run, workspace):
    # A host process of the very uid the sandbox runs as: only the pid
    # namespace keeps `kill -9 -1` from reaching it.
    bystander = subprocess.Popen(["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                                  "--clear-groups", "sleep", "60"])
    try:
        time.sleep(0.2)
        run(workspace, "kill -9 -1; kill -9 $PPID; kill -9 1", wall_seconds=5)
        assert bystander.poll() is None, "kill -9 -1 inside the sandbox killed a host process"
    finally:
        bystander.kill()
        bystander.wait()
    assert run(workspace, "echo alive").output.strip() == "alive"


def test_nothing_carries_over_between_runs(run, workspace, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    first = run(workspace, "echo left > /tmp/leftover && cat /tmp/leftover; echo left > /dev/shm/leftover 2>/dev/null; sleep 30 &")
    assert first.output.startswith("left")
    result = run(other, "cat /tmp/leftover /dev/shm/leftover 2>&1; echo FDS; ls /proc/self/fd")
    before_fds, fds = result.output.split("FDS")
    assert before_fds.count("No such file or directory") == 2  # /tmp/leftover was written, then thrown away
    # stdin, stdout, stderr and the directory ls itself opened: nothing inherited.
    assert set(fds.split()) <= {"0", "1", "2", "3"}
    assert sandbox_processes() == []


def test_the_private_tmp_is_bounded(run, workspace):
    result = run(workspace, "for i in 1 2 3; do head -c 50M /dev/zero > /tmp/fill$i || echo FULL; done",
                 tmp_bytes=32 << 20, file_size_bytes=256 << 20)
    assert "No space left on device" in result.output and "FULL" in result.output


def test_a_disk_fill_stops_at_the_workspace_quota(run, tmp_path):
    # Many files, each under the file-size limit: only the quota stops them.
    workspace = tmp_path / "bounded"
    with disk_quota(workspace, 8 << 20) as enforced:
        assert enforced, "the suite runs as root, where the quota is a filesystem of its own"
        (workspace / "input.txt").write_text("kept\n")
        result = run(workspace, "for i in $(seq 20); do head -c 1M /dev/zero > fill$i || { echo FULL; break; }; done; "
                                "ln -s /etc/passwd link; mkfifo pipe", file_size_bytes=2 << 20)
        assert "No space left on device" in result.output and "FULL" in result.output
    # Unmounted, its contents back on disk: what was written up to the quota, links as links.
    assert not os.path.ismount(workspace)
    assert (workspace / "input.txt").read_text() == "kept\n"
    assert (workspace / "link").is_symlink()
    assert not (workspace / "pipe").exists()  # a FIFO is not copied back (reading it would block)
    assert directory_bytes(workspace) <= 8 << 20


def test_a_quota_whose_process_was_killed_outright_is_released_and_a_live_ones_is_not(tmp_path):
    # SIGKILL skips the owner's `finally`: its tmpfs would stay mounted (and
    # hold its contents in memory) on a directory nobody reuses.
    dead, live = tmp_path / "dead owner", tmp_path / "live"  # a space: mountinfo escapes it
    owner = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from resources.sandbox import disk_quota\n"
         "with disk_quota(sys.argv[1], 1 << 20):\n    print('mounted', flush=True); time.sleep(600)", str(dead)],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[1])
    try:
        assert owner.stdout.readline() == "mounted\n"
        with disk_quota(live, 1 << 20) as enforced:
            assert enforced, "the suite runs as root, where the quota is a filesystem of its own"
            assert os.path.ismount(dead) and dead not in orphaned_quotas()  # its owner still runs
            owner.kill()
            owner.wait()
            assert os.path.ismount(dead) and dead in orphaned_quotas()
            assert live not in orphaned_quotas()
            assert dead in release_orphaned_quotas()
            assert not os.path.ismount(dead) and os.path.ismount(live)
            assert dead not in orphaned_quotas()
    finally:
        owner.kill()
        owner.wait()
        release_orphaned_quotas()


def test_an_orphaned_quota_is_told_by_its_owners_start_time_and_pid_namespace(tmp_path):
    namespace = os.stat("/proc/self/ns/pid").st_ino
    start_time = sandbox_module._process_start_time(os.getpid())
    sources = {"reused pid": f"clawloop-quota:{namespace}:{os.getpid()}:{int(start_time) - 1}",
               "other namespace": f"clawloop-quota:{namespace + 1}:{os.getpid() + 1_000_000}:1",
               "not a quota": "tmpfs"}
    for name, source in sources.items():
        (tmp_path / name).mkdir()
        assert sandbox_module._libc().mount(source.encode(), os.fsencode(tmp_path / name), b"tmpfs", 0, b"size=4096") == 0
    try:
        assert tmp_path / "reused pid" in orphaned_quotas()
        assert tmp_path / "other namespace" not in orphaned_quotas()
        assert tmp_path / "not a quota" not in orphaned_quotas()
    finally:
        for name in sources:
            sandbox_module._unmount_lazily(tmp_path / name)


def test_a_command_exiting_125_is_scored_as_its_own_exit(run, workspace):
    # Docker reports its own failures as exit 125; GNU env exits 125 on a bad
    # option. The command's 125 must come back as the command's, not as a
    # sandbox failure, and the output must be the command's alone.
    result = run(workspace, "echo before; env -f; echo after >&2; exit 125")
    assert result.exit_code == 125
    assert result.output.startswith("before\n") and "invalid option" in result.output


def test_output_and_errors_are_one_stream(run, workspace):
    # Two streams carried apart (Docker's attach) keep no order between them:
    # under load a command's errors overtook its earlier output.
    result = run(workspace, "readlink /proc/$$/fd/1 /proc/$$/fd/2")
    stdout, stderr = result.output.splitlines()
    assert stdout == stderr and stdout.startswith("pipe:")


def test_a_command_runs_as_the_uid_asked_for(sandbox, workspace):
    from resources.sandbox import VERIFIER_UID

    asked = sandbox.run(["id", "-u"], [Mount(workspace, "/workspace", writable=True)], uid=VERIFIER_UID)
    default = sandbox.run(["id", "-u"], [Mount(workspace, "/workspace", writable=True)])
    if os.geteuid() == 0:
        assert (asked.output.strip(), default.output.strip()) == (str(VERIFIER_UID), str(SANDBOX_UID))
        assert workspace.stat().st_uid == SANDBOX_UID  # handed to the uid of the last command
    else:
        assert asked.exit_code == 0


def test_no_new_namespaces_inside(run, workspace):
    # A user namespace inside would give the command capabilities over a
    # mount namespace of its own (a tmpfs of any size, charged to the host).
    result = run(workspace, "unshare -Urm sh -c 'mount -t tmpfs -o size=12g t /mnt && echo MOUNTED'; echo exit=$?; "
                            "unshare -Ur true; echo user=$?")
    assert "MOUNTED" not in result.output
    assert "exit=0" not in result.output and "user=0" not in result.output


# The calls themselves, through ctypes (x86_64 numbers): each must fail with
# the filter's errno, where without a filter each succeeds for any uid.
SYSCALL_PROBE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    r = libc.syscall(nr, *args)
    if r == 0 and name == "clone":
        os._exit(0)
    print(name, "ok" if r >= 0 else os.strerror(ctypes.get_errno()))
call("ptrace", 101, 0, 0, 0, 0)  # PTRACE_TRACEME
call("io_uring_setup", 425, 1, ctypes.create_string_buffer(120))
call("personality", 135, 0x0040000)  # ADDR_NO_RANDOMIZE
call("clone", 56, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
call("clone3", 435, 0, 0)
call("keyctl", 250, 0, -4, 0)  # KEYCTL_GET_KEYRING_ID of the user keyring
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe uses x86_64 system-call numbers")
def test_the_system_call_filter_refuses_what_it_lists(run, workspace):
    (workspace / "probe.py").write_text(SYSCALL_PROBE)
    result = run(workspace, "python3 probe.py; python3 -c 'import subprocess; print(subprocess.run([\"echo\", \"ran\"]))'")
    seen = dict(line.split(" ", 1) for line in result.output.splitlines() if line.split(" ", 1)[0] in
                {"ptrace", "io_uring_setup", "personality", "clone", "clone3", "keyctl"})
    assert seen == {"ptrace": "Operation not permitted", "io_uring_setup": "Operation not permitted",
                    "personality": "Operation not permitted", "clone": "Operation not permitted",
                    "clone3": "Function not implemented", "keyctl": "Operation not permitted"}, result.output
    assert "returncode=0" in result.output  # ordinary process creation still works (clone3 falls back to clone)


# `keyctl add user k LEAKED @u`, then `keyctl print %user:k` in a later run,
# as system calls (the harness image has no keyutils).
KEY_ADD = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("added", libc.syscall(248, b"user", b"k", b"LEAKED", 6, -4))  # add_key to KEY_SPEC_USER_KEYRING
"""
KEY_READ = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
key = libc.syscall(250, 10, -4, b"user", b"k", 0)  # KEYCTL_SEARCH the user keyring
buf = ctypes.create_string_buffer(64)
n = libc.syscall(250, 11, key, buf, 64) if key > 0 else -1  # KEYCTL_READ
print("read", buf.raw[:max(n, 0)].decode())
"""


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the probe uses x86_64 system-call numbers")
def test_the_keyring_is_no_channel_between_runs(run, workspace, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (workspace / "add.py").write_text(KEY_ADD)
    (other / "read.py").write_text(KEY_READ)
    try:
        run(workspace, "python3 add.py")
        result = run(other, "python3 read.py")
        assert "read" in result.output and "LEAKED" not in result.output
    finally:  # a leaked key would outlive the test in the uid's keyring
        subprocess.run(["setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                        "python3", "-c", "import ctypes; ctypes.CDLL(None).syscall(250, 7, -4)"],  # KEYCTL_CLEAR
                       capture_output=True)


def test_the_memory_limit_holds_for_the_sandbox_as_a_whole(run, workspace):
    # Four processes of 700 MB each, under a 1 GiB limit: a per-process limit
    # lets all four hold theirs at once; a whole-sandbox one cannot.
    hold = "python3 -c 'b = b\"x\" * (700 << 20); import time; time.sleep(2); print(\"survived\")'"
    result = run(workspace, f"for i in 1 2 3 4; do {hold} & done; wait; echo end", memory_bytes=1 << 30,
                 wall_seconds=30)
    assert "end" in result.output
    assert result.output.splitlines().count("survived") <= 1

"""What leaves a sandbox: a workspace copied back onto the host by
`disk_quota` (as run_rollouts does) or by `copy_tree_safely` holds nothing
dangerous, and a hostile tree is the writer's failure, never a crash."""

import os
import stat
import time
from pathlib import Path

import pytest
from test_docker_episode import EPISODE_BACKENDS, make_backend

from resources.sandbox import (
    SANDBOX_UID,
    VERIFIER_UID,
    CopyReport,
    Mount,
    SandboxLimits,
    copy_tree_safely,
    directory_bytes,
    disk_quota,
    tree_usage,
)

AS_ROOT = os.geteuid() == 0


@pytest.fixture(params=EPISODE_BACKENDS)
def sandbox(request):
    return make_backend(request.param)


def run_in_quota(sandbox, workspace: Path, command: str, quota: int = 16 << 20, **limits) -> tuple:
    """One command in a workspace under a disk quota; the result and the copy-out's report."""
    reports: list[CopyReport] = []
    with disk_quota(workspace, quota, on_copy=reports.append) as enforced:
        assert enforced, "the suite runs as root, where the quota is a filesystem of its own"
        result = sandbox.run(["bash", "-c", command], [Mount(workspace, "/workspace", writable=True)],
                             limits=SandboxLimits(**limits) if limits else None)
    return result, reports[0]


def walk(root: Path):
    """Every entry under `root`, iteratively, links not followed."""
    pending = [root]
    while pending:
        for entry in os.scandir(pending.pop()):
            yield entry
            if entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))


def test_setuid_files_and_setgid_dirs_do_not_leave_the_sandbox(sandbox, tmp_path):
    workspace = tmp_path / "w"
    result, report = run_in_quota(
        sandbox, workspace,
        "cp /usr/bin/id myid && chmod 4755 myid && cp /usr/bin/id gid && chmod 2755 gid && "
        "mkdir d && chmod 2777 d && mkdir t && chmod 1777 t && echo x > d/f && chmod 6777 d/f && echo done")
    assert "done" in result.output and report.over_limit is None
    seen = {}
    for entry in walk(workspace):
        info = entry.stat(follow_symlinks=False)
        seen[Path(entry.path).relative_to(workspace).as_posix()] = info
        assert not info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX), entry.path
        assert not info.st_mode & stat.S_IWOTH, entry.path
        if AS_ROOT:
            assert info.st_uid != 0 and info.st_gid != 0, entry.path
    assert set(seen) == {"myid", "gid", "d", "t", "d/f"}
    assert stat.S_IMODE(seen["myid"].st_mode) == 0o755 and stat.S_IMODE(seen["d"].st_mode) == 0o755
    assert stat.S_IMODE(seen["d/f"].st_mode) == 0o755  # an x bit was set: executable, nothing more
    root_info = workspace.stat()
    assert not root_info.st_mode & (stat.S_ISUID | stat.S_ISGID | stat.S_ISVTX | stat.S_IWOTH)


def test_a_tree_nested_500_deep_is_the_agents_failure_not_a_crash(sandbox, tmp_path):
    workspace = tmp_path / "w"
    result, report = run_in_quota(sandbox, workspace, "mkdir -p $(printf 'd/%.0s' $(seq 500)) && echo deep")
    assert "deep" in result.output
    assert report.over_limit and "deeper than" in report.over_limit
    depth, path = 0, workspace
    while (path / "d").is_dir():
        path, depth = path / "d", depth + 1
    assert depth <= 64


def test_sparse_files_do_not_grow_on_the_host(sandbox, tmp_path):
    # Ten 60 MB sparse files cost 40 KB in a 16 MiB quota: their apparent size
    # is what a copy-out would write, and that is what counts.
    workspace = tmp_path / "w"
    result, report = run_in_quota(sandbox, workspace, "for i in $(seq 10); do truncate -s 60M sparse$i; done; echo made")
    assert "made" in result.output
    assert report.over_limit and "bytes" in report.over_limit
    assert directory_bytes(workspace) <= 16 << 20
    held = sum(e.stat(follow_symlinks=False).st_blocks * 512 for e in walk(workspace))
    assert held <= 16 << 20


def test_many_empty_files_are_refused_quickly(sandbox, tmp_path):
    workspace = tmp_path / "w"
    started = time.monotonic()
    result, report = run_in_quota(
        sandbox, workspace,
        "python3 -c \"\nimport os\nfor i in range(200000):\n    open(f'f{i}', 'w').close()\n\"; echo exit=$?",
        wall_seconds=30)
    assert "No space left on device" in result.output and "exit=1" in result.output
    assert sum(1 for _ in os.scandir(workspace)) <= 10_000
    assert time.monotonic() - started < 15


def test_links_fifos_and_hard_links_are_handled_on_purpose(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_text("a\n")
    os.link(src / "a.txt", src / "sub" / "hard.txt")
    os.symlink("/etc/shadow", src / "link")
    os.mkfifo(src / "sub" / "pipe")
    report = copy_tree_safely(src, dst, owner=(VERIFIER_UID, VERIFIER_UID))
    assert report == CopyReport(files=4, bytes=4, skipped=("sub/pipe",), over_limit=None)
    assert os.readlink(dst / "link") == "/etc/shadow"  # kept as a link, never followed
    assert (dst / "sub" / "hard.txt").read_text() == "a\n"
    assert os.stat(dst / "a.txt").st_ino != os.stat(dst / "sub" / "hard.txt").st_ino
    if AS_ROOT:
        assert {os.lstat(p).st_uid for p in (dst, dst / "a.txt", dst / "link", dst / "sub")} == {VERIFIER_UID}
        copy_tree_safely(src, tmp_path / "default")
        assert os.stat(tmp_path / "default" / "a.txt").st_uid == SANDBOX_UID


def test_limits_stop_the_copy_cleanly(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for i in range(30):
        (src / f"f{i}").write_bytes(b"x" * 100)
    assert copy_tree_safely(src, tmp_path / "a", max_files=10).over_limit.startswith("more than 10 files")
    assert sum(1 for _ in os.scandir(tmp_path / "a")) == 10
    assert "bytes" in copy_tree_safely(src, tmp_path / "b", max_bytes=1000).over_limit
    usage = tree_usage(src)
    assert (usage.files, usage.bytes, usage.over_limit) == (30, 3000, None)
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())

"""Sandboxes for untrusted code: agent commands, model-written generators and
verifiers all run here and nowhere else."""

from __future__ import annotations

import os
import select
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import uuid
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

import dagster as dg

SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
# The whole environment a command starts with (plus what the caller passes):
# nothing of the host's leaks in.
SANDBOX_ENV = {"PATH": SANDBOX_PATH, "HOME": "/tmp", "LANG": "C.UTF-8"}


@dataclass(frozen=True)
class Mount:
    """A host directory made visible inside the sandbox at `target`."""

    host: Path
    target: str
    writable: bool = False


@dataclass(frozen=True)
class SandboxLimits:
    wall_seconds: float = 20.0
    cpu_seconds: int = 20
    memory_bytes: int = 1 << 30
    file_size_bytes: int = 64 << 20
    max_processes: int = 64
    output_bytes: int = 16 << 10  # head and tail halves are kept beyond this
    tmp_bytes: int = 64 << 20  # size of the sandbox's private /tmp


@dataclass(frozen=True)
class CommandResult:
    exit_code: int | None  # None when the wall timeout killed it
    output: str  # stdout and stderr interleaved, capped
    truncated: bool
    timed_out: bool
    seconds: float


class SandboxError(RuntimeError):
    """The sandbox itself failed, as opposed to the command inside it."""


class SandboxUnavailable(SandboxError):
    """The sandbox backend is not installed or cannot start here."""


class Sandbox(dg.ConfigurableResource, ABC):
    """Runs one command in a fresh, isolated process tree."""

    @abstractmethod
    def run(
        self,
        argv: Sequence[str],
        mounts: Sequence[Mount],
        *,
        cwd: str = "/workspace",
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult: ...


class BubblewrapSandbox(Sandbox):
    """bubblewrap: pid, net, ipc, uts and mount namespaces, read-only system,
    only the given mounts writable, rlimits, and an unprivileged uid.

    Run unprivileged, bwrap also creates a user namespace. Run as root, the
    user namespace would map the sandbox onto host root (where RLIMIT_NPROC is
    not enforced), so bwrap sets up the mounts as root and `setpriv` drops the
    command to `sandbox_uid` with every capability cleared before it starts.
    """

    sandbox_uid: int = 65534
    sandbox_gid: int = 65534

    def _bwrap(self) -> str:
        path = shutil.which("bwrap")
        if path is None:
            raise SandboxUnavailable(
                "bubblewrap (bwrap) is not installed: run `make setup`, which installs it, "
                "or `apt-get install bubblewrap`"
            )
        return path

    def _prlimit(self) -> str:
        path = shutil.which("prlimit")
        if path is None:
            raise SandboxUnavailable("prlimit (util-linux) is not installed: `apt-get install util-linux`")
        return path

    def _as_root(self) -> bool:
        return os.geteuid() == 0

    def command_line(
        self, argv: Sequence[str], mounts: Sequence[Mount], cwd: str, env: Mapping[str, str],
        limits: SandboxLimits = SandboxLimits(),
    ) -> list[str]:
        args = [
            self._bwrap(),
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "sandbox",
            "--die-with-parent", "--new-session",
            "--ro-bind", "/usr", "/usr",
            "--ro-bind", "/etc", "/etc",
            "--symlink", "usr/bin", "/bin",
            "--symlink", "usr/sbin", "/sbin",
            "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64",
            "--dev", "/dev",
            "--proc", "/proc",
            # Sticky and world-writable: the dropped uid needs a /tmp (sort, mktemp, HOME).
            "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
            "--clearenv",
        ]
        for key, value in {**SANDBOX_ENV, **env}.items():
            args += ["--setenv", key, value]
        for mount in existing_mounts(mounts):
            args += ["--bind" if mount.writable else "--ro-bind", str(mount.host), mount.target]
        args += ["--chdir", cwd]
        if self._as_root():
            args += [
                "setpriv", f"--reuid={self.sandbox_uid}", f"--regid={self.sandbox_gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--",
            ]
        else:
            args += ["--unshare-user", "--uid", "1000", "--gid", "1000"]
        return args + list(argv)

    def run(
        self,
        argv: Sequence[str],
        mounts: Sequence[Mount],
        *,
        cwd: str = "/workspace",
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        limits = limits or SandboxLimits()
        args = self.command_line(argv, mounts, cwd, env or {}, limits)
        if self._as_root():
            own_writable_mounts(mounts, self.sandbox_uid, self.sandbox_gid)
        # The rlimits are set by util-linux prlimit, which then execs bwrap with
        # them, not by a preexec_fn: a preexec_fn makes Python fork() instead of
        # vfork(), and forking the round's process (the model loaded, about 2 GB)
        # cost about 0.5 s a command here, against 2 ms without.
        args = [
            self._prlimit(),
            f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds}",
            f"--as={limits.memory_bytes}:{limits.memory_bytes}",
            f"--fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
            f"--nproc={limits.max_processes}:{limits.max_processes}",
            "--core=0:0",
            "--",
            *args,
        ]
        try:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # one process group to kill on timeout
                close_fds=True,
            )
        except OSError as exc:
            raise SandboxError(f"could not start bubblewrap: {exc}") from exc
        # bwrap runs with --die-with-parent and is pid 1 of its namespace:
        # killing its group kills everything the command started.
        result = _collect(proc, limits, kill=lambda: _kill_group(proc))
        if not result.timed_out and result.exit_code != 0 and result.output.startswith(("bwrap:", "prlimit:")):
            # bwrap's or prlimit's own failure (bad mount, no namespaces): not the command's.
            raise SandboxError(f"bubblewrap failed to start the sandbox: {result.output.strip()}")
        return result


@contextmanager
def disk_quota(directory: Path, max_bytes: int) -> Iterator[bool]:
    """Bound what commands can write into `directory` (a writable mount) for
    the duration: a tmpfs of `max_bytes` of its own is mounted on it, so a
    full disk is the command's ENOSPC, not the host's. At the end its contents
    (links kept as links) move back onto the disk and it is unmounted.

    `directory` must be empty on entry. The kernel here has no disk quotas
    (no CONFIG_QUOTA), so a filesystem per workspace is the enforceable
    bound; tmpfs keeps it in memory, so callers size `max_bytes` to keep the
    sum over all live workspaces small. Mounting needs root: without it this
    yields False and callers check `directory_bytes` after each command.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield False
        return
    if any(directory.iterdir()):
        raise SandboxError(f"{directory} must be empty to take a disk quota")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={max_bytes},mode=0755", "tmpfs", str(directory)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        raise SandboxError(f"could not mount a {max_bytes}-byte tmpfs on {directory}: {mounted.stderr.strip()}")
    try:
        yield True
    finally:
        keep = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
        try:
            shutil.copytree(directory, keep / "contents", symlinks=True, ignore=special_files)
        finally:
            release_quota(directory)
        for item in (keep / "contents").iterdir():
            os.replace(item, directory / item.name)
        shutil.rmtree(keep)


def special_files(directory: str, names: list[str]) -> set[str]:
    """For shutil.copytree's `ignore`: what untrusted code left that is not a
    regular file, directory or link (a FIFO would block the copy forever)."""
    skipped = set()
    for name in names:
        mode = os.lstat(os.path.join(directory, name)).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
            skipped.add(name)
    return skipped


def release_quota(directory: Path) -> None:
    """Unmount a quota tmpfs left on `directory` (also one a crashed run left)."""
    if os.path.ismount(directory):
        done = subprocess.run(["umount", "--lazy", str(directory)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SandboxError(f"could not unmount the quota tmpfs on {directory}: {done.stderr.strip()}")


def directory_bytes(directory: Path) -> int:
    """Bytes held by the regular files under `directory`; links are not followed."""
    total = 0
    for root, _dirs, files in os.walk(directory, followlinks=False):
        for name in files:
            info = os.lstat(os.path.join(root, name))
            if stat.S_ISREG(info.st_mode):
                total += info.st_blocks * 512
    return total


def existing_mounts(mounts: Sequence[Mount]) -> Sequence[Mount]:
    """`mounts`, or SandboxError naming the first whose host side is missing."""
    for mount in mounts:
        if not Path(mount.host).exists():
            raise SandboxError(f"mount source {mount.host} does not exist")
    return mounts


def own_writable_mounts(mounts: Sequence[Mount], uid: int, gid: int) -> None:
    """Hand the writable mounts to the unprivileged uid a command runs as.
    lchown: never follow a link an earlier command may have planted."""
    for mount in mounts:
        if not mount.writable:
            continue
        os.lchown(mount.host, uid, gid)
        for root, dirs, files in os.walk(mount.host, followlinks=False):
            for name in dirs + files:
                os.lchown(os.path.join(root, name), uid, gid)


# Printed by the container before it runs the command. Docker reports its own
# failures with exit code 125, but so does any command that exits 125 (GNU
# `env` on a bad option does): the marker says the container started, so a 125
# after it is the command's. It is stripped from the output.
CONTAINER_STARTED = "\x1eclawloop-sandbox-started\x1e\n"


class DockerSandbox(Sandbox):
    """One container per command from the harness image
    (`sandbox_images/harness`): no network, read-only root, a private bounded
    /tmp and /dev/shm, memory, pid and rlimits, every capability dropped, an
    unprivileged uid, and only the given mounts writable. The command's output
    is streamed from the attached client and never stored by the engine."""

    image: str = "clawloop/harness:latest"
    sandbox_uid: int = 65534
    sandbox_gid: int = 65534
    docker: str = "docker"

    def _docker(self) -> str:
        path = shutil.which(self.docker)
        if path is None:
            raise SandboxUnavailable(
                f"the Docker client ({self.docker}) is not installed: run `make docker-backend` "
                "(apt-get install docker.io, start dockerd, build the harness image)"
            )
        return path

    def check_available(self) -> None:
        """Raise SandboxUnavailable naming the fix when the engine or the image is missing."""
        probe = subprocess.run([self._docker(), "image", "inspect", "--format", "{{.Id}}", self.image],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            raise SandboxUnavailable(
                f"Docker cannot run the harness image {self.image}: {probe.stderr.strip()} "
                "(run `make docker-backend` to start the engine and build the image)"
            )

    def command_line(
        self, argv: Sequence[str], mounts: Sequence[Mount], cwd: str, env: Mapping[str, str], limits: SandboxLimits,
        name: str,
    ) -> list[str]:
        uid, gid = (self.sandbox_uid, self.sandbox_gid) if os.geteuid() == 0 else (os.getuid(), os.getgid())
        args = [
            self._docker(), "run", "--rm", "--name", name,
            "--network", "none", "--hostname", "sandbox", "--ipc", "private",
            "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--user", f"{uid}:{gid}", "--init",
            "--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes),
            "--pids-limit", str(limits.max_processes),
            "--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds}",
            "--ulimit", f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
            "--ulimit", "core=0:0",
            "--tmpfs", f"/tmp:rw,exec,mode=1777,size={limits.tmp_bytes}",
            "--shm-size", str(limits.tmp_bytes),
            "--log-driver", "none",  # output is read from the attached stream, never kept by the engine
        ]
        for key, value in {**SANDBOX_ENV, **env}.items():
            args += ["--env", f"{key}={value}"]
        for mount in existing_mounts(mounts):
            options = "" if mount.writable else ",readonly"
            # --mount, not -v: a missing source is an error, never silently created.
            args += ["--mount", f"type=bind,source={Path(mount.host).resolve()},target={mount.target}{options}"]
        announce = 'printf "%s" "$0"; exec "$@"'
        return args + ["--workdir", cwd, self.image, "/bin/sh", "-c", announce, CONTAINER_STARTED, *argv]

    def run(
        self,
        argv: Sequence[str],
        mounts: Sequence[Mount],
        *,
        cwd: str = "/workspace",
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
    ) -> CommandResult:
        limits = limits or SandboxLimits()
        name = f"clawloop-sandbox-{uuid.uuid4().hex[:16]}"
        args = self.command_line(argv, mounts, cwd, env or {}, limits, name)
        if os.geteuid() == 0:
            own_writable_mounts(mounts, self.sandbox_uid, self.sandbox_gid)
        try:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        except OSError as exc:
            raise SandboxError(f"could not start the Docker client: {exc}") from exc

        def kill() -> None:
            # The client first: while it is attached and not read, the engine
            # blocks on the container's output and cannot remove it. Killing
            # the client leaves the container running: remove it by name.
            _kill_group(proc)
            subprocess.run([self._docker(), "rm", "--force", name], capture_output=True, timeout=60)

        result = _collect(proc, limits, kill=kill)
        started = result.output.startswith(CONTAINER_STARTED)
        if result.exit_code == 125 and not started:
            # Docker's own failure (daemon unreachable, bad mount, missing image), not the command's.
            raise SandboxError(f"docker failed to start the sandbox: {result.output.strip()[-2000:]}")
        if started:
            result = replace(result, output=result.output[len(CONTAINER_STARTED):])
        return result


def _collect(proc: subprocess.Popen, limits: SandboxLimits, kill: Callable[[], None]) -> CommandResult:
    """Read a sandbox process's output, capped, until it exits or the wall
    timeout passes; `kill` stops everything the command started."""
    started = time.monotonic()
    capture = _CappedOutput(limits.output_bytes)
    timed_out = False
    deadline = started + limits.wall_seconds
    fd = proc.stdout.fileno()
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                capture.add(chunk)
    finally:
        if timed_out or proc.poll() is None:
            kill()
        proc.stdout.close()
    exit_code = proc.wait()
    return CommandResult(
        exit_code=None if timed_out else exit_code,
        output=capture.text(),
        truncated=capture.truncated,
        timed_out=timed_out,
        seconds=time.monotonic() - started,
    )


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class _CappedOutput:
    """Keeps the first and last `cap // 2` bytes, so memory stays bounded
    however much a command prints."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        if not self.truncated:
            return (self.head + self.tail).decode("utf-8", "replace")
        dropped = self.total - len(self.head) - len(self.tail)
        return (
            self.head.decode("utf-8", "replace")
            + f"\n[... {dropped} bytes of output omitted ...]\n"
            + self.tail.decode("utf-8", "replace")
        )

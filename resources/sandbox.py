"""Sandboxes for untrusted code: agent commands, model-written generators and
verifiers all run here and nowhere else.

Both backends filter system calls with the same table (`DENIED_SYSCALLS`), in
the manner of the Codex and Chromium Linux sandboxes: no new namespaces (so
no user namespace in which to mount a tmpfs or gain capabilities), no
keyrings (a channel between runs of the same uid), no mount, ptrace, bpf,
perf, io_uring, module or kexec calls. bubblewrap loads it as a classic-BPF
program (`seccomp_program`), Docker as a JSON profile
(`docker_seccomp_profile`).

Memory and process limits hold for the sandbox as a whole: Docker puts each
container in a cgroup of its own; bubblewrap, run as root on a cgroup v1
host, puts each command in a fresh memory and pids cgroup. Where no cgroup
can be made (not root, or no v1 memory/pids controller), the bubblewrap
backend keeps only its rlimits: the address-space limit then holds per
process, not for the sandbox (N processes may use N times `memory_bytes`),
and the process limit counts every process of the sandbox uid on the host.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import importlib.util
import json
import os
import platform
import py_compile
import select
import shutil
import signal
import stat
import struct
import subprocess
import tempfile
import threading
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
# The uid the agent's commands run as (both backends' default sandbox_uid),
# and a different one for the verifier, so that nothing the agent's processes
# did (modes, ownership, signals) reaches a verifier run as the same user.
SANDBOX_UID = 65534
VERIFIER_UID = 65533


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
        uid: int | None = None,
    ) -> CommandResult:
        """Run `argv` as `uid` (and the same gid), or as the backend's
        sandbox_uid when None."""

    @contextmanager
    def episode(self, mounts: Sequence[Mount], *, cwd: str = "/workspace") -> Iterator[EpisodeRunner]:
        """The commands of one agent episode, all on the same `mounts`, run
        as the sandbox uid. Here each command gets a fresh sandbox; a backend
        may keep one sandbox for the whole episode instead (Docker: one
        container) and must then still hold each command's limits. A failure
        to start the sandbox raises SandboxError (safe to retry); anything
        after a command has started is that command's result."""
        yield EpisodeRunner(lambda argv, limits: self.run(argv, mounts, cwd=cwd, limits=limits))


@dataclass(frozen=True)
class EpisodeRunner:
    """Runs one command of an episode: `run(argv, limits)`."""

    run_command: Callable[[Sequence[str], SandboxLimits], CommandResult]

    def run(self, argv: Sequence[str], limits: SandboxLimits) -> CommandResult:
        return self.run_command(argv, limits)


# System calls a sandboxed command is refused (EPERM), by name: (x86_64,
# aarch64) numbers, None where the architecture has no such call. Chosen as
# Chromium's and Codex's Linux sandboxes do: calls that create namespaces or
# mounts, reach other processes or the kernel's keyrings, load code into the
# kernel, or open a large kernel attack surface (bpf, perf, io_uring,
# userfaultfd). Most need capabilities the sandbox lacks anyway; the filter
# holds when a kernel or a user namespace would grant them.
DENIED_SYSCALLS: dict[str, tuple[int | None, int | None]] = {
    "unshare": (272, 97), "setns": (308, 268),
    "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41), "chroot": (161, 51),
    "move_mount": (429, 429), "open_tree": (428, 428), "fsopen": (430, 430), "fsconfig": (431, 431),
    "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218),
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271),
    "bpf": (321, 280), "perf_event_open": (298, 241), "userfaultfd": (323, 282),
    "kexec_load": (246, 104), "kexec_file_load": (320, 294),
    "init_module": (175, 105), "finit_module": (313, 273), "delete_module": (176, 106),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142), "syslog": (103, 116),
    "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "lookup_dcookie": (212, 18), "nfsservctl": (180, 42), "fanotify_init": (300, 262),
    "settimeofday": (164, 170), "clock_settime": (227, 112), "clock_adjtime": (305, 266), "adjtimex": (159, 171),
    "uselib": (134, None), "ustat": (136, None), "sysfs": (139, None), "_sysctl": (156, None),
    "create_module": (174, None), "get_kernel_syms": (177, None), "query_module": (178, None),
    "iopl": (172, None), "ioperm": (173, None),
}
# clone with a namespace flag is refused (EPERM); clone3 cannot be filtered
# by its flags (they are behind a pointer), so it is ENOSYS and libc falls
# back to clone. personality with a flag that weakens the address space
# (no randomization, executable data, page zero mapped) is refused.
CLONE_SYSCALL = (56, 220)
CLONE3_SYSCALL = (435, 435)
PERSONALITY_SYSCALL = (135, 92)
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET; not
# CLONE_NEWTIME (0x80), which in clone()'s flags is the exit signal's byte.
CLONE_NAMESPACE_FLAGS = 0x7E020000
# UNAME26 | ADDR_NO_RANDOMIZE | FDPIC_FUNCPTRS | MMAP_PAGE_ZERO |
# ADDR_COMPAT_LAYOUT | READ_IMPLIES_EXEC | ADDR_LIMIT_32BIT | SHORT_INODE |
# WHOLE_SECONDS | STICKY_TIMEOUTS | ADDR_LIMIT_3GB
UNSAFE_PERSONALITY_FLAGS = 0x0FFE0000
_AUDIT_ARCH = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}
_EPERM, _ENOSYS = 1, 38


def _host_arch() -> tuple[int, int]:
    """(AUDIT_ARCH value, column of DENIED_SYSCALLS) of this machine."""
    arch = _AUDIT_ARCH.get(platform.machine())
    if arch is None:
        raise SandboxUnavailable(f"no system-call filter for this architecture ({platform.machine()})")
    return arch


@functools.cache  # a pure function of the architecture, asked for on every command
def seccomp_program() -> bytes:
    """The filter as bwrap's --seccomp takes it: classic BPF (struct
    sock_filter array) over struct seccomp_data. Another architecture's
    calls (i386 through int 0x80) kill the process; on x86_64, so do x32
    calls (nr with bit 30 set), which would dodge the numbers below."""
    audit_arch, column = _host_arch()
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, kill = 0x7FFF0000, 0x80000000
    nr_off, arch_off, arg0_off = 0, 4, 16  # arg0's low 32 bits (little-endian)
    # (code, jump-if-true label, jump-if-false label, k); labels are resolved below.
    prog: list[tuple[int, str | None, str | None, int]] = [
        (ld, None, None, arch_off), (jeq, "arch_ok", "kill", audit_arch), ("label", "arch_ok", None, 0),
        (ld, None, None, nr_off),
    ]
    if column == 0:
        prog.append((jge, "eperm", None, 0x40000000))
    for numbers in DENIED_SYSCALLS.values():
        if numbers[column] is not None:
            prog.append((jeq, "eperm", None, numbers[column]))
    prog += [
        (jeq, "enosys", None, CLONE3_SYSCALL[column]),
        (jeq, "clone", None, CLONE_SYSCALL[column]),
        (jeq, "personality", None, PERSONALITY_SYSCALL[column]),
        (ret, None, None, allow),
        ("label", "clone", None, 0), (ld, None, None, arg0_off), (jset, "eperm", None, CLONE_NAMESPACE_FLAGS),
        (ret, None, None, allow),
        ("label", "personality", None, 0), (ld, None, None, arg0_off), (jset, "eperm", None, UNSAFE_PERSONALITY_FLAGS),
        (ret, None, None, allow),
        ("label", "eperm", None, 0), (ret, None, None, 0x00050000 | _EPERM),
        ("label", "enosys", None, 0), (ret, None, None, 0x00050000 | _ENOSYS),
        ("label", "kill", None, 0), (ret, None, None, kill),
    ]
    labels, code = {}, []
    for op in prog:
        if op[0] == "label":
            labels[op[1]] = len(code)
        else:
            code.append(op)

    def offset(index: int, label: str | None) -> int:
        if label is None:
            return 0
        jump = labels[label] - index - 1
        assert 0 <= jump < 256, "a BPF jump offset is one byte"
        return jump

    return b"".join(struct.pack("=HBBI", c, offset(i, t), offset(i, f), k) for i, (c, t, f, k) in enumerate(code))


def docker_seccomp_profile(allowed: frozenset[str] = frozenset()) -> dict:
    """The same filter as a Docker seccomp profile (libseccomp rules),
    less the denied calls named in `allowed`."""
    _audit_arch, column = _host_arch()
    unknown = allowed - DENIED_SYSCALLS.keys()
    if unknown:
        raise ValueError(f"not denied, so not to be allowed: {sorted(unknown)}")
    denied = [name for name, numbers in DENIED_SYSCALLS.items() if numbers[column] is not None and name not in allowed]
    bits = lambda mask: [1 << b for b in range(32) if mask >> b & 1]  # noqa: E731
    return {
        "defaultAction": "SCMP_ACT_ALLOW",
        # Only this architecture: libseccomp kills calls of any other.
        "architectures": ["SCMP_ARCH_X86_64" if column == 0 else "SCMP_ARCH_AARCH64"],
        "syscalls": [
            {"names": denied, "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM},
            {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": _ENOSYS},
            # One rule per flag: rules for one call are alternatives, and (arg & bit) == bit is one comparison.
            *({"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
               "args": [{"index": 0, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}]}
              for bit in bits(CLONE_NAMESPACE_FLAGS)),
            *({"names": ["personality"], "action": "SCMP_ACT_ERRNO", "errnoRet": _EPERM,
               "args": [{"index": 0, "value": bit, "valueTwo": bit, "op": "SCMP_CMP_MASKED_EQ"}]}
              for bit in bits(UNSAFE_PERSONALITY_FLAGS)),
        ],
    }


def _docker_seccomp_file(allowed: frozenset[str] = frozenset()) -> str:
    """The profile written once per content (the Docker client reads a path)."""
    text = json.dumps(docker_seccomp_profile(allowed), indent=1)
    path = Path(tempfile.gettempdir()) / f"clawloop-seccomp-{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
    if not path.exists() or path.read_text() != text:
        partial = path.with_suffix(f".{uuid.uuid4().hex}.tmp")
        partial.write_text(text)
        os.replace(partial, path)
    return str(path)


_CGROUP_V1 = Path("/sys/fs/cgroup")
_CGROUP_PARENT = "clawloop-sandbox"


class _Cgroup:
    """A memory and a pids cgroup (v1) of one command, so that its limits
    hold for every process of the sandbox together. `create` returns None
    where none can be made (not root, no such controllers)."""

    def __init__(self, dirs: list[Path]) -> None:
        self.dirs = dirs

    @classmethod
    def create(cls, limits: SandboxLimits) -> _Cgroup | None:
        if os.geteuid() != 0:
            return None
        controllers = [_CGROUP_V1 / "memory", _CGROUP_V1 / "pids"]
        if not all((c / "cgroup.procs").is_file() and not (c / "cgroup.controllers").exists() for c in controllers):
            return None
        name = uuid.uuid4().hex[:16]
        group = cls([])
        try:
            for controller in controllers:
                directory = controller / _CGROUP_PARENT / name
                directory.mkdir(parents=True)
                group.dirs.append(directory)
            memory, pids = group.dirs
            (memory / "memory.limit_in_bytes").write_text(str(limits.memory_bytes))
            if (memory / "memory.memsw.limit_in_bytes").exists():  # swap counts too, where swap is accounted
                (memory / "memory.memsw.limit_in_bytes").write_text(str(limits.memory_bytes))
            (pids / "pids.max").write_text(str(limits.max_processes))
        except OSError:
            group.remove()
            return None
        return group

    def prefix(self) -> list[str]:
        """A shell that joins the cgroups, then execs the rest of the command
        line: the join happens before anything of the sandbox runs, and Popen
        keeps its vfork (a preexec_fn would make it fork the whole round)."""
        join = ('for procs in "$1" "$2"; do echo $$ > "$procs" || { echo "clawloop-cgroup: cannot join $procs" >&2; '
                'exit 125; }; done; shift 2; exec "$@"')
        return ["/bin/sh", "-c", join, "sh", *(str(d / "cgroup.procs") for d in self.dirs)]

    def remove(self) -> None:
        """Kill whatever is left in the cgroups, then remove them."""
        for directory in reversed(self.dirs):
            pause = 0.0005
            while pause < 1:  # the exiting processes leave within milliseconds
                try:
                    for pid in (directory / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    directory.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY while the killed processes exit
                    time.sleep(pause)
                    pause *= 2


class BubblewrapSandbox(Sandbox):
    """bubblewrap: pid, net, ipc, uts and mount namespaces, read-only system,
    only the given mounts writable, rlimits, and an unprivileged uid.

    Run unprivileged, bwrap also creates a user namespace. Run as root, the
    user namespace would map the sandbox onto host root (where RLIMIT_NPROC is
    not enforced), so bwrap sets up the mounts as root and `setpriv` drops the
    command to `sandbox_uid` with every capability cleared before it starts.
    """

    sandbox_uid: int = SANDBOX_UID
    sandbox_gid: int = SANDBOX_UID

    def _ids(self, uid: int | None) -> tuple[int, int]:
        return (self.sandbox_uid, self.sandbox_gid) if uid is None else (uid, uid)

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
        limits: SandboxLimits = SandboxLimits(), uid: int | None = None, seccomp_fd: int | None = None,
    ) -> list[str]:
        run_uid, run_gid = self._ids(uid)
        args = [
            self._bwrap(),
            *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
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
                "setpriv", f"--reuid={run_uid}", f"--regid={run_gid}", "--clear-groups",
                "--inh-caps=-all", "--bounding-set=-all", "--",
            ]
        else:
            inner = ("1000", "1000") if uid is None else (str(run_uid), str(run_gid))
            args += ["--unshare-user", "--uid", inner[0], "--gid", inner[1]]
        return args + list(argv)

    def run(
        self,
        argv: Sequence[str],
        mounts: Sequence[Mount],
        *,
        cwd: str = "/workspace",
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
        uid: int | None = None,
    ) -> CommandResult:
        limits = limits or SandboxLimits()
        # The filter goes to bwrap as a file descriptor it inherits; it loads
        # it into the sandboxed process right before that process's exec.
        seccomp_fd = os.memfd_create("clawloop-seccomp", os.MFD_CLOEXEC)
        try:
            os.write(seccomp_fd, seccomp_program())
            os.lseek(seccomp_fd, 0, os.SEEK_SET)
            args = self.command_line(argv, mounts, cwd, env or {}, limits, uid, seccomp_fd)
            if self._as_root():
                own_writable_mounts(mounts, *self._ids(uid))
            return self._run(args, limits, seccomp_fd)
        finally:
            os.close(seccomp_fd)

    def _run(self, args: list[str], limits: SandboxLimits, seccomp_fd: int) -> CommandResult:
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
        cgroup = _Cgroup.create(limits)
        if cgroup is not None:
            args = cgroup.prefix() + args
        try:
            try:
                proc = subprocess.Popen(
                    args,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # one process group to kill on timeout
                    close_fds=True,
                    pass_fds=(seccomp_fd,),
                )
            except OSError as exc:
                raise SandboxError(f"could not start bubblewrap: {exc}") from exc
            # bwrap runs with --die-with-parent and is pid 1 of its namespace:
            # killing its group kills everything the command started.
            result = _collect(proc, limits, kill=lambda: kill_process_group(proc))
        finally:
            if cgroup is not None:
                cgroup.remove()
        if not result.timed_out and result.exit_code != 0 and result.output.startswith(
            ("bwrap:", "prlimit:", "clawloop-cgroup:")
        ):
            # bwrap's, prlimit's or the cgroup's own failure (bad mount, no namespaces): not the command's.
            raise SandboxError(f"bubblewrap failed to start the sandbox: {result.output.strip()}")
        return result


@contextmanager
def disk_quota(
    directory: Path, max_bytes: int, *, max_files: int = 10_000, max_depth: int = 64,
    on_copy: Callable[[CopyReport], None] | None = None,
) -> Iterator[bool]:
    """Bound what commands can write into `directory` (a writable mount) for
    the duration: a tmpfs of `max_bytes` and `max_files` inodes of its own is
    mounted on it, so a full disk is the command's ENOSPC, not the host's. At
    the end its contents are copied back onto the disk by `copy_tree_safely`
    (plain modes, never root-owned, at most `max_bytes` of apparent size, so a
    sparse file cannot grow on the way out), it is unmounted, and `on_copy`
    gets the copy's report.

    `directory` must be empty on entry. The kernel here has no disk quotas
    (no CONFIG_QUOTA), so a filesystem per workspace is the enforceable
    bound; tmpfs keeps it in memory, so callers size `max_bytes` to keep the
    sum over all live workspaces small. Mounting needs root: without it this
    yields False and callers check `tree_usage` after each command.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        yield False
        return
    if any(directory.iterdir()):
        raise SandboxError(f"{directory} must be empty to take a disk quota")
    # nr_inodes: without it, empty files cost no space and 200,000 of them
    # cost the harness half a minute of copying and chowning.
    options = f"size={max_bytes},nr_inodes={max_files},mode=0755"
    _release_orphaned_quotas_once()
    try:
        _mount_tmpfs(directory, options)
    except OSError as exc:
        raise SandboxError(f"could not mount a {max_bytes}-byte tmpfs on {directory}: {exc.strerror}") from exc
    try:
        yield True
    finally:
        keep = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
        try:
            report = copy_tree_safely(directory, keep / "contents", max_files=max_files, max_depth=max_depth,
                                      max_bytes=max_bytes)
        finally:
            release_quota(directory)
        # The copy takes the mount point's place: one rename, not one per entry.
        directory.rmdir()
        os.replace(keep / "contents", directory)
        keep.rmdir()
        if on_copy is not None:
            on_copy(report)


@dataclass(frozen=True)
class CopyReport:
    """What `copy_tree_safely` copied. `files` counts every entry created
    (regular files, directories, links); `skipped` lists the relative paths of
    what was not copied (FIFOs, sockets, devices, and entries that could not
    be read); `over_limit` is None, or why the copy stopped early (too many
    files, too deep, too many bytes): the failure of whoever wrote the tree."""

    files: int
    bytes: int
    skipped: tuple[str, ...]
    over_limit: str | None


_COPY_CHUNK = 1 << 20
_ZEROS = bytes(_COPY_CHUNK)
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def write_bytecode_cache(source: Path, directory: Path) -> Path:
    """Give the copy of the trusted module `source` in `directory` its compiled
    bytecode (`__pycache__/<name>.<tag>.pyc`), so that sandboxed interpreters,
    which import it from a read-only mount and so could never cache it
    themselves, do not compile it on every run. The bytecode is hash-checked:
    an interpreter uses it only for a source of exactly these bytes and
    compiles anything else as usual, and one of another version ignores it."""
    data = source.read_bytes()
    cache = Path(importlib.util.cache_from_source(str(Path(directory) / source.name)))
    cache.parent.mkdir(mode=0o755, exist_ok=True)
    cache.write_bytes(_hash_checked_bytecode(source, hashlib.sha256(data).hexdigest()))
    os.chmod(cache, 0o644)
    return cache


@functools.cache
def _hash_checked_bytecode(source: Path, digest: str) -> bytes:
    """Compiled once a process for each source content (`digest` keys the cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        compiled = Path(tmp) / "module.pyc"
        py_compile.compile(str(source), cfile=str(compiled), doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
        return compiled.read_bytes()


def copy_tree_safely(
    src: Path, dst: Path, *, owner: tuple[int, int] | None = None,
    max_files: int = 10_000, max_depth: int = 64, max_bytes: int = 64 << 20,
) -> CopyReport:
    """Copy a tree untrusted code wrote so that nothing dangerous comes out:
    regular files get mode 0o644 (0o755 if any x bit was set) and directories
    0o755, never setuid, setgid, sticky or world-writable; links are kept as
    links and never followed; hard links become separate files; FIFOs,
    sockets and devices are skipped and listed. Run as root, everything
    created is owned by `owner` (default: the sandbox uid), never by root.

    Iterative, with every directory opened relative to its parent without
    following links, so neither a deep tree nor a link swapped in breaks it.
    Apparent sizes (st_size, what a sparse file becomes when read) count
    against `max_bytes`; holes are written back as holes. Past a limit the
    copy stops and says why in `over_limit`; it never raises for what the
    tree holds, only for the host's own failures (a full disk)."""
    as_root = os.geteuid() == 0
    uid, gid = owner if owner is not None else (SANDBOX_UID, SANDBOX_UID)
    Path(dst).mkdir(parents=True, exist_ok=True)
    dst_root = os.open(dst, _OPEN_DIR)
    try:
        os.fchmod(dst_root, 0o755)
        if as_root:
            os.fchown(dst_root, uid, gid)
        try:
            src_root = os.open(src, _OPEN_DIR)
        except OSError:
            return CopyReport(0, 0, (".",), None)
        return _copy_walk(src_root, dst_root, (uid, gid) if as_root else None, max_files, max_depth, max_bytes)
    finally:
        os.close(dst_root)


def tree_usage(root: Path, *, max_files: int = 10_000, max_depth: int = 64, max_bytes: int = 64 << 20) -> CopyReport:
    """What `copy_tree_safely` would copy out of `root` and whether it would
    stop at a limit, without writing anything."""
    try:
        fd = os.open(root, _OPEN_DIR)
    except OSError:
        return CopyReport(0, 0, (".",), None)
    return _copy_walk(fd, None, None, max_files, max_depth, max_bytes)


def _copy_walk(src_root: int, dst_root: int | None, owner: tuple[int, int] | None,
               max_files: int, max_depth: int, max_bytes: int) -> CopyReport:
    """The walk of `copy_tree_safely` and `tree_usage`; closes `src_root`.
    With `dst_root` None nothing is written."""
    seen = files = total = 0
    skipped: list[str] = []
    over: str | None = None
    # A stack of open directories: (source fd, destination fd, entries, relative path).
    # Only the current chain is open, so open descriptors stay under 3 x max_depth.
    stack: list[tuple[int, int | None, Iterator[os.DirEntry], str]] = []

    def push(src_fd: int, dst_fd: int | None, rel: str) -> None:
        stack.append((src_fd, dst_fd, os.scandir(src_fd), rel))

    def pop() -> None:
        src_fd, dst_fd, entries, _rel = stack.pop()
        entries.close()
        os.close(src_fd)
        if dst_fd is not None and dst_fd != dst_root:
            os.close(dst_fd)

    try:
        push(src_root, dst_root, "")
        while stack and over is None:
            src_fd, dst_fd, entries, rel = stack[-1]
            entry = next(entries, None)
            if entry is None:
                pop()
                continue
            path = f"{rel}{entry.name}"
            try:
                info = os.stat(entry.name, dir_fd=src_fd, follow_symlinks=False)
            except OSError:
                skipped.append(path)
                continue
            seen += 1
            if seen > max_files:
                over = f"more than {max_files} files and directories"
                break
            mode = info.st_mode
            if stat.S_ISDIR(mode):
                if len(stack) >= max_depth:
                    over = f"directories nested deeper than {max_depth}"
                    break
                try:
                    child = os.open(entry.name, _OPEN_DIR, dir_fd=src_fd)
                except OSError:
                    skipped.append(path)
                    continue
                child_dst = None
                if dst_fd is not None:
                    os.mkdir(entry.name, 0o700, dir_fd=dst_fd)
                    child_dst = os.open(entry.name, _OPEN_DIR, dir_fd=dst_fd)
                    _plain(child_dst, 0o755, owner)
                push(child, child_dst, path + "/")
                files += 1
            elif stat.S_ISLNK(mode):
                if dst_fd is not None:
                    os.symlink(os.readlink(entry.name, dir_fd=src_fd), entry.name, dir_fd=dst_fd)
                    if owner is not None:
                        os.chown(entry.name, *owner, dir_fd=dst_fd, follow_symlinks=False)
                files += 1
            elif stat.S_ISREG(mode):
                if total + info.st_size > max_bytes:
                    over = f"more than {max_bytes} bytes of files (apparent size)"
                    break
                total += info.st_size
                if dst_fd is not None and not _copy_file(src_fd, dst_fd, entry.name, info, owner):
                    skipped.append(path)
                else:
                    files += 1
            else:  # FIFO, socket, device: nothing to copy, and reading a FIFO would block
                skipped.append(path)
    finally:
        while stack:
            pop()
    return CopyReport(files=files, bytes=total, skipped=tuple(skipped), over_limit=over)


def _plain(fd: int, mode: int, owner: tuple[int, int] | None) -> None:
    # chown first: it would clear setuid/setgid bits anyway, and the mode is set last.
    if owner is not None:
        os.fchown(fd, *owner)
    os.fchmod(fd, mode)


def _copy_file(src_dir: int, dst_dir: int, name: str, info: os.stat_result, owner: tuple[int, int] | None) -> bool:
    """Copy one regular file, holes as holes, at most its size when listed;
    False when it could not be opened as a regular file (swapped meanwhile)."""
    try:
        # O_NONBLOCK: a FIFO swapped in after the stat does not block the open.
        src = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):
            return False
        dst = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
        try:
            remaining = info.st_size
            while remaining > 0:
                chunk = os.read(src, min(_COPY_CHUNK, remaining))
                if not chunk:
                    break
                remaining -= len(chunk)
                if chunk == _ZEROS[: len(chunk)]:
                    os.lseek(dst, len(chunk), os.SEEK_CUR)
                else:
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(dst, view):]
            if info.st_size:
                os.ftruncate(dst, info.st_size - remaining)
            _plain(dst, 0o755 if info.st_mode & 0o111 else 0o644, owner)
            os.utime(dst, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return True


def release_quota(directory: Path) -> None:
    """Unmount a quota tmpfs left on `directory` (also one a crashed run left)."""
    if os.path.ismount(directory):
        try:
            _unmount_lazily(directory)
        except OSError as exc:
            raise SandboxError(f"could not unmount the quota tmpfs on {directory}: {exc.strerror}") from exc


# Quota filesystems are mounted by the system calls themselves, not by
# util-linux mount(8) and umount(8): each of those is a process that parses the
# mount table, which cost more than the rest of a one-command episode's quota.
_MNT_DETACH = 2


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


# A quota tmpfs names its owner in its mount source, the first field of
# /proc/self/mountinfo's filesystem part: "clawloop-quota:<pid namespace
# inode>:<pid>:<process start time>". A process killed outright (SIGKILL, the
# OOM killer, a stopped container) never reaches its `finally`, and its quotas
# stay mounted on directories nobody reuses (temporary ones), holding their
# contents in memory until reboot. The start time tells a dead owner from a
# new process that reused its pid.
_QUOTA_SOURCE = "clawloop-quota"


def _process_start_time(pid: int | str) -> str | None:
    """Field 22 of /proc/<pid>/stat (clock ticks since boot), None when the process is gone."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may hold spaces or ")".
    return stat_line[stat_line.rindex(")") + 2 :].split()[19]


def _pid_namespace() -> str:
    return str(os.stat("/proc/self/ns/pid").st_ino)


@functools.cache
def _quota_source(pid: int) -> str:
    # Keyed by pid, so that a forked child names itself; computed once, not per mount.
    return f"{_QUOTA_SOURCE}:{_pid_namespace()}:{pid}:{_process_start_time(pid)}"


def _unescape_mount_path(field: str) -> str:
    """A mountinfo path field: space, tab, newline and backslash are octal escapes."""
    for escaped, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escaped, char)
    return field


def orphaned_quotas() -> list[Path]:
    """Mount points of quota filesystems whose owning process (in this pid
    namespace) is gone. Quotas of live processes and of other pid namespaces,
    and every mount that is not a quota, are not listed."""
    pid_namespace = _pid_namespace()
    orphans = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        mount_fields, _, fs_fields = line.partition(" - ")
        fs = fs_fields.split()
        if len(fs) < 2 or fs[0] != "tmpfs" or not fs[1].startswith(f"{_QUOTA_SOURCE}:"):
            continue
        owner = fs[1].split(":")
        if len(owner) != 4 or owner[1] != pid_namespace:
            continue
        if _process_start_time(owner[2]) != owner[3]:
            orphans.append(Path(_unescape_mount_path(mount_fields.split()[4])))
    return orphans


def release_orphaned_quotas() -> list[Path]:
    """Unmount the quotas that processes killed outright left behind (their
    contents were never copied out; what is under the mount point is the
    empty directory it was mounted on). Returns their mount points."""
    released = []
    for directory in orphaned_quotas():
        try:
            _unmount_lazily(directory)
        except OSError:
            continue  # gone meanwhile, or another process's sweep got there first
        released.append(directory)
    return released


@functools.cache
def _release_orphaned_quotas_once() -> None:
    # Once per process, before its first quota: orphans appear only when a
    # process dies, and a sweep reads the whole mount table.
    release_orphaned_quotas()


def _mount_tmpfs(directory: Path, options: str) -> None:
    source = _quota_source(os.getpid()).encode()
    if _libc().mount(source, os.fsencode(directory), b"tmpfs", 0, options.encode()) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(directory))


def _unmount_lazily(directory: Path) -> None:
    if _libc().umount2(os.fsencode(directory), _MNT_DETACH) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(directory))


def directory_bytes(directory: Path) -> int:
    """Apparent size (st_size) of the regular files under `directory` (to a
    depth of 256), what a copy-out writes; links are not followed. A sparse
    file counts in full."""
    return tree_usage(directory, max_files=1 << 62, max_depth=256, max_bytes=1 << 62).bytes


def existing_mounts(mounts: Sequence[Mount]) -> Sequence[Mount]:
    """`mounts`, or SandboxError naming the first whose host side is missing."""
    for mount in mounts:
        if not Path(mount.host).exists():
            raise SandboxError(f"mount source {mount.host} does not exist")
    return mounts


def iter_tree(root: Path | str) -> Iterator[os.DirEntry]:
    """Every entry below `root`, links never followed, directories that
    cannot be listed skipped. Iterative: untrusted code may nest directories
    thousands deep."""
    pending = [str(root)]
    while pending:
        try:
            entries = list(os.scandir(pending.pop()))
        except OSError:
            continue
        for entry in entries:
            yield entry
            if entry.is_dir(follow_symlinks=False):
                pending.append(entry.path)


def own_writable_mounts(mounts: Sequence[Mount], uid: int, gid: int) -> None:
    """Hand the writable mounts to the unprivileged uid a command runs as.
    lchown: never follow a link an earlier command may have planted. What
    lies past the longest path the kernel takes was made by the sandbox (so
    is already its uid's) and is left as it is."""
    for mount in mounts:
        if not mount.writable:
            continue
        os.lchown(mount.host, uid, gid)
        for entry in iter_tree(mount.host):
            try:
                os.lchown(entry.path, uid, gid)
            except OSError as exc:
                if exc.errno != errno.ENAMETOOLONG:
                    raise


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
    is streamed from the attached client and never stored by the engine.
    `episode` keeps one such container for all of an episode's commands."""

    image: str = "clawloop/harness:latest"
    sandbox_uid: int = SANDBOX_UID
    sandbox_gid: int = SANDBOX_UID
    docker: str = "docker"
    # How long an episode's container may take to start, and how long past a
    # command's wall timeout its runner may take to answer before the episode
    # is ended (the command's result, never a SandboxError).
    episode_start_seconds: float = 60.0
    episode_grace_seconds: float = 5.0
    # docker --cpu-shares of every container (None: Docker's default weight),
    # for a machine shared with other work (CLAWLOOP_DOCKER_CPU_SHARES).
    cpu_shares: int | None = None

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

    def _ids(self, uid: int | None) -> tuple[int, int]:
        """The uid and gid a container runs as: the caller's own when not root."""
        if os.geteuid() != 0:
            return os.getuid(), os.getgid()
        return (self.sandbox_uid, self.sandbox_gid) if uid is None else (uid, uid)

    def _container_args(
        self, mounts: Sequence[Mount], cwd: str, env: Mapping[str, str], limits: SandboxLimits, name: str,
        uid: int | None, extra: Sequence[str],
    ) -> list[str]:
        """`docker run` up to the image: the hardening every container of this
        backend gets (a command's or an episode's), then `extra`."""
        uid, gid = self._ids(uid)
        args = [
            self._docker(), "run", "--rm", "--name", name,
            "--network", "none", "--hostname", "sandbox", "--ipc", "private",
            "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
            "--security-opt", f"seccomp={_docker_seccomp_file()}",
            "--user", f"{uid}:{gid}", *extra,
            *(["--cpu-shares", str(self.cpu_shares)] if self.cpu_shares else []),
            "--memory", str(limits.memory_bytes), "--memory-swap", str(limits.memory_bytes),
            "--pids-limit", str(limits.max_processes),
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
        return args + ["--workdir", cwd, self.image]

    def command_line(
        self, argv: Sequence[str], mounts: Sequence[Mount], cwd: str, env: Mapping[str, str], limits: SandboxLimits,
        name: str, uid: int | None = None,
    ) -> list[str]:
        rlimits = [
            "--init",
            "--ulimit", f"cpu={limits.cpu_seconds}:{limits.cpu_seconds}",
            "--ulimit", f"fsize={limits.file_size_bytes}:{limits.file_size_bytes}",
        ]
        # stderr onto stdout inside the container: the engine carries the two
        # as separate streams with no order between them, so a command's
        # stderr could overtake the marker and its own earlier stdout.
        announce = 'exec 2>&1; printf "%s" "$0"; exec "$@"'
        return self._container_args(mounts, cwd, env, limits, name, uid, rlimits) + [
            "/bin/sh", "-c", announce, CONTAINER_STARTED, *argv]

    def episode_command_line(self, mounts: Sequence[Mount], cwd: str, limits: SandboxLimits, name: str) -> list[str]:
        """The episode's container: attached stdin (`-i`), the runner as pid 1
        (no --init: docker-init is a dumpable process of the sandbox uid
        holding the container's stdout, which a command could reopen through
        /proc/1/fd/1 to forge frames), no container-wide cpu or fsize rlimit
        (the runner sets each command's own)."""
        return self._container_args(mounts, cwd, {}, limits, name, None, ["--interactive"]) + [
            "python3", "-I", "-S", "-c", _runner_source()]

    def run(
        self,
        argv: Sequence[str],
        mounts: Sequence[Mount],
        *,
        cwd: str = "/workspace",
        limits: SandboxLimits | None = None,
        env: Mapping[str, str] | None = None,
        uid: int | None = None,
    ) -> CommandResult:
        limits = limits or SandboxLimits()
        name = f"clawloop-sandbox-{uuid.uuid4().hex[:16]}"
        args = self.command_line(argv, mounts, cwd, env or {}, limits, name, uid)
        if os.geteuid() == 0:
            own_writable_mounts(mounts, *((self.sandbox_uid, self.sandbox_gid) if uid is None else (uid, uid)))
        try:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        except OSError as exc:
            raise SandboxError(f"could not start the Docker client: {exc}") from exc

        def kill() -> None:
            # The client first: while it is attached and not read, the engine
            # blocks on the container's output and cannot remove it. Killing
            # the client leaves the container running: remove it by name.
            kill_process_group(proc)
            subprocess.run([self._docker(), "rm", "--force", name], capture_output=True, timeout=60)

        result = _collect(proc, limits, kill=kill)
        started = result.output.startswith(CONTAINER_STARTED)
        if result.exit_code == 125 and not started:
            # Docker's own failure (daemon unreachable, bad mount, missing image), not the command's.
            raise SandboxError(f"docker failed to start the sandbox: {result.output.strip()[-2000:]}")
        if started:
            result = replace(result, output=result.output[len(CONTAINER_STARTED):])
        return result

    @contextmanager
    def episode(
        self, mounts: Sequence[Mount], *, cwd: str = "/workspace", limits: SandboxLimits | None = None,
    ) -> Iterator[EpisodeRunner]:
        """One container for the whole episode, hardened as `run`'s, its
        commands run by a trusted runner (`resources/sandbox_runner.py`) as
        pid 1 inside: each command gets its own rlimits (cpu, fsize, core),
        wall timeout and capped output, and nothing it started outlives it.
        `limits` sizes the container (memory, pids, /tmp; default
        SandboxLimits()); a command asking other memory or pids limits gets
        them by `docker update` before it runs. /tmp and the workspace
        persist between commands, processes do not.

        A failure to start the container raises SandboxError; anything after
        is the command's result (the episode then ends, and every later
        command reports so at once). Leaving the block removes the container
        and waits until it is gone."""
        episode = _DockerEpisode(self, mounts, cwd, limits or SandboxLimits())
        episode.start()
        try:
            yield EpisodeRunner(episode.run)
        finally:
            episode.close()


def _runner_source() -> str:
    return (Path(__file__).parent / "sandbox_runner.py").read_text()


class _DockerEpisode:
    """The host's end of one episode container: the attached `docker run -i`
    client, requests to the runner on its stdin, frames from its stdout."""

    def __init__(self, sandbox: DockerSandbox, mounts: Sequence[Mount], cwd: str, limits: SandboxLimits) -> None:
        self.sandbox = sandbox
        self.mounts = list(mounts)
        self.cwd = cwd
        self.name = f"clawloop-episode-{uuid.uuid4().hex[:16]}"
        self.container_limits = (limits.memory_bytes, limits.max_processes)
        self.args = sandbox.episode_command_line(self.mounts, cwd, limits, self.name)
        self.proc: subprocess.Popen | None = None
        self.buffer = bytearray()
        self.ended: str | None = None  # why the episode can run no more commands
        self.lock = threading.Lock()
        self.stderr = None

    def start(self) -> None:
        if os.geteuid() == 0:
            own_writable_mounts(self.mounts, self.sandbox.sandbox_uid, self.sandbox.sandbox_gid)
        self.stderr = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(self.args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr,
                                         start_new_session=True, close_fds=True)
        except OSError as exc:
            self.close()
            raise SandboxError(f"could not start the Docker client: {exc}") from exc
        try:
            ready = self._read_frame(time.monotonic() + self.sandbox.episode_start_seconds, max_output=0)
            if isinstance(ready, str) or ready[0].get("ready") is not True:
                self.proc.poll()
                self.stderr.seek(0)
                said = self.stderr.read().decode("utf-8", "replace").strip()[-2000:]
                raise SandboxError(f"docker failed to start the episode's sandbox "
                                   f"({ready if isinstance(ready, str) else 'not the ready frame'}): {said}")
        except BaseException:
            self.close()
            raise

    def run(self, argv: Sequence[str], limits: SandboxLimits) -> CommandResult:
        with self.lock:
            started = time.monotonic()
            if self.ended is None:
                self._apply_container_limits(limits)
            if self.ended is not None:
                return self._ended_result(started, timed_out=False)
            request = json.dumps({"argv": list(argv), "cwd": self.cwd, "limits": {
                "wall_seconds": limits.wall_seconds, "cpu_seconds": limits.cpu_seconds,
                "file_size_bytes": limits.file_size_bytes, "output_bytes": limits.output_bytes,
            }}).encode()
            try:
                self.proc.stdin.write(struct.pack(">I", len(request)) + request)
                self.proc.stdin.flush()
            except (OSError, ValueError) as exc:  # ValueError: closed meanwhile by close()
                self._end(f"the sandbox stopped taking commands ({getattr(exc, 'strerror', None) or exc})")
                return self._ended_result(started, timed_out=False)
            frame = self._read_frame(started + limits.wall_seconds + self.sandbox.episode_grace_seconds,
                                     max_output=limits.output_bytes + 2)
            if isinstance(frame, str):
                self._end(frame)
                return self._ended_result(started, timed_out=frame.startswith("no answer"))
            header, head, tail = frame
            exit_code, timed_out, total = header.get("exit"), header.get("timed_out"), header.get("total")
            if not (isinstance(timed_out, bool) and (exit_code is None or type(exit_code) is int)
                    and type(total) is int and total >= len(head) + len(tail)
                    and len(head) + len(tail) <= limits.output_bytes + 2):
                self._end("the sandbox sent a malformed result")
                return self._ended_result(started, timed_out=False)
            capture = CappedOutput(limits.output_bytes)
            capture.head, capture.tail, capture.total = bytearray(head), bytearray(tail), total
            return CommandResult(exit_code=None if timed_out else exit_code, output=capture.text(),
                                 truncated=capture.truncated, timed_out=timed_out,
                                 seconds=time.monotonic() - started)

    def _apply_container_limits(self, limits: SandboxLimits) -> None:
        wanted = (limits.memory_bytes, limits.max_processes)
        if wanted == self.container_limits:
            return
        memory, pids = wanted
        done = self._docker_cli("update", "--memory", str(memory), "--memory-swap", str(memory),
                                "--pids-limit", str(pids), self.name)
        if done.returncode != 0:
            # Not run without its limits: the command's failure, and the episode's end.
            self._end(f"the sandbox could not take this command's memory and process limits: {done.stderr.strip()}")
        else:
            self.container_limits = wanted

    def _docker_cli(self, *args: str) -> subprocess.CompletedProcess:
        """A Docker CLI call; one that hangs past a minute counts as failed."""
        try:
            return subprocess.run([self.sandbox._docker(), *args], capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(args, 1, "", f"docker {args[0]} did not answer within 60 s")

    def _ended_result(self, started: float, timed_out: bool) -> CommandResult:
        return CommandResult(exit_code=None, output=f"[the sandbox ended: {self.ended}; this episode runs no more commands]",
                             truncated=False, timed_out=timed_out, seconds=time.monotonic() - started)

    def _end(self, why: str) -> None:
        """No more commands: the container goes now, so nothing in it runs on
        (and if it cannot, `close` retries and says so)."""
        if self.ended is None:
            self.ended = why
        try:
            self._remove()
        except SandboxError:
            pass

    def _read_frame(self, deadline: float, max_output: int) -> tuple[dict, bytes, bytes] | str:
        """(header, head, tail), or why none came: the stream ended, it
        held no frame (or one with more than `max_output` bytes of output),
        or nothing came by `deadline`."""
        size = self._read_exact(4, deadline)
        if isinstance(size, str):
            return size
        (length,) = struct.unpack(">I", size)
        if length > 1 << 16:
            return "the sandbox sent a malformed frame"
        body = self._read_exact(length, deadline)
        if isinstance(body, str):
            return body
        try:
            header = json.loads(body)
            head_bytes, tail_bytes = header["head"], header["tail"]
        except (ValueError, TypeError, KeyError):
            return "the sandbox sent a malformed frame"
        if not (isinstance(header, dict) and type(head_bytes) is int and type(tail_bytes) is int
                and 0 <= head_bytes and 0 <= tail_bytes and head_bytes + tail_bytes <= max_output):
            return "the sandbox sent a malformed frame"
        output = self._read_exact(head_bytes + tail_bytes, deadline)
        if isinstance(output, str):
            return output
        return header, output[:head_bytes], output[head_bytes:]

    def _read_exact(self, n: int, deadline: float) -> bytes | str:
        fd = self.proc.stdout.fileno()
        while len(self.buffer) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "no answer from the sandbox within the command's wall timeout and grace"
            if not select.select([fd], [], [], remaining)[0]:
                continue
            chunk = os.read(fd, max(65536, n - len(self.buffer)))
            if not chunk:
                return "the sandbox's container stopped"
            self.buffer += chunk
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def _remove(self) -> None:
        """Remove the container and wait until it is gone; then the client."""
        removed = self._docker_cli("rm", "--force", self.name)
        if removed.returncode != 0 and "No such container" not in removed.stderr:
            # Being removed already (--rm after the runner ended): wait for it to go.
            give_up = time.monotonic() + 60
            while time.monotonic() < give_up:
                inspect = self._docker_cli("container", "inspect", "--format", "{{.Id}}", self.name)
                if inspect.returncode != 0 and "No such" in inspect.stderr:
                    break
                self._docker_cli("rm", "--force", self.name)
                time.sleep(0.1)
            else:
                raise SandboxError(f"the episode's container {self.name} could not be removed: {removed.stderr.strip()}")
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # the container is gone; the client may stop
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                kill_process_group(self.proc)
                self.proc.wait()

    def close(self) -> None:
        # The container goes first, without waiting for a command running in
        # another thread: that command then ends as the sandbox ending.
        if self.ended is None:
            self.ended = "the episode was closed"
        try:
            self._remove()
        finally:
            with self.lock:
                if self.proc is not None:
                    for stream in (self.proc.stdin, self.proc.stdout):
                        try:
                            stream.close()
                        except OSError:
                            pass
                if self.stderr is not None:
                    self.stderr.close()


def read_output(proc: subprocess.Popen, output_bytes: int, wall_seconds: float) -> tuple[CappedOutput, bool]:
    """Read a process's merged stdout/stderr, keeping its head and tail within
    `output_bytes`, until the pipe closes or `wall_seconds` pass: the capture
    and whether the time ran out. Stopping the process is the caller's."""
    capture = CappedOutput(output_bytes)
    deadline = time.monotonic() + wall_seconds
    fd = proc.stdout.fileno()
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return capture, True
        ready, _, _ = select.select([fd], [], [], min(remaining, 0.5))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return capture, False
            capture.add(chunk)


def _collect(proc: subprocess.Popen, limits: SandboxLimits, kill: Callable[[], None]) -> CommandResult:
    """Read a sandbox process's output, capped, until it exits or the wall
    timeout passes; `kill` stops everything the command started."""
    started = time.monotonic()
    timed_out = True  # until the read returns: a read that raises kills as well
    try:
        capture, timed_out = read_output(proc, limits.output_bytes, limits.wall_seconds)
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


def kill_process_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class CappedOutput:
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

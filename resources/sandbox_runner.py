"""The trusted runner of a Docker sandbox episode: pid 1 of the episode's
container (`DockerSandbox.episode` passes this file as `python3 -c`), it
runs the episode's commands one at a time and reports each as a frame.

Protocol, both ways: a 4-byte big-endian length, then that many bytes of
JSON; a result's JSON is followed by exactly `head` + `tail` bytes of
output. Requests come on stdin from the host client; frames go to stdout,
which nothing else in the container holds: each command gets a pipe of its
own (stdout and stderr interleaved) and /dev/null as stdin, and the runner
is non-dumpable, so a process of the same uid cannot open
/proc/1/fd/{0,1}. As pid 1 of its pid namespace it receives no signal from
the commands (it handles none), and it reaps orphans.

A command runs in a new session with its own rlimits (cpu, fsize, core 0,
set by util-linux prlimit) and an oom_score_adj of 1000 (so the memory
cgroup's OOM killer takes a command before the runner); memory and pids are
the container's. When it
exits or its wall timeout passes, every other process in the container is
killed (kill(-1) from pid 1), so nothing a command started outlives it.

Standard library only, self-contained: it runs on the image's python3.
"""

import ctypes
import errno
import json
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time

PR_SET_DUMPABLE, PR_GET_DUMPABLE = 4, 3
MAX_REQUEST = 1 << 24


class Capped:
    """The first and last `cap // 2` bytes (as the host's CappedOutput)."""

    def __init__(self, cap):
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk):
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def send(header, head=b"", tail=b""):
    body = json.dumps(dict(header, head=len(head), tail=len(tail))).encode()
    write_all(1, struct.pack(">I", len(body)) + body + bytes(head) + bytes(tail))


def read_exact(fd, n):
    data = bytearray()
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def read_request():
    size = read_exact(0, 4)
    if size is None:
        return None
    (length,) = struct.unpack(">I", size)
    if length > MAX_REQUEST:
        raise ValueError("request too large")
    body = read_exact(0, length)
    return None if body is None else json.loads(body)


def reap(child, status):
    """Reap every exited process (orphans are ours); `status` of `child` if it went."""
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status
        if pid == 0:
            return status
        if pid == child:
            status = code


def kill_everything(child, status):
    """SIGKILL every process but this one, until none is left (a fork bomb
    forks between two kills); bounded, as a process stuck in the kernel may
    take a while to die."""
    pause, give_up = 0.0005, time.monotonic() + 10
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        status = reap(child, status)
        try:
            os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)  # only asks whether any child is left
        except ChildProcessError:
            return status
        if time.monotonic() > give_up:
            return status
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


# /proc/self/oom_score_adj, opened while the runner was still dumpable (a
# non-dumpable process's /proc files are root's): the runner's way to set it.
OOM_SCORE_ADJ = None


def set_oom_score_adj(value):
    os.pwrite(OOM_SCORE_ADJ, str(value).encode(), 0)


def start(argv, cwd, limits, out_fd):
    """Start `argv` in a new session, with the command's rlimits set by
    util-linux prlimit before it execs the command: a vfork'd spawn (no
    preexec_fn) costs about 1 ms where a fork of this interpreter costs 5."""
    command = [
        "prlimit", f"--cpu={limits['cpu_seconds']}:{limits['cpu_seconds']}",
        f"--fsize={limits['file_size_bytes']}:{limits['file_size_bytes']}", "--core=0:0", "--", *argv,
    ]
    # The command inherits an oom_score_adj of 1000 (the OOM killer's first
    # choice), then the runner lowers its own back to 0 (allowed: no lower
    # than where the engine set it).
    set_oom_score_adj(1000)
    try:
        return subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out_fd, stderr=out_fd, cwd=cwd,
                                start_new_session=True, close_fds=True)
    finally:
        set_oom_score_adj(0)


def run(request):
    argv, limits = request["argv"], request["limits"]
    capture = Capped(limits["output_bytes"])
    read_fd, write_fd = os.pipe()
    try:
        proc = start(argv, request["cwd"], limits, write_fd)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:  # ValueError: a NUL or lone surrogate in argv
        os.close(read_fd)
        capture.add(f"clawloop-sandbox: cannot run the command: {exc}\n".encode())
        return {"exit": 126, "timed_out": False, "total": capture.total}, capture.head, capture.tail
    finally:
        os.close(write_fd)
    child = proc.pid
    try:
        pidfd = os.pidfd_open(child)
    except (AttributeError, OSError):
        pidfd = None
    deadline = time.monotonic() + limits["wall_seconds"]
    status, eof, timed_out = None, False, False
    try:
        while status is None or not eof:
            status = reap(child, status)
            if status is not None and not eof:
                # The command is done and a background process holds the pipe:
                # it dies below, and what it wrote so far is read after.
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            watch = ([] if eof else [read_fd]) + ([pidfd] if pidfd is not None else [])
            ready = select.select(watch, [], [], min(remaining, 0.1))[0]
            if read_fd in ready:
                chunk = os.read(read_fd, 65536)
                if chunk:
                    capture.add(chunk)
                else:
                    eof = True
        status = kill_everything(child, status)
        # Whatever the killed processes wrote before they died (the pipe ends once they are gone).
        until = time.monotonic() + 1
        while time.monotonic() < until and select.select([read_fd], [], [], max(until - time.monotonic(), 0))[0]:
            chunk = os.read(read_fd, 65536)
            if not chunk:
                break
            capture.add(chunk)
    finally:
        os.close(read_fd)
        if pidfd is not None:
            os.close(pidfd)
    proc.returncode = -1  # reaped here, not by Popen
    if timed_out or status is None:
        code = None
    elif os.WIFSIGNALED(status):
        code = 128 + os.WTERMSIG(status)  # as a shell reports it, and as `docker run` does
    else:
        code = os.WEXITSTATUS(status)
    return {"exit": code, "timed_out": timed_out, "total": capture.total}, capture.head, capture.tail


def main():
    if os.getpid() != 1:
        sys.exit("clawloop-sandbox runner: must be pid 1 of its container (run without --init)")
    global OOM_SCORE_ADJ
    OOM_SCORE_ADJ = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 or libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0:
        sys.exit(f"clawloop-sandbox runner: cannot make itself non-dumpable: {os.strerror(ctypes.get_errno())}")
    # Pid 1 of its namespace gets no signal from inside it that it does not
    # handle: no handler at all (Python's SIGINT one goes), and the commands
    # inherit the defaults.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if shutil.which("prlimit") is None:
        sys.exit("clawloop-sandbox runner: the image has no prlimit (util-linux)")
    # Nothing after this point writes to stderr: the stream to the host is frames on stdout only.
    null = os.open("/dev/null", os.O_WRONLY)
    os.dup2(null, 2)
    os.close(null)
    send({"ready": True})
    while True:
        request = read_request()
        if request is None:  # the host closed the stream: the episode is over
            return
        send(*run(request))


if __name__ == "__main__":
    try:
        main()
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise

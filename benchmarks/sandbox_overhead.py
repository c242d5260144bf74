"""Per-command cost of each sandbox backend, as a ratio to a bare `bash -c`
measured in the same run (so machine speed and load cancel out). For Docker
also an episode's: a command inside one open episode (one container, the
runner in it), and the cost of opening and closing an episode."""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from resources.sandbox import BubblewrapSandbox, DockerSandbox, Mount, Sandbox, SandboxLimits, SandboxUnavailable

COMMAND = "echo hi > out.txt && wc -c < out.txt"


def _median_seconds(call, repeats: int) -> float:
    call()  # warm the page cache and the first exec
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


def available_backends() -> dict[str, Sandbox]:
    """Every backend that can run here; a missing one is named with its reason."""
    backends: dict[str, Sandbox] = {"bubblewrap": BubblewrapSandbox()}
    docker = DockerSandbox()
    try:
        docker.check_available()
        backends["docker"] = docker
    except SandboxUnavailable as exc:
        print(f"sandbox.docker: not measured: {exc}")
    return backends


def measure(backends: dict[str, Sandbox] | None = None, repeats: int = 40) -> dict[str, float]:
    backends = backends or available_backends()
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        bare = _median_seconds(lambda: subprocess.run(["bash", "-c", COMMAND], cwd=workspace, capture_output=True, check=True),
                               repeats)
        results["sandbox.bare_bash_seconds"] = bare
        for name, sandbox in backends.items():
            mounts = [Mount(workspace, "/workspace", writable=True)]
            seconds = _median_seconds(lambda: sandbox.run(["bash", "-c", COMMAND], mounts), repeats)
            results[f"sandbox.{name}.command_seconds"] = seconds
            results[f"sandbox.{name}.overhead_ratio"] = seconds / bare
            if isinstance(sandbox, DockerSandbox):
                results.update(measure_episode(sandbox, mounts, bare, repeats))
    return results


def measure_episode(sandbox: DockerSandbox, mounts: list[Mount], bare: float, repeats: int) -> dict[str, float]:
    """A command inside one open episode, and an episode opened and closed
    (a few times: each is a container started and removed)."""
    limits = SandboxLimits()

    def command(episode) -> None:
        result = episode.run(["bash", "-c", COMMAND], limits)
        if result.exit_code != 0 or result.output.strip() != "3":
            raise RuntimeError(f"the episode's command failed: {result}")

    with sandbox.episode(mounts) as episode:
        seconds = _median_seconds(lambda: command(episode), repeats)

    def open_and_close() -> None:
        with sandbox.episode(mounts):
            pass

    return {
        "sandbox.docker_episode.command_seconds": seconds,
        "sandbox.docker_episode.overhead_ratio": seconds / bare,
        "sandbox.docker_episode.start_seconds": _median_seconds(open_and_close, min(repeats, 5)),
    }

"""Per-command cost of each sandbox backend, as a ratio to a bare `bash -c`
measured in the same run (so machine speed and load cancel out)."""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from resources.sandbox import BubblewrapSandbox, DockerSandbox, Mount, Sandbox, SandboxUnavailable

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
    return results

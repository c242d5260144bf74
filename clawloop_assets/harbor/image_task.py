"""Our agent on an imported Harbor task in the task's own image, as Harbor
runs an agent: one container of the image per episode, the agent's
commands run in it by `docker exec` (in the image's WORKDIR, as its user),
then the task's tests/test.sh in the same container, and the reward read
from /logs/verifier. This is how a task that validates only in its own
image (`harbor-import --sandbox docker`, listed `image_only`) is evaluated.

The container is hardened as `docker_run.start_task_container` makes it:
no network, every capability dropped but the few a task's root needs to
install and serve (TASK_CAPABILITIES), no-new-privileges, our seccomp
profile less chroot and ptrace (TASK_SYSCALLS), task.toml's memory (no
swap) and cpus, a process limit. A task whose oracle needed the package
registries (`registries` in its manifest row) gives the agent them too,
through the same proxy (registry_proxy), as Harbor's agent has the
network; the proxy closes before the tests. Beyond Harbor, for an agent
that is an adversary:

- Processes do not outlive their command (as in our Docker sandbox's
  episodes): after each command every process in the container but its
  idle pid 1 is killed, and again before and after the tests, so nothing
  the agent started runs beside test.sh or touches the reward once it is
  written.
- /tests and /logs/verifier are host directories mounted from the start
  (empty while the agent works): before the tests the harness empties both
  on the host and writes the task's tests into /tests there, so nothing
  the agent planted (a conftest.py, a reward file, a link) survives into
  the verification. What the image itself has under /tests is hidden.
- task.toml's [agent] timeout_sec bounds the agent's commands together:
  each command gets at most what is left of it (the policy's own sampling
  time does not count: ours is batched across tasks), and none runs once
  it is spent. The tests get [verifier] timeout_sec.

test.sh is adapted as the import adapts it for task images
(task_format._adapt_test_sh, in_image): uv/uvx resolve from the offline
toolchain mounted read-only (the agent can see it, not change it). A
test.sh that leaves no valid reward, or runs past its timeout, is a
verifier error (as in Harbor: no reward file is an exception there, not a
0), counted as not passed and reported, never a score. A reward below 1 is
0 (partial credit counts as not passed, as for our bundles).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from clawloop_assets.harbor.docker_run import (
    CONTAINER_SECONDS,
    IMAGE_WHEELS,
    TaskBudget,
    _docker,
    _exec,
    _image_id,
    _image_path,
    fetch_wheels,
    point_apt_at_registries,
    read_reward,
    start_task_container,
    toolchain_mounts,
    with_checkout_modes,
)
from clawloop_assets.harbor.registry_proxy import PROXY_ENV, RegistryProxy, RegistryProxyError
from clawloop_assets.harbor.task_format import (
    HARBOR_CAPABILITY,
    IMPORTED_MAX_TURNS,
    MAX_COMMAND_TIMEOUT_S,
    REWARD_DIR,
    HarborTaskError,
    _adapt_test_sh,
    _read_task_toml,
)
from clawloop_assets.harbor.toolchain import TOOLCHAIN_ENV, TOOLCHAIN_MOUNT, Toolchain, load_toolchain
from clawloop_assets.harness.verification import VerifierResult
from clawloop_assets.task_bundle import TaskBundle, bundle_digest
from resources.sandbox import CommandResult, SandboxError, SandboxLimits, kill_process_group, read_output

TESTS_DIR = "/tests"
CHECK_NAME = "harbor_reward"
# Run by `docker exec` for each agent command: the command, then every
# other process of the container killed (kill(-1) spares the caller and
# pid 1), three times so that one forked meanwhile goes too.
_COMMAND_WRAPPER = '"$@"; status=$?; for _ in 1 2 3; do kill -9 -1 2>/dev/null; done; exit $status'
_END_EVERY_PROCESS = ["bash", "-c", "for _ in 1 2 3; do kill -9 -1 2>/dev/null; done; true"]


@dataclass(frozen=True)
class ImageTaskBundle(TaskBundle):
    """An imported Harbor task our agent runs in its own image: the bundle
    fields the harness reads (its root is the Harbor task directory, whose
    instruction.md the agent reads as written), and what the episode needs."""

    image: str = ""
    memory_bytes: int = 0
    cpus: float = 1.0
    agent_timeout_s: float = 0.0
    verifier_timeout_s: float = 0.0
    verifier_env: tuple[tuple[str, str], ...] = ()
    registries: bool = False  # its oracle needed the package registries: the agent gets them too


def source_digest(source: Path) -> str:
    """The content hash of a Harbor task directory (what an image_only
    manifest row records): what runs in the image must be what was validated."""
    return bundle_digest(source)


def load_image_task(row: dict) -> ImageTaskBundle:
    """The image_only manifest row of a task as a bundle our harness runs.
    Raises HarborTaskError naming what is wrong: its source directory gone
    or changed since it was validated, or its image not here."""
    source = Path(str(row.get("source") or ""))
    task_id, image = row.get("task_id"), row.get("image")
    if not source.is_dir() or not (source / "instruction.md").is_file():
        raise HarborTaskError(f"{source}: the Harbor task {task_id} was validated from there and is gone")
    if row.get("source_sha256") is None:
        raise HarborTaskError(f"{task_id}: its manifest row records no content hash of {source} (an import older "
                              "than rollouts in task images): import it again with --sandbox docker")
    if source_digest(source) != row["source_sha256"]:
        raise HarborTaskError(f"{source}: changed since `clawloop harbor-import --sandbox docker` validated it: "
                              "import it again")
    if not isinstance(image, str) or _image_id(image) is None:
        raise HarborTaskError(f"{task_id}: its image {image!r} is not in the Docker engine here (removed, or built "
                              "on another machine): import it again with --sandbox docker")
    config = _read_task_toml(source / "task.toml")
    return ImageTaskBundle(
        root=source, task_id=task_id, capability=HARBOR_CAPABILITY, domain=config["domain"],
        difficulty=config["difficulty"], track="terminal", format="files", generator_id="harbor-import", seed=0,
        round_key="imported", max_turns=IMPORTED_MAX_TURNS,
        command_timeout_s=min(config["agent_timeout_s"], MAX_COMMAND_TIMEOUT_S), contract={"rules": []},
        image=image, memory_bytes=int(config["memory_bytes"]), cpus=float(config["cpus"]),
        agent_timeout_s=float(config["agent_timeout_s"]), verifier_timeout_s=float(config["verifier_timeout_s"]),
        verifier_env=tuple(sorted(config["verifier_env"].items())), registries=bool(row.get("registries")),
    )


def _empty(directory: Path) -> None:
    """Remove everything in `directory` (a bind mount: the directory itself
    stays), never following a link the agent left there."""
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)


class ImageEpisode:
    """One episode of our agent in a container of the task's image; `run`
    is an EpisodeRunner's command, `verify` runs the tests and reads the
    reward, `close` removes the container. A failure to set it up raises
    SandboxError (the harness retries, then excludes the rollout)."""

    def __init__(self, task: ImageTaskBundle, cpu_shares: int | None = None, toolchain: Toolchain | None = None):
        self.task, self.cpu_shares = task, cpu_shares
        self.toolchain = toolchain or load_toolchain()
        self.name = ""
        self.scratch: Path | None = None
        self.proxy: RegistryProxy | None = None
        self.agent_seconds = 0.0

    @property
    def test_path(self) -> Path:
        return self.task.root / "tests" / "test.sh"

    def start(self) -> None:
        self.name = f"clawloop-agent-{uuid.uuid4().hex[:12]}"  # a new one each try: a failed start may leave its name
        self.scratch = Path(tempfile.mkdtemp(prefix="clawloop-image-episode-"))
        os.chmod(self.scratch, 0o755)
        self.logs, self.tests, self.wheels = self.scratch / "verifier", self.scratch / "tests", self.scratch / "wheels"
        for directory in (self.logs, self.tests, self.wheels):
            directory.mkdir()
        try:
            test_sh = self.test_path.read_text(encoding="utf-8")
            first = _adapt_test_sh(test_sh, self.test_path, self.toolchain, None, in_image=True)
            mounts = [f"{self.logs}:{REWARD_DIR}:rw", f"{self.tests}:{TESTS_DIR}:rw"]
            if first.uses_toolchain:
                mounts += toolchain_mounts(self.toolchain, self.wheels, self.test_path)
            if self.task.registries:
                self.proxy = RegistryProxy()
                mounts.append(self.proxy.mount)
            start_task_container(self.name, self.task.image, self.task.memory_bytes, self.task.cpus, self.cpu_shares,
                                 mounts)
            if self.proxy is not None:
                point_apt_at_registries(self.name, True)
            # The tests' adaptation needs the image's Python; asked before the agent can change it.
            probe, version = _exec(self.name, ["python3", "-c", "import platform; print(platform.python_version())"],
                                   30.0)
            python = version.strip().splitlines()[-1] if probe == 0 and version.strip() else None
            self.script = _adapt_test_sh(test_sh, self.test_path, self.toolchain, python, in_image=True)
            if self.script.reasons:
                raise SandboxError(f"{self.test_path}: cannot run here: {'; '.join(self.script.reasons)}")
            if self.script.fetch:
                fetch_wheels(self.script.fetch, python, self.wheels, TaskBudget(None))
        except (HarborTaskError, RegistryProxyError) as exc:  # the harness's setup, not the agent's doing
            self.close()
            raise SandboxError(f"the episode in {self.task.image} could not be set up: {exc}") from exc
        except BaseException:
            self.close()
            raise

    def run(self, argv: Sequence[str], limits: SandboxLimits) -> CommandResult:
        """One agent command in the container, within its wall timeout and
        what is left of the task's agent time; the container's memory and
        cpus are the task's (limits.memory_bytes is not applied here)."""
        left = self.task.agent_timeout_s - self.agent_seconds
        if left < 1.0:
            return CommandResult(None, f"[the task's agent time of {self.task.agent_timeout_s:g} s is spent: "
                                 "the command was not run]", False, True, 0.0)
        wall = min(limits.wall_seconds, left)
        started = time.monotonic()
        try:
            proc = subprocess.Popen([_docker(), "exec", *self._registry_args(), self.name, "bash", "-c",
                                     self._wrapper(), "clawloop", *argv],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True)
        except OSError as exc:
            raise SandboxError(f"could not start the Docker client: {exc}") from exc
        with proc.stdout:
            capture, timed_out = read_output(proc, limits.output_bytes, wall)
        if timed_out:
            kill_process_group(proc)
            self._end_processes()
        try:
            code = proc.wait(timeout=CONTAINER_SECONDS)  # the client asks the engine for the exit code
        except subprocess.TimeoutExpired:
            kill_process_group(proc)
            code = proc.wait()
        seconds = time.monotonic() - started
        self.agent_seconds += seconds
        return CommandResult(None if timed_out else code, capture.text(), capture.truncated, timed_out, seconds)

    def _registry_args(self) -> list[str]:
        return [part for name, value in PROXY_ENV.items() for part in ("-e", f"{name}={value}")] if self.proxy else []

    def _wrapper(self) -> str:
        # The relay does not outlive a command either: each starts its own.
        if self.proxy is None:
            return _COMMAND_WRAPPER
        return f"{' '.join(self.proxy.relay_argv)} >/dev/null; {_COMMAND_WRAPPER}"

    def _end_processes(self) -> None:
        subprocess.run([_docker(), "exec", self.name, *_END_EVERY_PROCESS], capture_output=True,
                       timeout=CONTAINER_SECONDS)

    def verify(self) -> VerifierResult:
        """The task's tests in the container as the agent left it; the
        reward, or a verifier error with the reason."""
        started = time.monotonic()

        def error(why: str) -> VerifierResult:
            return VerifierResult("error", None, error=why, seconds=time.monotonic() - started)

        if self.proxy is not None:  # nothing reaches a registry once the tests start
            self.proxy.close()
            self.proxy = None
        self._end_processes()
        if self.task.registries:
            point_apt_at_registries(self.name, False)
        _empty(self.logs)
        _empty(self.tests)
        shutil.copytree(self.task.root / "tests", self.tests, symlinks=False, dirs_exist_ok=True)
        (self.tests / "test.sh").write_text(self.script.text, encoding="utf-8")
        with_checkout_modes(self.tests)  # as a checkout gives them, whatever the source's modes
        os.chmod(self.logs, 0o777)  # the image's user (perhaps not root) writes the reward
        env = dict(self.task.verifier_env)
        if self.script.uses_toolchain:
            env.update(TOOLCHAIN_ENV, UV_FIND_LINKS=IMAGE_WHEELS,
                       PATH=f"{TOOLCHAIN_MOUNT}/bin:{_image_path(self.task.image)}")
        code, output = _exec(self.name, ["bash", f"{TESTS_DIR}/test.sh"], self.task.verifier_timeout_s, env)
        self._end_processes()  # nothing test.sh started changes the reward after this
        last = (output.strip().splitlines() or ["no output"])[-1][:200]
        if code is None:
            return error(f"tests/test.sh did not finish within {self.task.verifier_timeout_s:g} s (last output: {last})")
        reward, detail, _named = read_reward(self.logs)
        if reward is None:
            return error(f"tests/test.sh left no valid reward: {detail}; it exited with {code} (last output: {last})")
        passed = reward == 1.0
        detail += f"; test.sh exited with {code}" + ("" if passed or reward == 0 else " (partial credit counts as not passed)")
        return VerifierResult("scored", 1.0 if passed else 0.0,
                              checks=[{"name": CHECK_NAME, "passed": passed, "detail": detail[:500]}],
                              seconds=time.monotonic() - started)

    def close(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if self.name:
            # Also after a failed start: `docker run -d` may have created it without starting it.
            subprocess.run([_docker(), "rm", "-f", self.name], capture_output=True, timeout=CONTAINER_SECONDS)
            self.name = ""
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def is_image_task(task: TaskBundle) -> bool:
    return isinstance(task, ImageTaskBundle)

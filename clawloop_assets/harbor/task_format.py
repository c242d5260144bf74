"""Harbor task format, both ways: the layout of Harbor, SkillsBench and
Terminal-Bench 2 tasks

```
instruction.md       what the agent reads
task.toml            [metadata], [verifier], [agent], [environment] (fields read: see _read_task_toml)
environment/         the build context: a Dockerfile (FROM, WORKDIR, RUN, COPY) and the files it copies
solution/solve.sh    the oracle, run in the WORKDIR
tests/test.sh        the verifier: writes a number in [0, 1] to /logs/verifier/reward.txt
```

Import turns such a task into our TaskBundle, run unchanged by run_rollouts
and run_verifier: capability "harbor", the Dockerfile's COPYs replayed into
environment/ (the agent's /workspace), the Harbor tests/ kept as they are,
and tests/verify.py a wrapper that runs tests/test.sh inside the verifier's
sandbox and turns reward.txt into our result. The Harbor check lives in one
place, the answer.json check of type "harbor_test_sh": run_verifier asks
`harbor_verifier_mounts` for the WORKDIR (a writable copy of the final
workspace) and a writable /logs/verifier. The agent and the oracle work in
/workspace: the WORKDIR path in instruction.md and solve.sh is rewritten.

A task whose environment needs what our sandbox lacks (a package, a base
image, GPUs, the network, a build step we cannot replay) is not runnable
here: the import result says so, with the file and the missing thing, and
writes no bundle. Packages are probed inside the real sandbox.

Export writes one of our bundles in the same layout, its verifier
(generators/verify.py with answer.json) copied into tests/.

What the Harbor model cannot exclude: test.sh often runs code the agent
wrote (its program, its module under test), and that code runs as the
tests' own uid, with the tests' mounts. It can do whatever test.sh can:
write /logs/verifier/reward.txt, make it read-only so test.sh cannot
overwrite it, kill test.sh's process group or the wrapper itself, or hang.
No uid separation inside one test.sh run can stop it; what we do instead:

- The reward directory is made fresh for each verification, after the
  agent's last command (`harbor_verifier_mounts`), owned by the verifier's
  uid with mode 0755, so the agent's own commands (another uid, another
  sandbox run) never had it; the wrapper refuses to start unless it is
  empty and its uid's.
- A reward counts only when test.sh exits 0 within its timeout and the
  reward file is a regular file the tests' uid wrote and left writable,
  with one link, in a directory whose owner and modes did not change.
  Otherwise the rollout scores 0 with the reason: killed, timed out or
  tampered with is the agent's failure, never an error that would exclude it.
- Every process test.sh left is killed before the reward is read, and the
  result is written after that, replacing whatever is at its path.
- A wrapper killed by SIGKILL (the agent's code can do it) scores 0
  (run_verifier). So does a test.sh that crashes, or exits without a reward
  or with one that is not a number in [0, 1]: agent code it runs can cause
  each, and the task itself was validated (its oracle passes) before any
  rollout, so none of them may exclude a rollout. Only the harness's own
  failure (a reward directory that is not fresh) is an error.

What remains: agent code that changes the tests' verdict from inside
(a conftest.py in the WORKDIR that pytest loads, a program that prints what
the tests look for, a process that rewrites the reward in the moment
between test.sh's own write and its exit) is not told apart from the tests' own work. Only tasks whose
tests do not run or load agent code are immune; those that do are as
trustworthy as their test.sh makes them.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import polars as pl

from clawloop_assets.harbor.toolchain import TOOLCHAIN_ENV, TOOLCHAIN_MOUNT, TOOLCHAIN_PATH, Toolchain, load_toolchain
from clawloop_assets.round_state import require_rows
from clawloop_assets.task_bundle import TaskBundle, TaskBundleError, bundle_digest, load_task_bundle, write_task_toml
from resources.paths import staged_directory
from resources.sandbox import (
    VERIFIER_UID,
    BubblewrapSandbox,
    Mount,
    Sandbox,
    SandboxError,
    SandboxLimits,
    copy_tree_safely,
    disk_quota,
)

HARBOR_CAPABILITY = "harbor"
CHECK_TYPE = "harbor_test_sh"
MANIFEST_NAME = ".harbor-import.json"  # hidden: the evaluation set loads the bundle directories beside it
REWARD_DIR = "/logs/verifier"
DEFAULT_VERIFIER_TIMEOUT_S = 120.0
MAX_VERIFIER_TIMEOUT_S = 600.0
MAX_COMMAND_TIMEOUT_S = 60.0
# Harbor's defaults for a task.toml that names none.
DEFAULT_MEMORY_BYTES = 2 << 30
DEFAULT_STORAGE_BYTES = 10 << 30
# The oracle's and the tests' workspace is a tmpfs (memory) while they run:
# at most this much of a task's storage is given to it.
MAX_WORKSPACE_BYTES = 2 << 30
DEFAULT_ORACLE_TIMEOUT_S = 600.0
# Harbor runs each task in a container of its own, without a process limit
# or a small /tmp: pytest-xdist, make -j and uv's own threads need more than
# our generated tasks do.
HARBOR_MAX_PROCESSES = 512
HARBOR_TMP_BYTES = 512 << 20
IMPORTED_MAX_TURNS = 30
EXPORT_BASE_IMAGE = "python:3.11-slim"
EXPORT_WORKDIR = "/app"
# An exported task's timeouts: Harbor's benchmarks give an agent and a
# verifier at least this long (Terminal-Bench 2's shortest agent timeout).
HARBOR_MIN_TIMEOUT_S = 600.0
# Our verifier under a name of its own in an exported tests/: an imported
# task's tests/verify.py is our wrapper.
EXPORTED_VERIFIER = "clawloop_verify.py"

# A WORKDIR is mounted over this path in the verifier's sandbox: never over
# the system or the harness's own mount points. /workspace is allowed: the
# verifier's copy of the final workspace is mounted there anyway, and the
# WORKDIR's writable copy takes its place.
_RESERVED_ROOTS = {"", "bin", "boot", "dev", "etc", "lib", "lib64", "proc", "run", "sbin", "sys", "tmp", "usr", "var",
                   "tests", "answer", "result", "solution", "logs", "harbor-toolchain", "clawloop-dpkg"}
_DIFFICULTY = {"easy": 2, "medium": 4, "hard": 7}
# Dockerfile base images whose runtime we can tell our sandbox provides, by
# the tool that image exists for. Any other image is not runnable here.
_BASE_IMAGE_TOOLS = (
    (re.compile(r"(^|[/-])python[:\-]|python-3"), ("python3",)),
    (re.compile(r"(^|/)(ubuntu|debian)[:\-]|ubuntu-\d|debian-"), ("bash",)),
    (re.compile(r"(^|/)node[:\-]"), ("node",)),
    (re.compile(r"(^|/)golang[:\-]"), ("go",)),
    (re.compile(r"(^|/)rust[:\-]"), ("cargo",)),
    (re.compile(r"(^|/)(openjdk|eclipse-temurin)[:\-]"), ("java",)),
)
# apt packages that only reach the network or configure apt itself: the
# sandbox has no network, so installing them changes nothing a task can use.
_APT_NOOP = {"ca-certificates", "gnupg", "gpg", "apt-utils", "apt-transport-https", "software-properties-common"}
_ENV_IGNORED = {"DEBIAN_FRONTEND", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PIP_NO_CACHE_DIR",
                "PIP_DISABLE_PIP_VERSION_CHECK", "TERM", "LANG", "LC_ALL"}
_IGNORED_INSTRUCTIONS = {"LABEL", "EXPOSE", "CMD", "ENTRYPOINT", "ARG", "USER", "SHELL", "MAINTAINER", "STOPSIGNAL",
                         "HEALTHCHECK", "VOLUME", "ONBUILD"}
# A script line that fetches from the network; the sandbox has none.
_NETWORK_USE = re.compile(
    r"\b(curl|wget|uvx|git\s+clone|apt-get|apt\s+install|npm\s+(install|i|ci)|(pip3?|uv\s+pip|uv)\s+(install|add|sync))\b"
)


class HarborTaskError(ValueError):
    """A Harbor task directory is malformed; the message names the file."""


@dataclass(frozen=True)
class ImportResult:
    task_id: str
    source: Path
    runnable: bool
    bundle_dir: Path | None  # None when not runnable: no bundle is written
    reasons: tuple[str, ...] = ()  # why not runnable (empty for a runnable one)
    adaptations: tuple[str, ...] = ()  # what differs from the task's own environment, each with its file
    # Set when the task validates only in its own image on Docker (its
    # Dockerfile built, the Harbor way): the tag. It is then not runnable by
    # our agent (`reasons` say why not in our sandbox) and has no bundle.
    image: str | None = None
    sandbox: str | None = None  # the backend it was validated on: "bubblewrap" or "docker"
    # Its oracle fetched, and passed with the package registries (registry_proxy):
    # our agent gets them too in its image, as Harbor's agent has the network.
    registries: bool = False

    @property
    def validated(self) -> bool:
        """Its oracle passes and its untouched environment fails here, in our sandbox or in its own image."""
        return self.runnable or self.image is not None

    def as_row(self) -> dict:
        return {"task_id": self.task_id, "source": str(self.source), "runnable": self.runnable,
                "bundle_dir": str(self.bundle_dir) if self.bundle_dir else None, "reasons": list(self.reasons),
                "adaptations": list(self.adaptations), "image": self.image, "sandbox": self.sandbox,
                "registries": self.registries}


@dataclass
class _Environment:
    """What the Dockerfile asks for, as far as we replay it."""

    workdir: str | None = None
    base_image: str | None = None
    copies: list[tuple[list[str], str]] = field(default_factory=list)  # (sources in the context, absolute target)
    directories: list[str] = field(default_factory=list)  # absolute paths from `RUN mkdir`
    binaries: dict[str, str] = field(default_factory=dict)  # binary -> what asks for it
    modules: dict[str, str] = field(default_factory=dict)
    paths: dict[str, str] = field(default_factory=dict)
    apt: dict[str, str] = field(default_factory=dict)  # apt package -> what asks for it
    pip: dict[str, tuple[str, str]] = field(default_factory=dict)  # distribution -> (requirement, what asks for it)
    variables: dict[str, str] = field(default_factory=dict)  # ENV, in order
    inline_files: dict[str, str] = field(default_factory=dict)  # absolute target -> a COPY here-document's text
    reasons: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- import


def import_harbor_task(src_dir: Path, dest_root: Path, sandbox: Sandbox | None = None, *,
                       oracle_timeout_s: float | None = None, toolchain: Toolchain | None = None,
                       task_budget_s: float | None = None) -> ImportResult:
    """Import one Harbor task into `dest_root/<task_id>/` as our bundle, or
    say why it does not run here. A task counts as imported only once it
    has run here: its oracle passes its tests and its untouched workspace
    fails them (`validate_harbor_bundle`); `oracle_timeout_s` caps the
    oracle's wall time (default: the task's agent timeout, at most
    DEFAULT_ORACLE_TIMEOUT_S). Raises HarborTaskError for a malformed task.

    On the Docker backend, a task that does not validate in our sandbox is
    then validated in its own image, the Harbor way (docker_run: its
    Dockerfile built, solve.sh and test.sh run in a container of it, within
    `task_budget_s` for the whole of it). One that passes there is listed
    as validated only in its image (`ImportResult.image`), with no bundle:
    the evaluation set runs our agent on it in that image on the Docker
    backend (harbor/image_task.py) and leaves it out, named, on bubblewrap."""
    src = Path(src_dir)
    sandbox = sandbox or BubblewrapSandbox()
    result = _import_into_sandbox(src, Path(dest_root), sandbox, oracle_timeout_s, toolchain or load_toolchain())
    backend = _backend_name(sandbox)
    result = _with_sandbox(result, backend)
    if result.runnable or backend != "docker" or _config_refusal(src):
        return result
    return _validate_in_task_image(result, src, sandbox, oracle_timeout_s, task_budget_s)


def _backend_name(sandbox: Sandbox) -> str:
    from resources.sandbox import DockerSandbox

    return "docker" if isinstance(sandbox, DockerSandbox) else "bubblewrap"


def _with_sandbox(result: ImportResult, backend: str) -> ImportResult:
    from dataclasses import replace

    return replace(result, sandbox=backend)


def _config_refusal(src: Path) -> bool:
    """Whether task.toml alone rules the task out (GPUs, more memory than
    this machine has): no image changes that."""
    return bool(_read_task_toml(src / "task.toml")["reasons"])


def _validate_in_task_image(result: ImportResult, src: Path, sandbox: Sandbox, oracle_timeout_s: float | None,
                            task_budget_s: float | None) -> ImportResult:
    """`result` (not runnable in our sandbox) judged again in the task's own
    image. Validated there: the image's tag, our sandbox's reasons kept to
    say why the agent cannot run it. Not: the image path's reason first."""
    from dataclasses import replace

    from clawloop_assets.harbor.docker_run import (
        IMAGE_REPOSITORY,
        HarborRunError,
        remove_task_image,
        task_images,
        validate_the_harbor_way,
    )

    def remove_images() -> None:
        # A task that does not validate keeps no image (docker_run keeps one per task, reused while unchanged).
        for tag in task_images(f"{IMAGE_REPOSITORY}/{result.task_id}"):
            remove_task_image(tag)

    config = _read_task_toml(src / "task.toml")
    timeout = oracle_timeout_s or min(config["agent_timeout_s"], DEFAULT_ORACLE_TIMEOUT_S)
    tests = src / "tests" / "test.sh"
    try:
        failure, solved, untouched = validate_the_harbor_way(src, cpu_shares=getattr(sandbox, "cpu_shares", None),
                                                              oracle_timeout_s=timeout, budget_s=task_budget_s)
    except HarborRunError as exc:
        remove_images()  # built, then refused (test.sh, the budget), or not built at all
        return replace(result, reasons=(f"in its own image: {exc}", *result.reasons))
    except SandboxError as exc:  # the engine's failure, not the task's
        return replace(result, reasons=(f"in its own image: not validated: the Docker engine failed: {exc}",
                                        *result.reasons))
    if failure is not None:
        remove_images()
        return replace(result, reasons=(f"in its own image: {failure}", *result.reasons))
    note = (f"{tests}: validates only in its own image {solved.image} on Docker (oracle 1, untouched "
            f"{'no reward' if untouched.reward is None else f'{untouched.reward:g}'}); our agent runs on it in "
            "that image on the Docker backend only")
    return replace(result, image=solved.image, reasons=(note, *result.reasons),
                   adaptations=tuple(solved.adaptations), registries=solved.registries)


def _import_into_sandbox(src: Path, dest_root: Path, sandbox: Sandbox, oracle_timeout_s: float | None,
                         toolchain: Toolchain | None) -> ImportResult:
    """The task read into our sandbox (the host-tools path): its Dockerfile
    replayed, not built; runnable once its oracle passes there."""
    toolchain = toolchain or load_toolchain()
    task_id = _task_id(src.name)
    _check_tree(src)
    instruction = _read_text(src / "instruction.md")
    if not instruction.strip():
        raise HarborTaskError(f"{src / 'instruction.md'}: empty instruction")
    config = _read_task_toml(src / "task.toml")
    test_sh = _read_text(src / "tests" / "test.sh")  # required: it is the verifier
    solve_path = src / "solution" / "solve.sh"
    solve = _read_text(solve_path) if solve_path.exists() else None
    if not (src / "environment").is_dir():
        raise HarborTaskError(f"{src / 'environment'}: missing directory (the task's build context)")

    reasons, adaptations = list(config["reasons"]), list(config["adaptations"])
    dockerfile = src / "environment" / "Dockerfile"
    if dockerfile.is_file():
        env = _parse_dockerfile(dockerfile, src / "environment")
    else:
        env = _Environment(reasons=[f"{dockerfile}: missing" + (
            f"; task.toml names the prebuilt image {config['docker_image']!r}, which our sandbox cannot run"
            if config["docker_image"] else "")])
    reasons += env.reasons
    if solve is None:
        reasons.append(f"{solve_path}: missing; without an oracle the task cannot be validated")
    for line in (solve or "").splitlines():
        if not line.lstrip().startswith("#") and _NETWORK_USE.search(line):
            reasons.append(f"{solve_path}: `{line.strip()[:120]}` needs the network, which our sandbox does not have")
            break
    if (src / "tests" / "verify.py").exists():
        reasons.append(f"{src / 'tests' / 'verify.py'}: the name of our verifier entry point; rename it to import")
    # Twice: first for what test.sh asks of the sandbox (probed with the
    # Dockerfile's needs), then with the sandbox's python3 version known.
    script = _adapt_test_sh(test_sh, src / "tests" / "test.sh", toolchain, None)
    for name, why in script.apt.items():
        env.apt.setdefault(name, why)
    probe = _probe_sandbox(sandbox, env, dockerfile)
    missing, probed = _judge_probe(env, probe)
    script = _adapt_test_sh(test_sh, src / "tests" / "test.sh", toolchain, probe["python"])
    reasons += missing + script.reasons
    adaptations += probed + script.adaptations
    if env.variables:
        adaptations.append(f"{dockerfile}: ENV {', '.join(env.variables)} set for the oracle and the tests; "
                           "the agent's commands run in our fixed environment")
    dest_root = Path(dest_root)
    if not reasons:
        final = dest_root / task_id
        staging = Path(tempfile.mkdtemp(prefix=f".{task_id}.tmp-", dir=_made(dest_root)))
        try:
            _write_bundle(staging, src, task_id, instruction, config, env, solve, script, toolchain)
            bundle = load_task_bundle(staging)  # what the harness will do with it
            timeout = oracle_timeout_s or min(config["agent_timeout_s"], DEFAULT_ORACLE_TIMEOUT_S)
            failure = validate_harbor_bundle(sandbox, bundle, timeout)
            if failure is None:
                if final.exists():
                    shutil.rmtree(final)
                staging.rename(final)
                return ImportResult(task_id, src, True, final, (), tuple(adaptations))
            reasons.append(failure)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
    stale = dest_root / task_id
    if (stale / "task.toml").is_file() and 'generator_id = "harbor-import"' in (stale / "task.toml").read_text():
        shutil.rmtree(stale)  # an earlier import of it: the evaluation set must not run it now
        reasons.append(f"{stale}: the bundle of an earlier import was removed")
    return ImportResult(task_id, src, False, None, tuple(reasons), tuple(adaptations))


def _made(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def import_harbor_directory(src: Path, dest_root: Path, sandbox: Sandbox | None = None, *,
                            oracle_timeout_s: float | None = None, deadline: float | None = None,
                            task_budget_s: float | None = None, jobs: int = 1,
                            log=lambda result: None) -> tuple[list[ImportResult], Path]:
    """Import `src` (one task, or a directory of tasks) into `dest_root`;
    every task is listed, a malformed one as not runnable with its error.
    `deadline` (time.monotonic()) stops starting new tasks: those left are
    listed as not imported, with that reason; `task_budget_s` caps each
    task's validation in its own image (import_harbor_task); `jobs` tasks
    are imported at once. Returns the results, in the order of the tasks,
    and the manifest written (atomically) beside the bundles; an earlier
    import's entries for other tasks whose bundles are still there are kept."""
    from concurrent.futures import ThreadPoolExecutor

    from clawloop_assets.harbor.image_task import source_digest  # it builds on this module

    src, dest_root = Path(src), Path(dest_root)
    if not src.is_dir():
        raise HarborTaskError(f"{src}: not a directory")
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if (src / "task.toml").exists() or (src / "instruction.md").exists():
        task_dirs = [src]
    else:
        task_dirs = sorted(p for p in src.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not task_dirs:
            raise HarborTaskError(f"{src}: neither a Harbor task (no task.toml) nor a directory of tasks")
    toolchain = load_toolchain()
    backend = _backend_name(sandbox) if sandbox is not None else "bubblewrap"
    seen: dict[str, Path] = {}

    def one(task_dir: Path) -> ImportResult:
        try:
            task_id = _task_id(task_dir.name)
        except HarborTaskError as exc:
            result = ImportResult(task_dir.name, task_dir, False, None, (f"malformed: {exc}",), sandbox=backend)
        else:
            if seen.get(task_id) != task_dir:
                result = ImportResult(task_id, task_dir, False, None,
                                      (f"{task_dir}: its task id {task_id!r} is also {seen[task_id]}'s",), sandbox=backend)
            elif deadline is not None and time.monotonic() > deadline:
                result = ImportResult(task_id, task_dir, False, None, ("not tried: the import's time budget ran out",),
                                      sandbox=backend)
            else:
                try:
                    result = import_harbor_task(task_dir, dest_root, sandbox, oracle_timeout_s=oracle_timeout_s,
                                                toolchain=toolchain, task_budget_s=task_budget_s)
                except (HarborTaskError, TaskBundleError) as exc:
                    result = ImportResult(task_id, task_dir, False, None, (f"malformed: {exc}",), sandbox=backend)
                except SandboxError as exc:  # the harness's failure: the task is not judged
                    result = ImportResult(task_id, task_dir, False, None,
                                          (f"not validated: the sandbox failed: {exc}",), sandbox=backend)
                except subprocess.TimeoutExpired as exc:  # an engine too busy to answer: likewise
                    result = ImportResult(task_id, task_dir, False, None,
                                          (f"not validated: the Docker engine did not answer: {exc}",), sandbox=backend)
        log(result)
        return result

    for task_dir in task_dirs:  # the first directory of a task id is the one imported
        try:
            seen.setdefault(_task_id(task_dir.name), task_dir)
        except HarborTaskError:
            pass
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, task_dirs))
    dest_root.mkdir(parents=True, exist_ok=True)
    path = dest_root / MANIFEST_NAME
    earlier = read_import_manifest(dest_root)
    ours = {r.task_id for r in results}
    kept = [row for row in earlier.get("runnable", []) if row["task_id"] not in ours and (dest_root / row["task_id"]).is_dir()]
    kept_images = [row for row in earlier.get("image_only", []) if row["task_id"] not in ours]
    manifest = {
        "source": str(src), "imported_at": time.time(),
        "runnable": kept + [dict(r.as_row(), sha256=bundle_digest(r.bundle_dir)) for r in results if r.runnable],
        # Validated only in their own image on Docker: no bundle; evaluated in that image on Docker only,
        # from their source directory as hashed here (image_task.load_image_task).
        "image_only": kept_images + [dict(r.as_row(), source_sha256=source_digest(r.source))
                                     for r in results if r.image is not None],
        "not_runnable": [r.as_row() for r in results if not r.validated],
    }
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return results, path


def read_import_manifest(dest_root: Path) -> dict:
    """The manifest of the imports into `dest_root` ({} when there is none)."""
    path = Path(dest_root) / MANIFEST_NAME
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise HarborTaskError(f"{path}: not valid JSON ({exc})") from None


def render_import_table(results: list[ImportResult]) -> str:
    lines = [f"{'task':<32} {'status':<13} reason"]
    for r in sorted(results, key=lambda r: (not r.runnable, r.image is None, r.task_id)):
        status = "runnable" if r.runnable else "IMAGE ONLY" if r.image else "NOT RUNNABLE"
        reasons = list(r.reasons) or [f"{r.bundle_dir} (validated: oracle passes, untouched fails)"]
        lines.append(f"{r.task_id:<32} {status:<13} {reasons[0]}")
        lines += [f"{'':<46} {reason}" for reason in reasons[1:]]
    runnable, image_only = sum(r.runnable for r in results), sum(r.image is not None for r in results)
    lines.append(f"{runnable} runnable (imported and validated), "
                 + (f"{image_only} validated only in their own image on Docker (evaluated there on Docker only), "
                    if image_only else "")
                 + f"{len(results) - runnable - image_only} not runnable here")
    return "\n".join(lines) + "\n"


def _task_id(name: str) -> str:
    task_id = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-")
    if not task_id:
        raise HarborTaskError(f"{name!r}: cannot make a task id of this directory name")
    return task_id


def _check_tree(root: Path) -> None:
    if not root.is_dir():
        raise HarborTaskError(f"{root}: not a directory")
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            mode = (Path(dirpath) / name).lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise HarborTaskError(f"{Path(dirpath) / name}: only regular files and directories are imported "
                                      "(no symlinks)")


def _read_text(path: Path) -> str:
    if not path.is_file():
        raise HarborTaskError(f"{path}: missing file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise HarborTaskError(f"{path}: not UTF-8 text ({exc})") from None


def _read_task_toml(path: Path) -> dict[str, Any]:
    """The task.toml fields we read: [metadata] difficulty and category;
    [verifier] timeout_sec and env; [agent] timeout_sec; [environment] gpus,
    docker_image, cpus, memory (or memory_mb) and storage (or storage_mb),
    Harbor's defaults where absent. Not read: build_timeout_sec (we build
    nothing); allow_internet (a permission, not a need: scripts that fetch
    are found in test.sh and solve.sh instead)."""
    try:
        data = tomllib.loads(_read_text(path))
    except tomllib.TOMLDecodeError as exc:
        raise HarborTaskError(f"{path}: not valid TOML ({exc})") from None

    def table(name: str) -> dict:
        value = data.get(name, {})
        if not isinstance(value, dict):
            raise HarborTaskError(f"{path}: [{name}] must be a table")
        return value

    def number(tbl: str, name: str, default: float) -> float:
        value = table(tbl).get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise HarborTaskError(f"{path}: [{tbl}] {name} must be a positive number, got {value!r}")
        return float(value)

    metadata, environment = table("metadata"), table("environment")
    verifier_env = table("verifier").get("env", {})
    if not isinstance(verifier_env, dict) or not all(isinstance(v, str) for v in verifier_env.values()):
        raise HarborTaskError(f"{path}: [verifier] env must be a table of strings")
    difficulty = metadata.get("difficulty", "medium")
    if isinstance(difficulty, int) and not isinstance(difficulty, bool) and 0 <= difficulty <= 9:
        level = difficulty
    else:
        level = _DIFFICULTY.get(str(difficulty).lower(), _DIFFICULTY["medium"])
    reasons = []
    gpus = environment.get("gpus", 0)
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise HarborTaskError(f"{path}: [environment] gpus must be an integer, got {gpus!r}")
    if gpus > 0:
        reasons.append(f"{path}: [environment] gpus = {gpus}; our sandbox has no GPU")
    docker_image = environment.get("docker_image")
    verifier_timeout = number("verifier", "timeout_sec", DEFAULT_VERIFIER_TIMEOUT_S)
    agent_timeout = number("agent", "timeout_sec", MAX_COMMAND_TIMEOUT_S)
    memory, cpus = _size(path, environment, "memory", DEFAULT_MEMORY_BYTES), number("environment", "cpus", 1)
    adaptations = []
    if memory > _host_memory_bytes():
        reasons.append(f"{path}: [environment] memory of {memory >> 20} MiB is more than this machine has "
                       f"({_host_memory_bytes() >> 20} MiB)")
    if verifier_timeout > MAX_VERIFIER_TIMEOUT_S:
        adaptations.append(f"{path}: [verifier] timeout_sec {verifier_timeout:g} capped at {MAX_VERIFIER_TIMEOUT_S:g}")
    adaptations.append(f"{path}: [agent] timeout_sec {agent_timeout:g}: our agent gets {IMPORTED_MAX_TURNS} commands "
                       f"of at most {min(agent_timeout, MAX_COMMAND_TIMEOUT_S):g} s each")
    adaptations.append(f"{path}: [environment] cpus = {cpus:g}: the sandbox limits CPU time (timeout x cpus), "
                       "not the number of cores")
    return {
        "adaptations": adaptations,
        "memory_bytes": memory,
        "storage_bytes": _size(path, environment, "storage", DEFAULT_STORAGE_BYTES),
        "cpus": cpus,
        "asked_verifier_timeout_s": verifier_timeout,
        "difficulty": level,
        "domain": re.sub(r"[^a-z0-9_-]+", "-", str(metadata.get("category") or "harbor").lower()).strip("-") or "harbor",
        "verifier_timeout_s": min(verifier_timeout, MAX_VERIFIER_TIMEOUT_S),
        "agent_timeout_s": agent_timeout,
        "verifier_env": dict(verifier_env),
        "docker_image": docker_image if isinstance(docker_image, str) else None,
        "reasons": reasons,
    }


def _host_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _size(path: Path, environment: dict, name: str, default: int) -> int:
    """[environment] `name` ("2G", "512M", "1024K" or bytes) or `name`_mb, in bytes."""
    if f"{name}_mb" in environment:
        value = environment[f"{name}_mb"]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise HarborTaskError(f"{path}: [environment] {name}_mb must be a positive number, got {value!r}")
        return int(value * (1 << 20))
    value = environment.get(name)
    if value is None:
        return default
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.I)
    if isinstance(value, bool) or match is None or not float(match.group(1)) > 0:
        raise HarborTaskError(f"{path}: [environment] {name} must be a size like '2G' or '512M', got {value!r}")
    return int(float(match.group(1)) * (1 << (10 * " KMGT".index(match.group(2).upper() or " "))))


_HEREDOC = re.compile(r"<<(-?)\s*([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")


def _dockerfile_instructions(path: Path) -> list[tuple[int, str, str, list[str]]]:
    """(line number, INSTRUCTION, arguments, here-documents), continuation
    lines joined; the lines of a here-document (`RUN <<EOF`, `COPY <<EOF f`)
    are its body, never instructions."""
    out, pending, start = [], "", 0
    lines = _read_text(path).splitlines()
    index = 0
    while index < len(lines):
        number, raw = index + 1, lines[index]
        index += 1
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        start = start or number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text = (pending + line).strip()
        pending = ""
        if text:
            keyword, _, args = text.partition(" ")
            bodies = []
            for strip_tabs, _quote, delimiter in _HEREDOC.findall(args) if keyword.upper() in ("RUN", "COPY") else ():
                body = []
                while index < len(lines):
                    body_line = lines[index]
                    index += 1
                    if (body_line.lstrip("\t") if strip_tabs else body_line) == delimiter:
                        break
                    body.append(body_line.lstrip("\t") if strip_tabs else body_line)
                else:
                    raise HarborTaskError(f"{path}:{start}: here-document {delimiter} is never closed")
                bodies.append("\n".join(body) + "\n")
            out.append((start, keyword.upper(), args.strip(), bodies))
        start = 0
    if pending:
        raise HarborTaskError(f"{path}: ends inside a continued line")
    return out


def _parse_dockerfile(path: Path, context: Path) -> _Environment:
    env = _Environment()
    workdir = "/"
    for number, keyword, args, heredocs in _dockerfile_instructions(path):
        where = f"{path}:{number}"
        if keyword == "FROM":
            if env.base_image is not None:
                env.reasons.append(f"{where}: a multi-stage build (second FROM); our sandbox replays one stage")
            words = [w for w in args.split() if not w.startswith("--")]  # --platform=linux/amd64
            env.base_image = words[0] if words else ""
            tools = next((t for pattern, t in _BASE_IMAGE_TOOLS if pattern.search(env.base_image.lower())), None)
            if tools is None:
                env.reasons.append(f"{where}: base image {env.base_image!r} is not one whose tools we can check for")
            for tool in tools or ():
                env.binaries.setdefault(tool, f"{where} (FROM {env.base_image})")
        elif keyword == "WORKDIR":
            if "$" in args:
                env.reasons.append(f"{where}: WORKDIR {args!r} uses a variable; our sandbox replays no ARG")
            workdir = os.path.normpath(str(PurePosixPath(workdir) / args.strip().strip('"')))
        elif keyword in ("COPY", "ADD") and heredocs:
            _parse_copy_heredoc(env, where, args, heredocs, workdir)
        elif keyword in ("COPY", "ADD"):
            _parse_copy(env, where, keyword, args, workdir, context)
        elif keyword == "RUN" and heredocs:
            env.reasons.append(f"{where}: RUN with a here-document is a build step our sandbox cannot replay")
        elif keyword == "RUN":
            _parse_run(env, where, args, workdir, context)
        elif keyword == "ENV":
            _parse_env(env, where, args)
        elif keyword not in _IGNORED_INSTRUCTIONS:
            env.reasons.append(f"{where}: {keyword} is not a Dockerfile instruction we replay")
    if env.base_image is None:
        env.reasons.append(f"{path}: no FROM")
    if workdir == "/":
        env.reasons.append(f"{path}: no WORKDIR; the task's working directory is unknown")
    elif not _safe_workdir(workdir):
        env.reasons.append(f"{path}: WORKDIR {workdir} is a system path or one of our sandbox's mount points")
    else:
        env.workdir = workdir
        for sources, target in env.copies:
            if not _within(target, workdir):
                env.reasons.append(f"{path}: COPY {' '.join(sources)} to {target}, outside the WORKDIR {workdir}; "
                                   "our sandbox provides only the WORKDIR")
        for target in env.inline_files:
            if not _within(target, workdir):
                env.reasons.append(f"{path}: COPY of a here-document to {target}, outside the WORKDIR {workdir}; "
                                   "our sandbox provides only the WORKDIR")
    return env


def _parse_env(env: _Environment, where: str, args: str) -> None:
    """ENV NAME=value ... (or the legacy ENV NAME value): set for the oracle
    and the tests, as the image would; $NAME and ${NAME} expand to what was
    set before (nothing for a name not set)."""
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", args):
        pairs = [part.split("=", 1) for part in _split(args, where, env)]
    else:
        name, _, value = args.partition(" ")
        pairs = [[name, value.strip()]]
    for pair in pairs:
        if len(pair) != 2 or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", pair[0]):
            env.reasons.append(f"{where}: cannot parse ENV {args!r}")
            return
        name, value = pair
        if name in _ENV_IGNORED:
            continue
        if name in ("PATH", "HOME", "LD_PRELOAD", "LD_LIBRARY_PATH") or name.startswith("UV_"):
            env.reasons.append(f"{where}: ENV {name} changes what the sandbox's own tools find; not replayed")
            continue
        value = re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env.variables.get(m.group(1), ""), value)
        env.variables[name] = value


def _parse_copy_heredoc(env: _Environment, where: str, args: str, heredocs: list[str], workdir: str) -> None:
    words = [w for w in args.split() if not w.startswith("--") and not w.startswith("<<")]
    if len(heredocs) != 1 or len(words) != 1:
        env.reasons.append(f"{where}: COPY of several here-documents is not replayed")
        return
    env.inline_files[str(PurePosixPath(workdir) / words[0])] = heredocs[0]


def _split(args: str, where: str, env: _Environment) -> list[str]:
    try:
        return shlex.split(args, comments=False)
    except ValueError as exc:
        env.reasons.append(f"{where}: cannot parse {args!r} ({exc})")
        return []


def _parse_copy(env: _Environment, where: str, keyword: str, args: str, workdir: str, context: Path) -> None:
    if args.startswith("["):
        try:
            parts = json.loads(args)
        except json.JSONDecodeError:
            env.reasons.append(f"{where}: cannot parse {keyword} {args}")
            return
    else:
        parts = _split(args, where, env)
    flags = [p for p in parts if p.startswith("--")]
    parts = [p for p in parts if not p.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        env.reasons.append(f"{where}: {keyword} --from another stage; our sandbox replays one stage")
        return
    if len(parts) < 2:
        env.reasons.append(f"{where}: {keyword} needs a source and a target")
        return
    sources, target = parts[:-1], parts[-1]
    for source in sources:
        if keyword == "ADD" and re.search(r"\.(tar|tgz|tbz2|txz)(\.\w+)?$", source):
            env.reasons.append(f"{where}: ADD {source} unpacks an archive, which we do not replay")
            return
        if re.match(r"[a-z]+://", source):
            env.reasons.append(f"{where}: {keyword} from {source} needs the network")
            return
        resolved = os.path.normpath(source)
        if resolved.startswith("..") or os.path.isabs(resolved):
            env.reasons.append(f"{where}: {keyword} source {source!r} is outside the build context")
            return
        if not _context_matches(context, source):
            env.reasons.append(f"{where}: {keyword} source {source!r} is not in {context}")
            return
    absolute = str(PurePosixPath(workdir) / target)
    if target.endswith("/") or target in (".", "./"):
        absolute += "/"
    env.copies.append((sources, absolute))


def _context_matches(context: Path, source: str) -> list[Path]:
    """What a COPY source names in the build context (sources are checked to stay inside it)."""
    resolved = os.path.normpath(source)
    if resolved == ".":
        return [context]
    if any(c in resolved for c in "*?["):
        return sorted(context.glob(resolved))
    return [context / resolved] if (context / resolved).exists() else []


_SEPARATORS = {"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"}
_REDIRECTION = re.compile(r"^\d*(>>?|<<?<?|&>>?)(&?\d+|-)?$")


def _shell_segments(text: str) -> list[list[str]]:
    """The simple commands of a shell line, each as its words: split at
    && || ; | & ( ) outside quotes, redirections dropped. ValueError for
    unbalanced quotes."""
    lexer = shlex.shlex(re.sub(r"\d*>&\d+", " ", text), posix=True, punctuation_chars=";&|()")
    lexer.whitespace_split = True
    segments, words, skip = [], [], False
    for token in lexer:
        if skip:
            skip = False
        elif token in _SEPARATORS:
            segments.append(words)
            words = []
        elif _REDIRECTION.match(token):
            skip = True  # `> file`: the operator alone, its target next
        elif re.match(r"^\d*(>>?|<)", token):
            continue  # `>/dev/null`: operator and target in one word
        else:
            words.append(token)
    segments.append(words)
    return [w for w in segments if w]


def _parse_run(env: _Environment, where: str, args: str, workdir: str, context: Path) -> None:
    if args.startswith("["):
        env.reasons.append(f"{where}: RUN {args[:80]} is a build step our sandbox cannot replay")
        return
    try:
        segments = _shell_segments(args)
    except ValueError as exc:
        env.reasons.append(f"{where}: cannot parse the shell of RUN {args[:80]!r} ({exc})")
        return
    for words in segments:
        shown = shlex.join(words)[:120]
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # DEBIAN_FRONTEND=noninteractive apt-get ...
        if words[:1] in (["sudo"], ["env"]):
            words = [w for w in words[1:] if not w.startswith("-")]
        if not words:
            continue
        command, rest = words[0], words[1:]
        if command in ("python", "python3") and rest[:2] == ["-m", "pip"]:
            command, rest = "pip", rest[2:]
        if command == "uv" and rest[:1] == ["pip"]:
            command, rest = "pip", rest[1:]
        operands = [w for w in rest if not w.startswith("-")]
        if command in ("apt-get", "apt"):
            if operands[:1] == ["install"]:
                for package in operands[1:]:
                    _need_apt(env, package, f"{where} (apt-get install {package})")
            elif operands[:1] not in (["update"], ["clean"], ["autoremove"], ["autoclean"], []):
                env.reasons.append(f"{where}: `{shown}` is a build step our sandbox cannot replay")
        elif command in ("pip", "pip3"):
            if operands[:1] != ["install"]:
                env.reasons.append(f"{where}: `{shown}` is a build step our sandbox cannot replay")
                continue
            _pip_packages(env, where, rest[1:] if rest[:1] == ["install"] else rest, context)
        elif command == "mkdir":
            env.directories += [str(PurePosixPath(workdir) / d) for d in operands]
        elif command == "ln" and len(operands) == 2 and "-s" in "".join(w for w in rest if w.startswith("-")):
            _parse_symlink(env, where, operands, workdir, shown)
        elif command == "rm" and all(o.startswith(("/var/lib/apt", "/var/cache", "/root/.cache", "/tmp")) for o in operands):
            continue
        elif command in ("true", "chmod", "chown", "cd", "echo", "apt-mark"):
            continue  # file modes come with the copied files; a cd does not outlive its RUN
        else:
            env.reasons.append(f"{where}: `{shown}` is a build step our sandbox cannot replay")


_BIN_DIRS = ("/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/usr/local/sbin", "/sbin")


def _parse_symlink(env: _Environment, where: str, operands: list[str], workdir: str, shown: str) -> None:
    """`ln -s python3 python` in a directory of commands: the image then has
    the command `python`, which our sandbox must have itself (we write nowhere
    but the workspace)."""
    link = os.path.normpath(str(PurePosixPath(workdir) / operands[1]))
    if os.path.dirname(link) in _BIN_DIRS:
        env.binaries.setdefault(os.path.basename(link), f"{where} ({shown})")
    else:
        env.reasons.append(f"{where}: `{shown}` makes a symbolic link; the workspace we import holds regular files only")


def _pip_packages(env: _Environment, where: str, words: list[str], context: Path) -> None:
    skip_next = False
    for i, word in enumerate(words):
        if skip_next:
            skip_next = False
            continue
        if word in ("-r", "--requirement") and i + 1 < len(words):
            skip_next = True
            requirements = context / words[i + 1]
            if not requirements.is_file():
                env.reasons.append(f"{where}: pip requirements file {words[i + 1]!r} is not in {context}")
                continue
            for line in requirements.read_text(encoding="utf-8").splitlines():
                line = line.split("#")[0].strip()
                if line and not line.startswith("-"):
                    _need_pip(env, line, f"{requirements} (via {where})")
        elif word in ("-i", "--index-url", "--extra-index-url", "-c", "--constraint", "-f", "--find-links",
                      "--target", "-t", "--prefix", "--root"):
            skip_next = True
        elif not word.startswith("-"):
            _need_pip(env, word, f"{where} (pip install {word})")


def _distribution_name(requirement: str) -> str | None:
    """The normalized distribution name of a requirement (PEP 503), or None
    for one that is not a plain name (a path, a URL, a VCS link)."""
    if "/" in requirement or requirement.startswith(".") or "://" in requirement or "@" in requirement:
        return None
    name = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    return re.sub(r"[-_.]+", "-", name.group(0)).lower() if name else None


def _need_pip(env: _Environment, requirement: str, why: str) -> None:
    """A pip requirement: met when a distribution of that name is installed
    for the sandbox's python3 (checked by its metadata, whatever modules it provides)."""
    name = _distribution_name(requirement)
    if name is None:
        env.reasons.append(f"{why}: {requirement!r} is not a package name we can check for")
        return
    env.pip.setdefault(name, (requirement, why))


def _need_apt(env: _Environment, package: str, why: str) -> None:
    """An apt package: met when the package (or one that provides it) is
    installed where the sandbox's /usr comes from (dpkg's own record)."""
    name = re.split(r"[=:]", package, maxsplit=1)[0].lower()
    if name in _APT_NOOP:
        return
    if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]+", name):
        env.reasons.append(f"{why}: {package!r} is not an apt package name we can check for")
        return
    env.apt.setdefault(name, why)


# Run by the sandbox's python3: what of `need` the sandbox has. apt packages
# are looked up in dpkg's record of the system the sandbox's /usr comes from
# (a package, or one that Provides it, with Status "install ok installed");
# pip distributions in python3's installed metadata, by normalized name.
_PROBE = r"""
import importlib.metadata, json, os, re, shutil, sys
need = json.loads(sys.argv[1])
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
report = {"python": "%d.%d.%d" % sys.version_info[:3], "binaries": {}, "apt": {}, "pip": {}, "dpkg": None}
for b in need["binaries"]:
    report["binaries"][b] = shutil.which(b)
installed = {}
for status in need["dpkg_status"]:
    if not os.path.isfile(status):
        continue
    report["dpkg"] = status
    with open(status, encoding="utf-8", errors="replace") as f:
        for paragraph in f.read().split("\n\n"):
            fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", paragraph, re.M))
            if fields.get("Status", "").split()[-1:] != ["installed"] or "Package" not in fields:
                continue
            installed.setdefault(fields["Package"], fields.get("Version", ""))
            for provided in fields.get("Provides", "").split(","):
                name = provided.strip().split(" ")[0]
                if name:
                    installed.setdefault(name, "(provided by %s)" % fields["Package"])
    break
for p in need["apt"]:
    report["apt"][p] = installed.get(p)
dists = {}
for d in importlib.metadata.distributions():
    if d.metadata["Name"]:
        dists.setdefault(norm(d.metadata["Name"]), d.version)
for p in need["pip"]:
    report["pip"][p] = dists.get(p)
print(json.dumps(report))
"""
DPKG_MOUNT = "/clawloop-dpkg"


@dataclass
class _Script:
    """tests/test.sh as our sandbox runs it, and what changed on the way."""

    text: str
    uses_toolchain: bool = False
    uses_uv: bool = False  # uv or uvx: they need an interpreter (-p), which offline they cannot download
    # In a task's image: requirements outside the wheelhouse, to fetch from PyPI before the tests (requirement -> line).
    fetch: dict[str, str] = field(default_factory=dict)
    adaptations: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    apt: dict[str, str] = field(default_factory=dict)  # apt package -> the line asking for it


# The standard Harbor test.sh installs its toolchain first: lines that only
# fetch what the offline toolchain (toolchain.py) or the sandbox already
# provides become no-ops (`true  # clawloop offline: <the line>`):
#  - `apt-get update`, `apt-get install PKG...` (each PKG must be installed in
#    the sandbox: probed like the Dockerfile's);
#  - uv's installer (`curl|wget ... astral.sh/uv/... | sh`) and sourcing the
#    env file it writes (`source $HOME/.local/bin/env`): uv and uvx are on PATH.
# uv and uvx run offline against the wheelhouse: each `-w`/`--with`
# requirement (and `uv pip install` operand) must be in it, and a `-p`/
# `--python` version other than the sandbox's python3 is replaced by it.
# Any other line that fetches (curl, wget, pip install, git clone, npm) needs
# the network, which the sandbox does not have.
_UV_INSTALLER = re.compile(r"\b(curl|wget)\b[^|]*astral\.sh/uv/(?:(\d[\w.]*)/)?install\.sh[^|]*\|\s*(env\s+\S+\s+)?(ba)?sh\b")
_UV_ENV_FILE = re.compile(r"^(source|\.)\s+(\"?\$(HOME|\{HOME\})\"?|~)/\.(local/bin|cargo)/env\"?$")
_UV_PYTHON = re.compile(r"(?<![\w-])(-p|--python)(\s+|=)(\d+\.\d+)(?![\w.])")


_PIP_INSTALL = re.compile(r"(?<![\w-])(pip3?|python3?\s+-m\s+pip)\s+install(?![\w-])")


IMAGE_WHEELS = "/harbor-wheels"  # a task image's tests: the wheelhouse plus what was fetched for them


def _adapt_test_sh(text: str, path: Path, toolchain: Toolchain | None, python: str | None,
                   in_image: bool = False) -> _Script:
    """`in_image`: the tests run in the task's own image (docker_run),
    whose root filesystem pip can write and whose wheelhouse the harness
    fills before the tests: a `pip install` line installs, `--no-index`,
    from IMAGE_WHEELS, and a uv, uvx or pip requirement outside the
    offline wheelhouse is to be fetched (`_Script.fetch`) rather than a
    reason. In our sandbox (a read-only system Python, the wheelhouse as
    built) such a pip line needs the network and such a requirement is
    not runnable."""
    script = _Script(text)
    out, lines, index = [], text.splitlines(), 0
    have = ".".join(python.split(".")[:2]) if python else None
    while index < len(lines):
        first = index
        while lines[index].rstrip().endswith("\\") and index + 1 < len(lines):
            index += 1
        physical = lines[first:index + 1]
        index += 1
        logical = " ".join(line.rstrip().removesuffix("\\") for line in physical).strip()
        where = f"{path}:{first + 1}"
        if not logical or logical.startswith("#"):
            out += physical
            continue
        without_installer = _UV_INSTALLER.sub(" true ", logical)
        installer = without_installer != logical
        try:
            segments = _shell_segments(without_installer)
        except ValueError:
            segments = None
        kinds = []
        for words in segments or []:
            while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
                words = words[1:]
            if words[:1] == ["sudo"]:
                words = words[1:]
            operands = [w for w in words[1:] if not w.startswith("-")]
            if not words or words == ["true"]:
                kinds.append("noop")
            elif words[0] in ("apt-get", "apt") and operands[:1] == ["update"]:
                kinds.append("noop")
            elif words[0] in ("apt-get", "apt") and operands[:1] == ["install"]:
                for package in operands[1:]:
                    name = re.split(r"[=:]", package, maxsplit=1)[0].lower()
                    if name not in _APT_NOOP:
                        script.apt.setdefault(name, f"{where} (apt-get install {package})")
                kinds.append("noop")
            elif _UV_ENV_FILE.match(" ".join(words)):
                kinds.append("noop")
            elif words[0] in ("uv", "uvx"):
                kinds.append("uv")
                _uv_needs(script, words, where, toolchain, fetch=in_image)
            elif in_image and _pip_install_words(words) is not None:
                kinds.append("pip")
                _pip_needs(script, _pip_install_words(words), where, toolchain)
            else:
                kinds.append("other")
        if segments is not None and kinds and all(k == "noop" for k in kinds):
            if installer:
                version = _UV_INSTALLER.search(logical).group(2)
                script.adaptations.append(
                    f"{where}: uv's installer not run; the offline toolchain's uv "
                    f"{toolchain.uv_version if toolchain else '(not built)'} is on PATH"
                    + (f" (the script asked for {version})" if version and toolchain and version != toolchain.uv_version else ""))
            else:
                script.adaptations.append(f"{where}: `{logical[:100]}` not run: offline, and what it installs is in our sandbox")
            out.append(f"true  # clawloop offline: {logical}")
            out += [""] * (len(physical) - 1)  # line numbers kept
            continue
        if "pip" in kinds and set(kinds) <= {"pip", "noop"} and not installer:
            rewritten = _PIP_INSTALL.sub(lambda m: f"{m.group(0)} --no-index --find-links {IMAGE_WHEELS}", logical)
            script.adaptations.append(f"{where}: `{logical[:100]}` installs from the tests' offline wheelhouse")
            out.append(rewritten)
            out += [""] * (len(physical) - 1)  # line numbers kept
            continue
        if "noop" in kinds or installer:
            script.reasons.append(f"{where}: `{logical[:120]}` installs from the network together with other commands; "
                                  "not adapted")
        elif "uv" in kinds:
            for k, line in enumerate(physical):
                match = _UV_PYTHON.search(line)
                if match and have and match.group(3) != have:
                    script.adaptations.append(f"{where}: Python {match.group(3)} asked for, our sandbox's python3 "
                                              f"{python} used")
                    line = _UV_PYTHON.sub(lambda m: f"{m.group(1)}{m.group(2)}{have}", line)
                physical[k] = line
        elif _NETWORK_USE.search(logical):
            script.reasons.append(f"{where}: `{logical[:120]}` needs the network, which our sandbox does not have")
        out += physical
    script.text = "\n".join(out) + ("\n" if text.endswith("\n") else "")
    return script


def _pip_install_words(words: list[str]) -> list[str] | None:
    """The arguments after `install` of a pip install command (pip, pip3,
    python -m pip), else None."""
    if words[:1] in (["pip"], ["pip3"]) and words[1:2] == ["install"]:
        return words[2:]
    if words[:1] in (["python"], ["python3"]) and words[1:4] == ["-m", "pip", "install"]:
        return words[4:]
    return None


# pip options that take no value and change nothing about what is installed offline.
_PIP_PLAIN_FLAGS = {"--break-system-packages", "-q", "--quiet", "-U", "--upgrade", "--no-cache-dir",
                    "--disable-pip-version-check", "--root-user-action=ignore", "--no-warn-script-location"}


def _pip_needs(script: _Script, arguments: list[str], where: str, toolchain: Toolchain | None) -> None:
    """What a pip install needs from the wheelhouse: each requirement there."""
    script.uses_toolchain = True
    if toolchain is None:
        script.reasons.append(f"{where}: `pip install {shlex.join(arguments)[:100]}` needs the offline wheelhouse, "
                              "which is not built here: run `make setup`")
        return
    for word in arguments:
        if word.startswith("-"):
            if word not in _PIP_PLAIN_FLAGS:
                script.reasons.append(f"{where}: pip install option {word!r} is not one we can run offline; "
                                      "the line needs the network")
            continue
        name = _distribution_name(word)
        pinned = re.search(r"==\s*([A-Za-z0-9.+!-]+)$", word)
        if name is None:
            script.reasons.append(f"{where}: pip requirement {word!r} is not a package name; it needs the network")
        elif not toolchain.has(name, pinned.group(1) if pinned else None):
            script.fetch.setdefault(word, where)


def _uv_needs(script: _Script, words: list[str], where: str, toolchain: Toolchain | None, fetch: bool = False) -> None:
    """What a uv or uvx command needs from the wheelhouse."""
    script.uses_toolchain = script.uses_uv = True
    if toolchain is None:
        script.reasons.append(f"{where}: `{shlex.join(words)[:100]}` needs uv and its wheelhouse, which are not "
                              f"built here: run `make setup`")
        return
    requirements = []
    if words[0] == "uvx" or words[1:3] == ["tool", "run"] or words[1:2] == ["run"]:
        requirements += [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-w", "--with")]
        requirements += [w.split("=", 1)[1] for w in words if w.startswith("--with=")]
        if words[0] == "uvx":
            tool = next((w for i, w in enumerate(words[1:], 1)
                         if not w.startswith("-") and words[i - 1] not in ("-w", "--with", "-p", "--python", "--from")), None)
            source = next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "--from"), tool)
            if source:
                requirements.append(source)
    elif words[1:3] == ["pip", "install"]:
        requirements += [w for w in words[3:] if not w.startswith("-")]
    elif words[1:2] in (["venv"], ["--version"], ["pip"]):
        pass
    else:
        script.reasons.append(f"{where}: `{shlex.join(words)[:100]}` is a uv command we cannot check offline")
    for requirement in requirements:
        name = _distribution_name(requirement)
        pinned = re.search(r"==\s*([A-Za-z0-9.+!-]+)$", requirement)
        if name is None:
            script.reasons.append(f"{where}: uv requirement {requirement!r} is not a package name; it needs the network")
        elif fetch and not toolchain.has(name, pinned.group(1) if pinned else None):
            script.fetch.setdefault(requirement, where)
        elif not toolchain.has(name, pinned.group(1) if pinned else None):
            have = toolchain.wheels.get(name)
            script.reasons.append(f"{where}: uv requirement {requirement!r} is not in the offline wheelhouse"
                                  + (f" (it holds {name} {', '.join(have)})" if have else ""))


def _probe_sandbox(sandbox: Sandbox, env: _Environment, dockerfile: Path) -> dict:
    """Look for every command, apt package and pip distribution the
    Dockerfile asks for inside the sandbox the task will run in (its python3,
    its PATH; on bubblewrap, the host's dpkg record, since the sandbox shares
    the host's /usr)."""
    need = {"binaries": sorted(env.binaries), "apt": sorted(env.apt), "pip": sorted(env.pip),
            "dpkg_status": [f"{DPKG_MOUNT}/status", "/var/lib/dpkg/status"]}
    mounts = []
    if isinstance(sandbox, BubblewrapSandbox) and Path("/var/lib/dpkg/status").is_file():
        mounts.append(Mount(Path("/var/lib/dpkg"), DPKG_MOUNT))
    with tempfile.TemporaryDirectory(prefix="clawloop-harbor-probe-") as scratch:
        os.chmod(scratch, 0o755)
        outcome = sandbox.run(["python3", "-I", "-c", _PROBE, json.dumps(need)],
                              [Mount(Path(scratch), "/workspace"), *mounts],
                              limits=SandboxLimits(wall_seconds=30.0, cpu_seconds=20))
    if outcome.exit_code != 0:
        tail = outcome.output.strip().splitlines()[-1:] or ["no output"]
        raise SandboxError(f"probing the sandbox for {dockerfile} failed (exit {outcome.exit_code}): {tail[0][:300]}")
    return json.loads(outcome.output.strip().splitlines()[-1])


def _judge_probe(env: _Environment, probe: dict) -> tuple[list[str], list[str]]:
    """(reasons the task cannot run here, adaptations) from the probe."""
    reasons, adaptations = [], []
    for name, path in probe["binaries"].items():
        if path is None:
            reasons.append(f"{env.binaries[name]}: our sandbox lacks the command {name!r}")
    for name, version in probe["apt"].items():
        if version is None and probe["dpkg"] is None:
            reasons.append(f"{env.apt[name]}: our sandbox has no dpkg record to check the apt package {name!r} against")
        elif version is None:
            reasons.append(f"{env.apt[name]}: the apt package {name!r} is not installed in our sandbox")
    for name, version in probe["pip"].items():
        requirement, why = env.pip[name]
        if version is None:
            reasons.append(f"{why}: our sandbox's python3 lacks the distribution {name!r}")
            continue
        pinned = re.search(r"==\s*([A-Za-z0-9.+!*-]+)", requirement)
        if pinned and pinned.group(1) != version:
            adaptations.append(f"{why}: {name} {pinned.group(1)} pinned, {version} installed in our sandbox")
    wanted = re.search(r"python[:-](\d+\.\d+)", (env.base_image or "").lower())
    have = ".".join(probe["python"].split(".")[:2])
    if wanted and wanted.group(1) != have:
        adaptations.append(f"FROM {env.base_image}: Python {wanted.group(1)} asked for, our sandbox's python3 is "
                           f"{probe['python']}")
    return reasons, adaptations


def _safe_workdir(path: str) -> bool:
    parts = PurePosixPath(os.path.normpath(path)).parts
    return (len(parts) >= 2 and parts[0] == "/" and parts[1] not in _RESERVED_ROOTS
            and all(re.fullmatch(r"[A-Za-z0-9._-]+", p) and p not in (".", "..") for p in parts[1:]))


def _within(path: str, root: str) -> bool:
    norm = os.path.normpath(path)
    return norm == root or norm.startswith(root.rstrip("/") + "/")


def _to_workspace(text: str, workdir: str) -> str:
    """The WORKDIR path, where it stands as a path, rewritten to /workspace."""
    return re.sub(r"(?<![\w./-])" + re.escape(workdir) + r"(?![\w.-])", "/workspace", text)


def _copy_into(source: Path, target: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _write_bundle(staging: Path, src: Path, task_id: str, instruction: str, config: dict, env: _Environment,
                  solve: str, script: _Script, toolchain: Toolchain | None) -> None:
    workdir = env.workdir
    workspace = staging / "environment"
    workspace.mkdir()
    context = src / "environment"
    # The Dockerfile's COPYs replayed in order: a directory's contents land in
    # the target; a file lands at the target, or in it when it ends in "/".
    for sources, target in env.copies:
        matches = [m for s in sources for m in _context_matches(context, s)]
        rel = os.path.relpath(os.path.normpath(target), workdir)
        into = workspace if rel == "." else workspace / rel
        for match in matches:
            if match.is_dir():
                _copy_into(match, into)
            elif target.endswith("/") or len(matches) > 1 or into.is_dir():
                _copy_into(match, into / match.name)
            else:
                _copy_into(match, into)
    for directory in env.directories:
        if _within(directory, workdir):
            (workspace / os.path.relpath(directory, workdir)).mkdir(parents=True, exist_ok=True)
    for target, text in env.inline_files.items():
        file = workspace / os.path.relpath(target, workdir)
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(text, encoding="utf-8")
    added_contract = not (workspace / "CONTRACT.md").exists()
    if added_contract:
        # Our bundle layout requires it; the verifier hides it again (see harbor_verifier_mounts).
        (workspace / "CONTRACT.md").write_text(
            f"# {task_id}\n\nImported Harbor task: the deliverable is what the instruction asks for, in /workspace "
            f"(the task's {workdir}). Its own tests decide the reward.\n", encoding="utf-8")

    (staging / "instruction.md").write_text(_to_workspace(instruction, workdir), encoding="utf-8")
    (staging / "solution").mkdir()
    (staging / "solution" / "solve.sh").write_text(f"cd /workspace\n{_to_workspace(solve, workdir)}", encoding="utf-8")
    shutil.copytree(src / "tests", staging / "tests")
    (staging / "tests" / "test.sh").write_text(script.text, encoding="utf-8")  # adapted: see _adapt_test_sh
    (staging / "tests" / "verify.py").write_text(_WRAPPER, encoding="utf-8")
    (staging / "answer").mkdir()
    # The tests' environment: the Dockerfile's ENV, then task.toml's
    # [verifier] env, then (when test.sh runs uv) the offline toolchain's.
    test_env = {**env.variables, **config["verifier_env"]}
    if script.uses_toolchain:
        test_env.update(TOOLCHAIN_ENV, PATH=TOOLCHAIN_PATH)
    check = {"type": CHECK_TYPE, "name": "harbor_reward", "workdir": workdir, "timeout_s": config["verifier_timeout_s"],
             "env": test_env, "added_contract": added_contract, "toolchain": script.uses_toolchain,
             "memory_bytes": config["memory_bytes"], "cpus": config["cpus"],
             "workspace_bytes": min(config["storage_bytes"], MAX_WORKSPACE_BYTES)}
    (staging / "answer" / "answer.json").write_text(json.dumps({"key": None, "checks": [check]}, indent=2) + "\n")
    meta = {"track": "terminal", "format": "files", "contract": {"rules": []}, "source": "harbor",
            "harbor_source": str(src), "workdir": workdir,
            "oracle_env": {name: _to_workspace(value, workdir) for name, value in env.variables.items()}}
    (staging / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    write_task_toml(
        staging / "task.toml", task_id=task_id, capability=HARBOR_CAPABILITY, domain=config["domain"],
        difficulty=config["difficulty"], track="terminal", format="files", generator_id="harbor-import", seed=0,
        round_key="imported", max_turns=IMPORTED_MAX_TURNS,
        command_timeout_s=min(config["agent_timeout_s"], MAX_COMMAND_TIMEOUT_S),
    )
    # The sandbox uid reads the bundle through read-only mounts: whatever the
    # source's modes, every file is readable and every directory searchable.
    os.chmod(staging, 0o755)
    for dirpath, dirnames, filenames in os.walk(staging):
        for name in dirnames:
            os.chmod(Path(dirpath) / name, 0o755)
        for name in filenames:
            file = Path(dirpath) / name
            os.chmod(file, (file.stat().st_mode & 0o777) | 0o644)


@functools.lru_cache(maxsize=1024)
def _memory_of(answer_path: str, mtime_ns: int) -> int | None:
    check = next((c for c in json.loads(Path(answer_path).read_text(encoding="utf-8")).get("checks") or []
                  if c.get("type") == CHECK_TYPE), None)
    return int(check["memory_bytes"]) if check and "memory_bytes" in check else None


def task_memory_bytes(bundle: TaskBundle, default: int) -> int:
    """The memory an agent's command may use on `bundle`: an imported
    Harbor task's own (task.toml `memory`), else `default`."""
    from clawloop_assets.harbor.image_task import ImageTaskBundle  # it builds on this module

    if isinstance(bundle, ImageTaskBundle):
        return bundle.memory_bytes
    if bundle.capability != HARBOR_CAPABILITY:
        return default
    memory = _memory_of(str(bundle.answer_path), bundle.answer_path.stat().st_mtime_ns)
    return memory or default


def harbor_limits(check: dict, wall_seconds: float) -> SandboxLimits:
    """The sandbox limits of a Harbor task's oracle and tests: its task.toml
    memory, CPU time for `wall_seconds` on each of its cpus, files up to its
    workspace size. bubblewrap enforces memory per process (address space)
    and, run as root, for the whole run (memory cgroup); no backend here
    limits the number of cores."""
    return SandboxLimits(wall_seconds=wall_seconds, cpu_seconds=max(1, int(wall_seconds * check["cpus"])),
                         memory_bytes=int(check["memory_bytes"]), file_size_bytes=int(check["workspace_bytes"]),
                         max_processes=HARBOR_MAX_PROCESSES, tmp_bytes=HARBOR_TMP_BYTES)


def validate_harbor_bundle(sandbox: Sandbox, bundle: TaskBundle, oracle_timeout_s: float) -> str | None:
    """Run an imported task here: its oracle (solution/solve.sh, in a fresh
    copy of the workspace) must pass its tests and the untouched workspace
    must fail them. None when it does; else the reason, one line."""
    check = harbor_check(bundle)
    meta = json.loads((bundle.root / "meta.json").read_text(encoding="utf-8"))
    source = meta.get("harbor_source", str(bundle.root))
    solve = f"{source}/solution/solve.sh"
    with tempfile.TemporaryDirectory(prefix="clawloop-harbor-oracle-") as tmp:
        workspace = Path(tmp) / "workspace"
        os.chmod(tmp, 0o755)
        with disk_quota(workspace, int(check["workspace_bytes"]), max_files=200_000):
            shutil.copytree(bundle.environment_dir, workspace, dirs_exist_ok=True)
            os.chmod(workspace, 0o755)
            outcome = sandbox.run(["bash", "/solution/solve.sh"],
                                  [Mount(workspace, "/workspace", writable=True), Mount(bundle.solution_path.parent, "/solution")],
                                  limits=harbor_limits(check, oracle_timeout_s), env=meta.get("oracle_env") or {})
        last = (outcome.output.strip().splitlines() or ["no output"])[-1][:200]
        if outcome.timed_out:
            return f"{solve}: the oracle did not finish within {oracle_timeout_s:g} s here (last output: {last})"
        if outcome.exit_code != 0:
            return f"{solve}: the oracle exited with code {outcome.exit_code} here (last output: {last})"
        solved = run_verifier_for_import(sandbox, bundle, workspace)
    tests = f"{source}/tests/test.sh"
    if solved.status != "scored":
        return f"{tests}: verifier error on the oracle's workspace: {solved.error}"
    if solved.reward != 1.0:
        detail = "; ".join(c.get("detail", "") for c in solved.checks)[:300]
        return f"{tests}: the oracle's workspace fails the task's own tests: {detail}"
    untouched = run_verifier_for_import(sandbox, bundle, bundle.environment_dir)
    if untouched.status != "scored":
        return f"{tests}: verifier error on the untouched workspace: {untouched.error}"
    if untouched.reward != 0.0:
        return f"{tests}: the untouched workspace already passes the task's own tests"
    return None


def run_verifier_for_import(sandbox: Sandbox, bundle: TaskBundle, workspace: Path):
    from clawloop_assets.harness.verification import run_verifier  # verification imports this module

    return run_verifier(sandbox, bundle, workspace)


# ---------------------------------------------------------------- verifier side


def harbor_check(bundle: TaskBundle) -> dict | None:
    """The Harbor check of an imported bundle (None for our own tasks), validated."""
    if bundle.capability != HARBOR_CAPABILITY:
        return None
    checks = bundle.answer().get("checks") or []
    check = next((c for c in checks if c.get("type") == CHECK_TYPE), None)
    if check is None:
        return None
    timeout = check.get("timeout_s")
    if not isinstance(check.get("workdir"), str) or not _safe_workdir(check["workdir"]):
        raise TaskBundleError(f"{bundle.answer_path}: harbor check 'workdir' must be a plain absolute path "
                              f"outside the system directories, got {check.get('workdir')!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_VERIFIER_TIMEOUT_S:
        raise TaskBundleError(f"{bundle.answer_path}: harbor check 'timeout_s' must be in (0, {MAX_VERIFIER_TIMEOUT_S}]")
    check = {"memory_bytes": DEFAULT_MEMORY_BYTES, "cpus": 1, "workspace_bytes": 64 << 20, **check}  # older imports
    for name in ("memory_bytes", "cpus", "workspace_bytes"):
        value = check[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise TaskBundleError(f"{bundle.answer_path}: harbor check {name!r} must be a positive number, got {value!r}")
    return check


def harbor_verifier_mounts(bundle: TaskBundle, final_workspace: Path,
                           scratch: Path) -> tuple[list[Mount], SandboxLimits] | None:
    """For an imported Harbor bundle: the extra mounts its test.sh expects (a
    writable copy of the final workspace at the WORKDIR, so what the tests
    write never reaches the rollout's workspace, a writable /logs/verifier,
    and the offline toolchain, read-only, when test.sh uses uv) and the
    limits the verifier runs under. None for our own tasks."""
    check = harbor_check(bundle)
    if check is None:
        return None
    app, logs = scratch / "harbor-workdir", scratch / "harbor-logs"
    # `final_workspace` is already run_verifier's bounded copy: this one cannot go over its limits.
    copy_tree_safely(final_workspace, app, owner=(VERIFIER_UID, VERIFIER_UID))
    contract = app / "CONTRACT.md"
    if check.get("added_contract") and contract.is_file() and not contract.is_symlink():
        if contract.read_bytes() == bundle.contract_path.read_bytes():
            contract.unlink()  # ours, not the task's: its tests never saw it
    # Made here, after the agent's last command, and never reused: mkdir
    # fails on anything already there.
    logs.mkdir()
    (logs / "verifier").mkdir()
    for directory in (app, logs, logs / "verifier"):
        os.chmod(directory, 0o755)
    # /logs mounted as well: bubblewrap would create it root-only (0700),
    # hiding the writable /logs/verifier from the sandbox uid.
    mounts = [Mount(app, check["workdir"], writable=True), Mount(logs, str(PurePosixPath(REWARD_DIR).parent)),
              Mount(logs / "verifier", REWARD_DIR, writable=True)]
    if check.get("toolchain"):
        toolchain = load_toolchain()
        if toolchain is None:  # the harness's own setup is missing: an error, never a score
            raise TaskBundleError(f"{bundle.answer_path}: its tests need the Harbor toolchain (uv and its wheelhouse), "
                                  "which is not built here: run `make setup`")
        mounts.append(Mount(toolchain.root, TOOLCHAIN_MOUNT))
    return mounts, harbor_limits(check, float(check["timeout_s"]) + 10.0)


# The bundle's tests/verify.py: stdlib only, run by run_verifier as
# `python3 -I /tests/verify.py --workspace ... --answer ... --result ...`.
_WRAPPER = r'''#!/usr/bin/env python3
"""ClawLoop's verifier for an imported Harbor task: runs the task's own
tests/test.sh in its WORKDIR and turns /logs/verifier/reward.txt (or
reward.json) into our result. Our rewards are 0 or 1: a partial reward
counts as not passed, and its value is kept in the check's detail.

test.sh may run code the agent wrote, as this wrapper's uid: a reward
counts only when test.sh exits 0 within its timeout and the reward file is
a plain file this uid wrote, in the fresh reward directory as it was left.
Whatever else happens once test.sh has started (killed, timed out, a
reward file that is a link, read-only or hard-linked, a directory whose
modes changed) scores 0 with the reason, never a crash the agent could hide
behind; so does a test.sh that crashes or leaves no valid reward, since the
code it runs can cause that too. A crash (the reason on the last line, no
result written), which the runner records as a verifier error, is kept for
the harness's own fault: a reward directory that is not fresh."""

import argparse
import json
import math
import os
import signal
import stat
import subprocess
import sys
import tempfile

REWARD_DIR = "/logs/verifier"


class Tampered(Exception):
    """What is in the reward directory is not a verdict of the tests: a score of 0 with this reason."""


def fail(message):
    print(message, flush=True)
    sys.exit(2)


def end_every_other_process():
    # Whatever test.sh left running (the agent's code, as this uid) is
    # killed before the reward is read: nothing can change it after.
    for _ in range(3):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:
            return


def plain_file(path):
    # The reward must be a regular file this uid wrote and left writable:
    # a link, a hard link or a file made read-only (so that test.sh could
    # not overwrite it) is not the tests' verdict.
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise Tampered(f"{os.path.basename(path)} is not a regular file")
    if info.st_uid != os.getuid() or info.st_nlink != 1:
        raise Tampered(f"{os.path.basename(path)} is not a file the tests wrote (owner or links changed)")
    if not info.st_mode & stat.S_IWUSR:
        raise Tampered(f"{os.path.basename(path)} was made read-only")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        return f.read(1 << 16)


def number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def text_reward(path):
    raw = plain_file(path)[:200].decode("utf-8", "replace").strip()
    try:
        return float(raw)
    except ValueError:
        raise Tampered(f"reward.txt holds {raw[:60]!r}, not a number in [0, 1]")


def read_reward():
    # Harbor's rule: reward.json, when there, is an object of named rewards
    # (its numeric fields; others are ignored) and the task's reward is its
    # "reward" key, else reward.txt beside it, else its only key; several
    # keys and none of those is a result Harbor cannot reduce either.
    # Without reward.json, reward.txt holds the one number.
    text_path, json_path = os.path.join(REWARD_DIR, "reward.txt"), os.path.join(REWARD_DIR, "reward.json")
    named = {}
    if os.path.lexists(json_path):
        raw = plain_file(json_path).decode("utf-8", "replace")
        try:
            parsed = json.loads(raw)
        except ValueError:
            raise Tampered(f"reward.json is not JSON: {raw[:60]!r}")
        if not isinstance(parsed, dict):
            raise Tampered(f"reward.json is not an object of named rewards: {raw[:60]!r}")
        named = {str(k): float(v) for k, v in parsed.items() if number(v)}
        if "reward" in parsed and "reward" not in named:
            raise Tampered(f"reward.json holds reward {parsed['reward']!r}, not a number in [0, 1]")
        if "reward" in named:
            value, source = named.pop("reward"), "reward.json"
        elif os.path.lexists(text_path):
            value, source = text_reward(text_path), "reward.txt"
        elif len(named) == 1:
            (source, value), = named.items()
            named, source = {}, f"reward.json {source!r}"
        else:
            raise Tampered(f"reward.json holds no 'reward' and {len(named)} other numbers "
                           f"({', '.join(sorted(named))[:80]}); Harbor cannot reduce that to one reward either")
    elif os.path.lexists(text_path):
        value, source = text_reward(text_path), "reward.txt"
    else:
        return None, None, {}
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise Tampered(f"{source} holds {value!r}, not a number in [0, 1]")
    return value, source, named


def write_result(path, name, passed, detail):
    # Code test.sh ran may have left anything at the result's path or
    # changed its directory's modes: the directory is ours, so both are reset.
    directory = os.path.dirname(path)
    os.chmod(directory, 0o755)
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)
        else:
            os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump({"reward": 1.0 if passed else 0.0,
                   "checks": [{"name": name, "passed": passed, "detail": detail[:500]}]}, f)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--answer", required=True)
    parser.add_argument("--result", required=True)
    args = parser.parse_args()
    with open(args.answer, encoding="utf-8") as f:
        check = next(c for c in json.load(f)["checks"] if c["type"] == "harbor_test_sh")
    name = check.get("name", "harbor_reward")
    timeout = float(check["timeout_s"])
    # Made by the harness for this run, after the agent's last command: if
    # it is not empty and ours, the harness failed.
    fresh = os.lstat(REWARD_DIR)
    if not stat.S_ISDIR(fresh.st_mode) or fresh.st_uid != os.getuid() or os.listdir(REWARD_DIR):
        fail(f"{REWARD_DIR} is not a fresh, empty directory of the verifier's uid")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8", **check.get("env", {})}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(["bash", "/tests/test.sh"], cwd=check["workdir"], env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        end_every_other_process()
        proc.wait()
        log.seek(0)
        output = log.read().decode("utf-8", "replace")
    last = (output.strip().splitlines() or ["no output"])[-1][:200]
    if code is None:
        write_result(args.result, name, False, f"tests/test.sh did not finish within {timeout:g}s: no reward counts")
        return
    if code != 0:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        write_result(args.result, name, False, f"tests/test.sh {how}: its reward does not count (last output: {last})")
        return
    directory = os.lstat(REWARD_DIR)
    try:
        if directory.st_uid != fresh.st_uid or stat.S_IMODE(directory.st_mode) != stat.S_IMODE(fresh.st_mode):
            raise Tampered(f"{REWARD_DIR} had its owner or modes changed")
        value, source, named = read_reward()
    except Tampered as exc:
        write_result(args.result, name, False, f"reward not counted: {exc}")
        return
    if value is None:
        write_result(args.result, name, False, f"tests/test.sh exited with code 0 but left no {REWARD_DIR}/reward.txt: "
                                               f"no reward counts (last output: {last})")
        return
    passed = value == 1.0
    detail = f"{source} says {value:g}; test.sh exited with code 0"
    if named:
        detail += "; other rewards: " + ", ".join(f"{k}={v:g}" for k, v in sorted(named.items()))
    if not passed and value > 0:
        detail += " (partial credit counts as not passed)"
    write_result(args.result, name, passed, detail)


if __name__ == "__main__":
    main()
'''


# ---------------------------------------------------------------- export

# Tools an oracle may call that python:3.11-slim lacks, and their apt package.
_EXPORT_APT = {"sqlite3": "sqlite3", "jq": "jq", "bc": "bc", "file": "file", "xxd": "xxd", "zip": "zip",
               "unzip": "unzip", "patch": "patch", "git": "git"}


def _difficulty_word(level: int) -> str:
    return "easy" if level <= 2 else "medium" if level <= 5 else "hard"


def export_harbor_task(bundle: TaskBundle, dest_dir: Path) -> Path:
    """Write `bundle` as a Harbor task at `dest_dir/<task_id>/` (a new
    directory): the workspace is COPYed to /app, the tests run our verifier."""
    out = Path(dest_dir) / bundle.task_id
    if out.exists():
        raise FileExistsError(f"{out} already exists; export to a new directory")
    out.mkdir(parents=True)
    workdir = EXPORT_WORKDIR

    def to_app(text: str) -> str:
        return re.sub(r"(?<![\w./-])/workspace(?![\w.-])", workdir, text)

    (out / "instruction.md").write_text(to_app(bundle.instruction), encoding="utf-8")
    solve = bundle.solution_path.read_text(encoding="utf-8")
    tools = sorted({pkg for tool, pkg in _EXPORT_APT.items() if re.search(rf"(^|[\s|;&(`]){tool}\b", solve, re.M)})
    shutil.copytree(bundle.environment_dir, out / "environment" / "workspace")
    dockerfile = [f"FROM {EXPORT_BASE_IMAGE}"]
    if tools:
        dockerfile.append("RUN apt-get update && apt-get install -y --no-install-recommends "
                          f"{' '.join(tools)} && rm -rf /var/lib/apt/lists/*")
    dockerfile += [f"WORKDIR {workdir}", f"COPY workspace/ {workdir}/"]
    (out / "environment" / "Dockerfile").write_text("\n".join(dockerfile) + "\n", encoding="utf-8")
    (out / "solution").mkdir()
    (out / "solution" / "solve.sh").write_text(f"#!/bin/bash\ncd {workdir}\n{to_app(solve)}", encoding="utf-8")
    tests = out / "tests"
    tests.mkdir()
    shutil.copyfile(bundle.tests_dir / "verify.py", tests / EXPORTED_VERIFIER)
    shutil.copyfile(bundle.answer_path, tests / "answer.json")
    (tests / "test.sh").write_text(
        "#!/bin/bash\n"
        "# ClawLoop's verifier on the final workspace; its result.json is kept beside the reward.\n"
        f"mkdir -p {REWARD_DIR}\n"
        f"python3 -I /tests/{EXPORTED_VERIFIER} --workspace {workdir} --answer /tests/answer.json "
        f"--result {REWARD_DIR}/clawloop_result.json || exit 1\n"
        f"python3 -I -c 'import json, sys; print(json.load(open(sys.argv[1]))[\"reward\"])' "
        f"{REWARD_DIR}/clawloop_result.json > {REWARD_DIR}/reward.txt\n",
        encoding="utf-8")
    for script in (tests / "test.sh", out / "solution" / "solve.sh"):
        script.chmod(0o755)
    (out / "task.toml").write_text(_export_task_toml(bundle), encoding="utf-8")
    return out


def export_timeouts(bundle: TaskBundle) -> tuple[float, float]:
    """(agent, verifier) timeouts of an exported task. The agent's is what
    our harness allows an episode at worst (every turn's command running to
    its timeout), the verifier's our verifier's wall limit; each at least
    HARBOR_MIN_TIMEOUT_S, since a Harbor run also starts the container and
    the agent's model thinks between commands."""
    from clawloop_assets.harness.verification import VERIFIER_LIMITS  # verification imports this module

    agent = math.ceil(bundle.max_turns * bundle.command_timeout_s / 60.0) * 60.0
    return max(HARBOR_MIN_TIMEOUT_S, agent), max(HARBOR_MIN_TIMEOUT_S, float(VERIFIER_LIMITS.wall_seconds))


def _export_task_toml(bundle: TaskBundle) -> str:
    # No [environment] docker_image: in Harbor it names a prebuilt image to
    # use instead of building environment/Dockerfile, whose COPY is what puts
    # the workspace in /app.
    agent_timeout, verifier_timeout = export_timeouts(bundle)
    return "\n".join([
        'version = "1.0"',
        "",
        "[metadata]",
        'author_name = "ClawLoop"',
        f"difficulty = {json.dumps(_difficulty_word(bundle.difficulty))}",
        f"category = {json.dumps(bundle.domain)}",
        f"tags = {json.dumps([bundle.capability, bundle.domain, bundle.track, bundle.format])}",
        f"clawloop_task_id = {json.dumps(bundle.task_id)}",
        f"clawloop_generator_id = {json.dumps(bundle.generator_id)}",
        f"clawloop_seed = {int(bundle.seed)}",
        f"clawloop_round = {json.dumps(bundle.round_key)}",
        f"clawloop_difficulty = {int(bundle.difficulty)}",
        f"clawloop_max_turns = {int(bundle.max_turns)}",
        f"clawloop_command_timeout_sec = {float(bundle.command_timeout_s)!r}",
        "",
        "[verifier]",
        f"timeout_sec = {verifier_timeout!r}",
        "",
        "[agent]",
        f"timeout_sec = {agent_timeout!r}",
        "",
        "[environment]",
        "build_timeout_sec = 600.0",
        "cpus = 1",
        'memory = "2G"',
        'storage = "10G"',
        "gpus = 0",
        "allow_internet = false",
    ]) + "\n"


def export_round(warehouse, round_key: str, out_dir: Path) -> list[Path]:
    """The admitted tasks of `round_key` exported to `out_dir` (a new
    directory), written beside it first and renamed, so it is complete or absent."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} already exists; export to a new directory")
    admitted = require_rows(warehouse, "admissions", round_key, "admitted_tasks").filter(pl.col("admitted"))
    if admitted.is_empty():
        raise ValueError(f"{round_key} admitted no task: there is nothing to export")
    tasks = require_rows(warehouse, "tasks", round_key, "candidate_tasks")
    rows = admitted.select("task_id").join(tasks.select("task_id", "bundle_path"), on="task_id").sort("task_id")
    with staged_directory(out_dir) as staging:
        for row in rows.iter_rows(named=True):
            export_harbor_task(load_task_bundle(Path(row["bundle_path"])), staging)
    return sorted(p for p in out_dir.iterdir() if p.is_dir())


__all__ = [
    "CHECK_TYPE", "HARBOR_CAPABILITY", "HarborTaskError", "ImportResult", "export_harbor_task", "export_round",
    "harbor_check", "harbor_verifier_mounts", "import_harbor_directory", "import_harbor_task", "render_import_table",
]

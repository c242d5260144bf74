"""Runs a bundle's verifier on a final workspace, in a sandbox process of its
own, and turns what it wrote into a `VerifierResult`.

A verifier that crashes, times out or writes no valid result is an error,
recorded with its reason; it is never a reward of 0. The verifier runs as
VERIFIER_UID, not the agent's uid, on a copy of the final workspace with
plain modes owned by that uid: whatever modes the agent left (a mode-000
deliverable, an unsearchable directory), the verifier reads what is there,
and nothing the agent's processes set up reaches it. A workspace too large or
too deep to copy is the agent's failure, a reward of 0 with the reason.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

from clawloop_assets.harbor.task_format import harbor_check, harbor_verifier_mounts
from clawloop_assets.task_bundle import TaskBundle, TaskBundleError
from resources.sandbox import (
    VERIFIER_UID,
    Mount,
    Sandbox,
    SandboxLimits,
    copy_tree_safely,
    iter_tree,
    write_bytecode_cache,
)

VERIFIER_LIMITS = SandboxLimits(wall_seconds=30.0, cpu_seconds=20)
VERIFIER_ARGV = (
    "python3", "-I", "/tests/verify.py",
    "--workspace", "/workspace", "--answer", "/answer/answer.json", "--result", "/result/result.json",
)


@dataclass(frozen=True)
class VerifierResult:
    status: str  # "scored" | "error"
    reward: float | None  # None unless scored
    checks: list[dict] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def run_verifier(
    sandbox: Sandbox, bundle: TaskBundle, final_workspace: Path, limits: SandboxLimits = VERIFIER_LIMITS
) -> VerifierResult:
    """`final_workspace` is copied (never mounted itself) and the copy mounted
    read-only; the host process must be able to read it (root can, whatever
    the modes)."""
    started = time.monotonic()
    final_workspace = Path(final_workspace)
    if final_workspace.is_symlink() or not final_workspace.is_dir():
        return VerifierResult("error", None, error=f"final workspace {final_workspace} is not a directory",
                              seconds=time.monotonic() - started)
    with tempfile.TemporaryDirectory(prefix="clawloop-verify-") as tmp:
        tmp_path = Path(tmp)
        workspace = tmp_path / "workspace"
        try:
            copy = copy_tree_safely(final_workspace, workspace, owner=(VERIFIER_UID, VERIFIER_UID))
        except OSError as exc:  # the host's failure (a full disk), not the agent's
            return VerifierResult("error", None, error=f"could not copy the final workspace for the verifier: {exc}",
                                  seconds=time.monotonic() - started)
        if copy.over_limit is not None:
            check = {"name": "workspace within the copy limits", "passed": False,
                     "detail": f"the final workspace holds {copy.over_limit}: it cannot be verified"}
            return VerifierResult("scored", 0.0, checks=[check], seconds=time.monotonic() - started)
        # Pristine copies each time: nothing a previous run (or the agent) did
        # to the bundle's files reaches this verifier.
        tests, answer, result = tmp_path / "tests", tmp_path / "answer", tmp_path / "result"
        shutil.copytree(bundle.tests_dir, tests)
        shutil.copytree(bundle.answer_dir, answer)
        result.mkdir()
        for directory in (tmp_path, tests, answer):
            os.chmod(directory, 0o755)
        mounts = [
            Mount(workspace, "/workspace"),
            Mount(tests, "/tests"),
            Mount(answer, "/answer"),
            Mount(result, "/result", writable=True),
        ]
        # An imported Harbor task's test.sh expects its WORKDIR and /logs/verifier.
        try:
            harbor = harbor_verifier_mounts(bundle, workspace, tmp_path)
        except TaskBundleError as exc:
            return VerifierResult("error", None, error=str(exc), seconds=time.monotonic() - started)
        if harbor is not None:
            # The WORKDIR's writable copy may be /workspace itself: it takes the read-only copy's place.
            mounts = [m for m in mounts if m.target not in {h.target for h in harbor[0]}] + harbor[0]
            limits = replace(harbor[1], output_bytes=limits.output_bytes)
        outcome = sandbox.run(
            VERIFIER_ARGV,
            mounts,
            cwd="/tmp",
            limits=limits,
            uid=VERIFIER_UID,
        )
        seconds = time.monotonic() - started
        if harbor is not None and not outcome.timed_out and outcome.exit_code in (137, -9):
            # An imported task's tests run the agent's code as the verifier's
            # uid, and that code can SIGKILL the wrapper (harbor/task_format.py): its
            # doing, so a 0, never an error that would exclude the rollout.
            check = {"name": "harbor_reward", "passed": False,
                     "detail": "the verifier was killed (SIGKILL) while the task's tests ran: no reward counts"}
            return VerifierResult("scored", 0.0, checks=[check], seconds=seconds)
        if outcome.timed_out:
            return VerifierResult("error", None, error=f"verifier timed out after {limits.wall_seconds:.0f}s", seconds=seconds)
        if outcome.exit_code != 0:
            tail = outcome.output.strip().splitlines()[-1:] or ["no output"]
            return VerifierResult("error", None, error=f"verifier exited with code {outcome.exit_code}: {tail[0][:300]}",
                                  seconds=seconds)
        return _read_result(result / "result.json", seconds)


def _read_result(path: Path, seconds: float) -> VerifierResult:
    if path.is_symlink() or not path.is_file():
        return VerifierResult("error", None, error="verifier wrote no result.json", seconds=seconds)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return VerifierResult("error", None, error=f"verifier result is not valid JSON: {exc}", seconds=seconds)
    if not isinstance(data, dict):
        return VerifierResult("error", None, error="verifier result is not a JSON object", seconds=seconds)
    reward, checks = data.get("reward"), data.get("checks")
    if isinstance(reward, bool) or reward not in (0, 1):
        return VerifierResult("error", None, error=f"verifier reward must be 0.0 or 1.0, got {reward!r}", seconds=seconds)
    if (
        not isinstance(checks, list)
        or not checks
        or not all(isinstance(c, dict) and isinstance(c.get("passed"), bool) and "name" in c for c in checks)
    ):
        return VerifierResult("error", None, error="verifier result needs a non-empty 'checks' list", seconds=seconds)
    if (reward == 1) != all(c["passed"] for c in checks):
        return VerifierResult("error", None, error="verifier reward disagrees with its checks", seconds=seconds)
    return VerifierResult("scored", float(reward), checks=checks, seconds=seconds)


# ---- several verifications of one bundle in one sandbox run
#
# Agent-free validation verifies each candidate six times (the oracle's
# workspace three times, the untouched, empty and perturbed ones); a sandbox
# run costs a bubblewrap start and a Python start with the verifier's imports
# each time. When the bundle's tests/verify.py is byte for byte the canonical
# generic verifier (ours, stdlib only, reading deliverables as data),
# `run_verifiers` runs all of them in one sandbox as VERIFIER_UID: a trusted
# driver loads /tests/verify.py once, then forks one child per workspace,
# each with the single run's CPU and wall limits of its own, its own result
# directory and a clean /tmp. Each workspace is still its own safe copy,
# mounted read-only. Anything the batch cannot vouch for is verified again by
# `run_verifier`, so every verdict is the one a run of its own gives: a
# bundle with any other verify.py (an imported Harbor task), a workspace
# that is not a plain directory, over the copy limits or holding a link, a
# child that crashed, timed out or wrote no result, and a result whose
# details name the workspace's mount point or a RecursionError or
# MemoryError (the only things that could differ between the two ways of
# running). A workspace given more than once gets one copy, mounted once per
# verification. The children share their parent's hash seed: the canonical
# verifier sorts every set it reports, so no seed changes a verdict of it,
# and a verify.py that is not the canonical one gets an interpreter a run.

CANONICAL_VERIFIER = Path(__file__).resolve().parents[1] / "synthesis" / "generators" / "verify.py"
# The batch mounts workspace i at f"{BATCH_MOUNT}{i}": as long as "/workspace",
# so a path the kernel finds too long is too long in both ways of running.
BATCH_MOUNT = "/workspac"
BATCH_MAX = 10
_BATCH_SUSPECT = ("RecursionError", "MemoryError")
# Runs as VERIFIER_UID inside the sandbox: `python3 -I -c _BATCH_DRIVER cpu wall count`.
# verify.main() is called from module level, at the frame depth a run of its own has.
_BATCH_DRIVER = r"""
import importlib.util, os, resource, shutil, signal, sys
cpu, wall, count = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
spec = importlib.util.spec_from_file_location("verify", "/tests/verify.py")
verify = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verify)
for index in range(count):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
            signal.alarm(wall)
            sys.argv = ["/tests/verify.py", "--workspace", "/workspac%d" % index,
                        "--answer", "/answer/answer.json", "--result", "/result/%d/result.json" % index]
            verify.main()
            code = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    status = os.waitpid(pid, 0)[1]
    with open("/result/%d/status" % index, "w") as handle:
        handle.write(str(status))
    for name in os.listdir("/tmp"):
        path = os.path.join("/tmp", name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
"""


@functools.cache
def _canonical_verifier_bytes() -> bytes:
    return CANONICAL_VERIFIER.read_bytes()


def _batchable(bundle: TaskBundle) -> bool:
    """Whether `bundle`'s verifier is the canonical one (and not a Harbor task's)."""
    try:
        if harbor_check(bundle) is not None:
            return False
        verifier = bundle.tests_dir / "verify.py"
        return not verifier.is_symlink() and verifier.is_file() and verifier.read_bytes() == _canonical_verifier_bytes()
    except (OSError, TaskBundleError, ValueError):
        return False  # run_verifier reports it


def run_verifiers(
    sandbox: Sandbox, bundle: TaskBundle, final_workspaces: Sequence[Path], limits: SandboxLimits = VERIFIER_LIMITS
) -> list[VerifierResult]:
    """What `run_verifier(sandbox, bundle, w, limits)` gives for each `w` of
    `final_workspaces`, in order, in one sandbox run where the bundle allows
    it (see above). `seconds` is then the batch's time, for each."""
    workspaces = [Path(w) for w in final_workspaces]
    if len(workspaces) < 2 or not _batchable(bundle):
        return [run_verifier(sandbox, bundle, w, limits) for w in workspaces]
    results: list[VerifierResult | None] = [None] * len(workspaces)
    for start in range(0, len(workspaces), BATCH_MAX):
        chunk = list(enumerate(workspaces))[start:start + BATCH_MAX]
        for index, verdict in _run_batch(sandbox, bundle, chunk, limits).items():
            results[index] = verdict
    return [verdict if verdict is not None else run_verifier(sandbox, bundle, workspaces[i], limits)
            for i, verdict in enumerate(results)]


def _batch_copy(final_workspace: Path, copy_dir: Path) -> Path | None:
    """run_verifier's safe copy of a workspace; None when the batch leaves it
    to run_verifier (not a directory, over the limits, holding a link)."""
    if final_workspace.is_symlink() or not final_workspace.is_dir():
        return None
    try:
        copy = copy_tree_safely(final_workspace, copy_dir, owner=(VERIFIER_UID, VERIFIER_UID))
    except OSError:
        return None
    if copy.over_limit is not None or any(entry.is_symlink() for entry in iter_tree(copy_dir)):
        return None
    return copy_dir


def memory_scratch(min_free_bytes: int = 1 << 30) -> str | None:
    """/dev/shm when it is a tmpfs with at least `min_free_bytes` free, for
    scratch that is thrown away at the end of a call (on a disk, creating and
    removing the small files costs more than the verification itself); None,
    tempfile's default, otherwise."""
    if not _shm_is_tmpfs():
        return None
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return SHM_DIR if stats.f_bavail * stats.f_frsize >= min_free_bytes and os.access(SHM_DIR, os.W_OK) else None


SHM_DIR = "/dev/shm"


@functools.cache
def _shm_is_tmpfs() -> bool:
    try:
        mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    return any(line.split()[1:3] == [SHM_DIR, "tmpfs"] for line in mounts if len(line.split()) >= 3)


def _run_batch(sandbox: Sandbox, bundle: TaskBundle, items: list[tuple[int, Path]],
               limits: SandboxLimits) -> dict[int, VerifierResult]:
    """The verdicts the batch vouches for, by index; the others are left out."""
    started = time.monotonic()
    verdicts: dict[int, VerifierResult] = {}
    with tempfile.TemporaryDirectory(prefix="clawloop-verify-", dir=memory_scratch()) as tmp:
        tmp_path = Path(tmp)
        tests, answer, result = tmp_path / "tests", tmp_path / "answer", tmp_path / "result"
        shutil.copytree(bundle.tests_dir, tests)
        shutil.copytree(bundle.answer_dir, answer)
        result.mkdir()
        for directory in (tmp_path, tests, answer, result):
            os.chmod(directory, 0o755)
        if (tests / "verify.py").is_symlink() or (tests / "verify.py").read_bytes() != _canonical_verifier_bytes():
            return verdicts
        write_bytecode_cache(CANONICAL_VERIFIER, tests)  # the driver imports it
        slots: list[tuple[int, Path]] = []  # (index, result directory), slot = position
        mounts = [Mount(tests, "/tests"), Mount(answer, "/answer"), Mount(result, "/result", writable=True)]
        copies: dict[Path, Path | None] = {}  # one read-only copy of a workspace given more than once
        for index, final_workspace in items:
            if final_workspace not in copies:
                copies[final_workspace] = _batch_copy(final_workspace, tmp_path / f"workspace{len(copies)}")
            workspace = copies[final_workspace]
            if workspace is None:
                continue
            mounts.append(Mount(workspace, f"{BATCH_MOUNT}{len(slots)}"))
            (result / str(len(slots))).mkdir(mode=0o755)
            slots.append((index, result / str(len(slots))))
        if len(slots) < 2:
            return verdicts  # nothing saved: run_verifier does each
        count = len(slots)
        # Each child's own status says what happened to it, whatever the run's outcome.
        sandbox.run(
            ["python3", "-I", "-c", _BATCH_DRIVER, str(limits.cpu_seconds), str(math.ceil(limits.wall_seconds)), str(count)],
            mounts,
            cwd="/tmp",
            limits=replace(limits, wall_seconds=limits.wall_seconds * count + 10,
                           cpu_seconds=limits.cpu_seconds * count + 10),
            uid=VERIFIER_UID,
        )
        seconds = time.monotonic() - started
        for slot, (index, directory) in enumerate(slots):
            status = directory / "status"
            if status.is_symlink() or not status.is_file() or status.read_text(encoding="utf-8").strip() != "0":
                continue
            verdict = _read_result(directory / "result.json", seconds)
            details = json.dumps(verdict.checks)
            if verdict.status != "scored" or f"{BATCH_MOUNT}{slot}" in details or any(s in details for s in _BATCH_SUSPECT):
                continue
            verdicts[index] = verdict
    return verdicts

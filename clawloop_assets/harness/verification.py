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

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from clawloop_assets.harbor.task_format import harbor_verifier_mounts
from clawloop_assets.task_bundle import TaskBundle, TaskBundleError
from resources.sandbox import VERIFIER_UID, Mount, Sandbox, SandboxLimits, copy_tree_safely

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
            mounts += harbor[0]
            limits = replace(limits, wall_seconds=max(limits.wall_seconds, harbor[1]),
                             cpu_seconds=max(limits.cpu_seconds, int(harbor[1])))
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

"""`clawloop eval --tasks DIR`: a policy checkpoint on a directory of
imported tasks (what `clawloop harbor-import SRC --dest DIR` validated, as
the evaluation set loads them), pass@1 with its 95% interval per task set
and a table of tasks. The rollouts are the harness's own (run_rollouts),
scored by each task's own verifier, errors counted as not passed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from clawloop_assets.evaluation.fixed_set import (
    EvaluationTask,
    PassAtOne,
    imported_tasks,
    left_out_on,
    pass_at_1,
    pass_at_1_by_set,
    rollout_errors,
)
from clawloop_assets.harbor.task_format import MANIFEST_NAME
from clawloop_assets.harness.agent_loop import AgentSettings, rollout_row, run_rollouts
from clawloop_assets.markdown import markdown_table
from resources.checkpoints import verify_checkpoint
from resources.policy import PolicyModel, PolicySession
from resources.sandbox import Sandbox
from resources.warehouse import table_frame


class EvalError(ValueError):
    """Bad input to `clawloop eval`; the message names what and where."""


@dataclass(frozen=True)
class EvalReport:
    checkpoint_id: str
    tasks: list[EvaluationTask]
    rollouts: pl.DataFrame
    overall: PassAtOne
    by_set: dict[str, PassAtOne]
    samples: int
    seconds: float


def load_eval_tasks(directory: Path, sandbox: Sandbox | None = None) -> list[EvaluationTask]:
    """The validated tasks in `directory`: an import destination with its
    manifest, each validated on `sandbox`'s backend (when given). Anything
    else is refused naming the directory. Tasks validated only in their
    own image are loaded on the Docker backend (they run in that image)
    and left out elsewhere (`not_evaluated` names them)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise EvalError(f"--tasks {directory}: not a directory")
    if not (directory / MANIFEST_NAME).is_file():
        raise EvalError(f"--tasks {directory}: no {MANIFEST_NAME}, so no task in it is known to be validated; "
                        f"run `clawloop harbor-import SRC --dest {directory}` first")
    tasks = imported_tasks(directory, sandbox)
    if not tasks:
        left_out = left_out_on(sandbox, directory)
        raise EvalError(f"--tasks {directory}: its manifest lists no runnable task" + (
            f"; {len(left_out)} validate only in their own image, where our agent runs on the Docker backend only "
            f"(`--sandbox docker`): {', '.join(r['task_id'] for r in left_out[:10])}"
            f"{', ...' if len(left_out) > 10 else ''}" if left_out else ""))
    return tasks


def not_evaluated(directory: Path, sandbox: Sandbox | None = None) -> str | None:
    """A line naming the tasks in `directory` an evaluation on `sandbox`'s
    backend leaves out (those validated only in their own image, off
    Docker), so a report says what it left out (None when there are none)."""
    left_out = left_out_on(sandbox, directory)
    if not left_out:
        return None
    return (f"not evaluated: {len(left_out)} task(s) validate only in their own image, where our agent runs on the "
            f"Docker backend only (`--sandbox docker`): {', '.join(r['task_id'] for r in left_out)}")


def resolve_checkpoint(spec: str | None, policy: PolicyModel, warehouse_factory) -> Path:
    """The checkpoint `--checkpoint` names: nothing (the policy's base
    model), a checkpoint directory, a round key (that round's trained
    policy) or a checkpoint id from the warehouse's checkpoints table."""
    if spec is None:
        return policy.base_checkpoint()
    if Path(spec).is_dir():
        verify_checkpoint(Path(spec))
        return Path(spec)
    warehouse = warehouse_factory()
    if spec.startswith("round-"):
        rows = warehouse.read("checkpoints", {"round": spec, "kind": "policy"})
    else:
        rows = warehouse.read("checkpoints", {"checkpoint_id": spec})
    if rows.is_empty():
        raise EvalError(f"--checkpoint {spec}: neither a checkpoint directory, nor a round with a policy "
                        "checkpoint, nor a checkpoint id in the warehouse's checkpoints table")
    path = Path(rows["path"][0])
    verify_checkpoint(path)
    return path


def evaluate_tasks(session: PolicySession, sandbox: Sandbox, tasks: list[EvaluationTask], checkpoint: str,
                   samples: int, settings: AgentSettings, workdir: Path, seed: int,
                   progress=lambda message: None) -> EvalReport:
    if samples < 1:
        raise EvalError(f"--samples must be at least 1, got {samples}")
    started = time.monotonic()
    rollouts = run_rollouts(session, sandbox, [t.bundle for t in tasks], samples, settings, workdir, seed,
                            progress=progress)
    rows = [rollout_row(r, round_key="eval", phase="evaluation", checkpoint_id=checkpoint) for r in rollouts]
    frame = table_frame("rollouts", rows)
    return EvalReport(checkpoint, tasks, frame, pass_at_1(frame), pass_at_1_by_set(frame, tasks), samples,
                      time.monotonic() - started)


def render_eval(report: EvalReport) -> str:
    def rate(value):
        return "-" if value is None else f"{value:.4f}"

    sets = [(name, part.tasks, rate(part.pass_at_1), f"[{rate(part.ci_low)}, {rate(part.ci_high)}]")
            for name, part in report.by_set.items()]
    if len(report.by_set) > 1:
        o = report.overall
        sets.append(("all", o.tasks, rate(o.pass_at_1), f"[{rate(o.ci_low)}, {rate(o.ci_high)}]"))
    by_task = {t.task_id: t for t in report.tasks}
    tasks = [(r["task_id"], by_task[r["task_id"]].task_set, f"{r['passes']}/{r['samples']}", r["scored"], r["errors"])
             for r in report.overall.per_task.iter_rows(named=True)]
    errors = rollout_errors(report.rollouts)
    lines = [f"checkpoint {report.checkpoint_id}, {report.samples} sample(s) per task, "
             f"{report.seconds:.0f} s; pass@1 with its 95% Wilson interval over tasks",
             "", markdown_table(["task set", "tasks", "pass@1", "95% interval"], sets).value,
             "", markdown_table(["task", "task set", "passes / k", "scored", "errors"], tasks).value]
    if any(errors.values()):
        lines += ["", "errored samples (counted as not passed): "
                  + ", ".join(f"{status} {count}" for status, count in sorted(errors.items()) if count)]
    return "\n".join(lines) + "\n"

"""The evaluation asset: the round's trained policy on the fixed evaluation set
(clawloop_assets/evaluation/fixed_set.py), k samples per task, pass@1 with its interval."""

import time
import zlib

import dagster as dg

from clawloop_assets.assets.common import ROLLOUTS_POOL, record_cost
from clawloop_assets.assets.training import policy_checkpoint
from clawloop_assets.cost import measure
from clawloop_assets.evaluation.fixed_set import (
    evaluation_tasks,
    left_out_on,
    level_figures,
    paired_change_by_level,
    pass_at_1,
    pass_at_1_by_level,
    pass_at_1_by_set,
    rollout_errors,
)
from clawloop_assets.harness.agent_loop import rollout_row, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.partitions import round_key, round_partitions
from clawloop_assets.round_state import round_policy, workdir
from resources.policy import PolicyModel
from resources.sandbox import Sandbox
from resources.warehouse import Warehouse, table_frame

GROUP = "evaluation"
PHASE = "evaluation"


def evaluation_sampling_seed(loop: LoopConfig) -> int:
    """One seed for every round (not per round): the rounds' policies meet the
    same tasks with the same sample streams, so the figure moves with the
    policy, not with the draw."""
    return (zlib.crc32(b"clawloop/evaluation") + loop.seed) % (2**31)


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=ROLLOUTS_POOL, deps=[policy_checkpoint])
def evaluation(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox, policy: PolicyModel,
               loop: LoopConfig) -> dg.MaterializeResult:
    """pass@1 (averaged over k samples per task, the paper's Avg@k) of the
    round's trained policy on the fixed evaluation set no round trains on:
    our own held-out families plus any imported tasks, with a 95% interval;
    over the whole set, per task set, and per level of our own set."""
    key = context.partition_key
    ref = round_policy(warehouse, key, "policy")
    settings = loop.agent_settings()
    with measure(PHASE) as cost:
        started = time.monotonic()
        set_id, tasks = evaluation_tasks(sandbox, loop.evaluation_set(), log=context.log.info)
        set_seconds = time.monotonic() - started
        session = policy.load(ref.path)
        try:
            rollouts = run_rollouts(session, sandbox, [t.bundle for t in tasks], loop.evaluation_samples, settings,
                                    workdir(key, "rollouts", PHASE), evaluation_sampling_seed(loop),
                                    progress=context.log.info)
        finally:
            session.close()
        rows = [rollout_row(r, round_key=key, phase=PHASE, checkpoint_id=ref.checkpoint_id) for r in rollouts]
        cost.rollouts = len(rows)
        cost.tokens = sum(r["generated_tokens"] for r in rows)
    frame = table_frame("rollouts", rows)
    warehouse.replace("rollouts", frame, {"round": key, "phase": PHASE})
    record_cost(warehouse, key, cost)
    score = pass_at_1(frame)
    by_task = {t.task_id: t for t in tasks}
    # None (no scored rollout at all) is left out of the metadata. The pooled
    # figure is over every task of the set (every level, imported tasks too).
    figure = {"evaluation_pass_at_1": score.pass_at_1, "evaluation_ci_low": score.ci_low, "evaluation_ci_high": score.ci_high}
    # Each task set apart as well (our own set, each imported benchmark), one
    # numeric entry per set so that it plots round over round.
    by_set = pass_at_1_by_set(frame, tasks)
    for name, part in by_set.items():
        figure.update({f"pass_at_1[{name}]": part.pass_at_1, f"ci_low[{name}]": part.ci_low,
                       f"ci_high[{name}]": part.ci_high})
    # Our own set level by level (imported benchmarks stay apart, above): the ladder.
    own_levels = {t.task_id: t.bundle.difficulty for t in tasks if t.source == "own"}
    by_level = pass_at_1_by_level(frame, own_levels)
    # And whether each level moved since round 1, task by task.
    first = round_key(1)
    since_first = ({} if key == first else
                   paired_change_by_level(warehouse.read("rollouts", {"round": first, "phase": PHASE}), frame, own_levels))
    for level, part in by_level.items():
        figure.update({f"pass_at_1[L{level}]": part.pass_at_1, f"ci_low[L{level}]": part.ci_low,
                       f"ci_high[L{level}]": part.ci_high})
    return dg.MaterializeResult(metadata={
        **{name: value for name, value in figure.items() if value is not None},
        "interval": "95% Wilson score interval over tasks (clawloop_assets/evaluation/fixed_set.py: pass_at_1)",
        "evaluation_tasks": score.tasks,
        "own_tasks": sum(t.source == "own" for t in tasks),
        "imported_tasks": sum(t.source == "imported" for t in tasks),
        # Validated only in their own image: run there on Docker; on bubblewrap not run, never scored (docs/harbor.md).
        "imported_tasks_not_evaluated": len(left_out_on(sandbox)),
        "by_task_set": markdown_table(["task set", "tasks", "pass@1", "95% interval"], [
            (name, part.tasks, part.pass_at_1, f"[{part.ci_low}, {part.ci_high}]") for name, part in by_set.items()]),
        "by_level": markdown_table(["level (own set)", "tasks", "pass@1", "95% interval"], [
            (level, part.tasks, part.pass_at_1, f"[{part.ci_low}, {part.ci_high}]") for level, part in by_level.items()]),
        "evaluation_by_level": dg.MetadataValue.json(level_figures(by_level)),
        "by_level_since_round_1": markdown_table(
            ["level (own set)", "tasks in both", "pass rate rose", "fell", "sign test p"],
            [(level, c.tasks, c.rose, c.fell, f"{c.p_value:.2g}") for level, c in since_first.items()])
        if since_first else f"none ({'round 1 itself' if key == first else 'round 1 has no evaluation of these tasks'})",
        "samples_per_task": loop.evaluation_samples,
        # Errored samples count as not passed (never dropped); checks.py blocks a round with too many.
        "error_rollouts": score.errors,
        "errors_by_status": rollout_errors(frame),
        "evaluation_set_id": set_id,
        "policy_checkpoint_id": ref.checkpoint_id,
        "seed": evaluation_sampling_seed(loop),
        "set_seconds": round(set_seconds, 2),
        "seconds": round(cost.wall_seconds, 2),
        "per_task": markdown_table(["task", "task set", "capability", "level", "passes / k", "scored", "errors"], [
            (r["task_id"], by_task[r["task_id"]].task_set, by_task[r["task_id"]].capability,
             by_task[r["task_id"]].bundle.difficulty,
             f"{r['passes']}/{r['samples']}", r["scored"], r["errors"]) for r in score.per_task.iter_rows(named=True)]),
    })

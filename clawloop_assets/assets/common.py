"""Helpers shared by the round's assets: rolling a policy out on a round's
tasks and recording the rollouts, recording a phase's cost, and rendering
tables for the UI."""

from typing import Callable, Mapping

import dagster as dg
import polars as pl

from clawloop_assets.cost import PhaseCost, measure
from clawloop_assets.evaluation.fixed_set import rollout_errors
from clawloop_assets.harness.agent_loop import Rollout, rollout_row, run_in_waves, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.round_state import PolicyRef, load_bundles, rollout_temperature, workdir
from clawloop_assets.validation.admission import sequential_waves
from resources.policy import PolicyModel
from resources.warehouse import Warehouse, table_frame

# Concurrency pools, limited in the instance (dagster.production.yaml; the
# rollouts limit by `clawloop setup` from CLAWLOOP_ROLLOUT_POOL_LIMIT). DuckDB
# takes one writer process: the steps whose work is the warehouse run one at a
# time. Rollout steps spend minutes on the policy server and sandboxes and
# write once at the end (a short transaction, retried while the file is
# locked): they run side by side, up to the pool's limit.
WAREHOUSE_WRITER_POOL = "warehouse_writer"
ROLLOUTS_POOL = "rollouts"


def record_cost(warehouse: Warehouse, round_key: str, cost: PhaseCost) -> None:
    warehouse.replace("cost_ledger", table_frame("cost_ledger", [cost.row(round_key)]), {"round": round_key, "phase": cost.phase})


def histogram_table(counts: Mapping[int, int], label: str) -> dg.MetadataValue:
    """A text histogram: the UI renders markdown, so this needs no image store."""
    top = max(counts.values(), default=0) or 1
    rows = [(k, counts[k], "█" * round(20 * counts[k] / top)) for k in sorted(counts)]
    return markdown_table([label, "tasks", ""], rows)


def collect_rollouts(context, warehouse, sandbox, policy: PolicyModel, ref: PolicyRef, task_ids, samples, phase, seed,
                     loop: LoopConfig, is_decided: Callable[[list[Rollout]], bool] | None = None):
    """Roll the policy out on tasks, store the rollouts of this phase, return
    them. With `is_decided` (a task's rollouts so far -> nothing more can
    change what they decide), the samples run in waves (`sequential_waves`)."""
    key = context.partition_key
    bundles = load_bundles(warehouse, key, task_ids)
    settings = loop.agent_settings(rollout_temperature(warehouse, key, loop.scheduled_temperature(key)))
    with measure(phase) as cost:
        session = policy.load(ref.path)
        try:
            directory = workdir(key, "rollouts", phase)
            if is_decided is None:
                rollouts = run_rollouts(session, sandbox, bundles, samples, settings, directory, seed,
                                        progress=context.log.info)
            else:
                rollouts = run_in_waves(session, sandbox, bundles, sequential_waves(loop.admission_band()), settings,
                                        directory, seed, is_decided, progress=context.log.info)
        finally:
            session.close()
        rows = [rollout_row(r, round_key=key, phase=phase, checkpoint_id=ref.checkpoint_id)
                for r in rollouts]
        cost.rollouts = len(rows)
        cost.tokens = sum(r["generated_tokens"] for r in rows)
    frame = table_frame("rollouts", rows)
    warehouse.replace("rollouts", frame, {"round": key, "phase": phase})
    record_cost(warehouse, key, cost)
    return frame, cost


def rollout_metadata(rows: pl.DataFrame, cost, ref: PolicyRef) -> dict:
    scored = rows.filter(pl.col("status") == "scored")
    errors = rollout_errors(rows)
    return {
        "upstream_round": ref.upstream_round or "none (base model)",
        "policy_checkpoint_id": ref.checkpoint_id,
        "rollouts": rows.height,
        "excluded_rollouts": rows.height - scored.height,
        # Harness errors, shown per asset; checks.py blocks the round when there are too many.
        "error_rollouts": sum(errors.values()),
        "errors_by_status": errors,
        "canary_flagged_rollouts": int(rows["canary_seen"].sum()),
        "pass_rate": round(float(scored["reward"].mean()), 4) if scored.height else 0.0,
        "mean_turns": round(float(rows["turns"].mean()), 2) if rows.height else 0.0,
        "generated_tokens_per_second": round(cost.tokens / max(rows["model_seconds"].sum(), 1e-9), 1),
        "seconds": round(cost.wall_seconds, 2),
    }

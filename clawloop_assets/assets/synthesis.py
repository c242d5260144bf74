"""Phase 1a: catalogs, the synthesis plan, generators and candidate tasks."""

import json
import shutil

import dagster as dg

from clawloop_assets.assets.common import WAREHOUSE_WRITER_POOL, record_cost
from clawloop_assets.cost import measure
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.partitions import previous_round, round_number, round_partitions
from clawloop_assets.round_state import input_policy, require_rows, workdir
from clawloop_assets.synthesis import catalogs
from clawloop_assets.synthesis.candidates import (
    CandidateBuild,
    GeneratorSpec,
    build_candidate,
    candidate_assignments,
    task_id_for,
    write_generator,
)
from clawloop_assets.synthesis.evidence import controller_inputs, controller_temperature, warmup_operation_evidence
from clawloop_assets.synthesis.executable_domains import scan_domains
from clawloop_assets.synthesis.model_generators import GeneratorReplyError, generator_prompt, write_model_generator
from clawloop_assets.synthesis.plan import PlanEntry, first_plan, next_plan
from resources.policy import PolicyModel, SamplingParams
from resources.sandbox import Sandbox
from resources.warehouse import Warehouse, table_frame

GROUP = "synthesis"


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL)
def capability_catalog(context: dg.AssetExecutionContext, warehouse: Warehouse, loop: LoopConfig) -> dg.MaterializeResult:
    """The capabilities this round's tasks exercise, from the synthesis routes
    switched on (`loop.synthesis_routes`: the ablation switch)."""
    rows = [
        {"round": context.partition_key, "capability_id": c.id, "track": c.track,
         "description": c.description, "skills": list(c.skills), "route": catalogs.route_of(c.id)}
        for c in catalogs.round_capabilities(loop.synthesis_routes)
    ]
    warehouse.replace("capabilities", table_frame("capabilities", rows), {"round": context.partition_key})
    return dg.MaterializeResult(metadata={
        "capabilities": len(rows),
        "routes": ", ".join(loop.synthesis_routes),
        "catalog": markdown_table(["capability", "route", "track", "description"],
                                  [(r["capability_id"], r["route"], r["track"], r["description"]) for r in rows]),
    })


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL)
def domain_catalog(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """The domains every capability is instantiated in."""
    rows = [
        {"round": context.partition_key, "domain_id": d.id, "entity": d.entity, "vocabulary": json.dumps(d.as_params())}
        for d in catalogs.load_domain_catalog()
    ]
    warehouse.replace("domains", table_frame("domains", rows), {"round": context.partition_key})
    return dg.MaterializeResult(metadata={"domains": len(rows), "domain_ids": ", ".join(r["domain_id"] for r in rows)})


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[capability_catalog])
def synthesis_plan(context: dg.AssetExecutionContext, warehouse: Warehouse, loop: LoopConfig) -> dg.MaterializeResult:
    """Candidates per capability and difficulty, conditioned on round k-1's diagnosis."""
    key = context.partition_key
    capabilities = require_rows(warehouse, "capabilities", key, "capability_catalog")["capability_id"].to_list()
    upstream = previous_round(key)
    plan, temperature, drift = plan_round(warehouse, key, capabilities, loop)
    rows = [
        {"round": key, "capability_id": e.capability_id, "difficulty": e.difficulty, "weight": e.weight,
         "candidates": e.candidates, "source_round": upstream, "reason": e.reason, "knobs": list(e.knobs),
         "operation_weights": json.dumps(e.operation_weights, sort_keys=True) if e.operation_weights else None}
        for e in plan
    ]
    mixes = {e.difficulty: e.operation_weights for e in plan if e.operation_weights}
    warehouse.replace("synthesis_plans", table_frame("synthesis_plans", rows), {"round": key})
    warehouse.replace("rollout_temperatures", table_frame("rollout_temperatures", [temperature]), {"round": key})
    return dg.MaterializeResult(metadata={
        "upstream_round": upstream or "none (round 1 starts from the base curriculum)",
        "pass_rate_drift_logits": _drift_table(drift, loop) if drift else "none (round 1)",
        "rollout_temperature": temperature["temperature"],
        "rollout_temperature_source": temperature["source"],
        "rollout_temperature_reason": temperature["reason"],
        "rollout_temperature_levels": ("every level" if loop.round_temperature_levels == "all" else
                                       f"the warm-up level; the rest at {loop.temperature:g}"),
        "target_admission_rate": loop.target_admission_rate,
        "plan": markdown_table(["capability", "level", "weight", "candidates", "knobs", "why"],
                               [(e.capability_id, e.difficulty, f"{e.weight:.2f}", e.candidates, ", ".join(e.knobs) or "-",
                                 e.reason) for e in plan]),
        "warmup_operation_mix": markdown_table(
            ["level", "operation", "share"],
            [(level, op, f"{share:.0%}") for level, mix in sorted(mixes.items()) for op, share in mix.items()])
        if mixes else "even at every warm-up level (no operation clearly below the band)",
    })


def plan_round(warehouse: Warehouse, key: str, capabilities: list[str], loop: LoopConfig
               ) -> tuple[list[PlanEntry], dict, dict[int, float]]:
    """Round `key`'s plan from the rounds before it (the controller reads
    only those), with its rollout_temperatures row and the drift per level
    the levels saw ({} in round 1). benchmarks/plan_ablation.py replays a
    run's plans through it."""
    if previous_round(key) is None:
        return first_plan(capabilities, loop.candidates_per_round, loop.first_level), rollout_temperature_row(warehouse, key, loop)[0], {}
    # The controller's inputs first: a missing upstream is named by what the plan reads.
    levels, evidence, failure_share, drift, failure_causes = controller_inputs(
        warehouse, key, loop.controller_recency, loop.at_round_temperature)
    temperature, shift = rollout_temperature_row(warehouse, key, loop)
    if shift is not None:
        # The controller moves the temperature: the change between rounds
        # sampled at different temperatures mixes the training's gain with
        # the temperature's cost, and the next round samples at another.
        drift = {level: shift if loop.at_round_temperature(level) else d for level, d in drift.items()}
    plan = next_plan(capabilities, levels, evidence, failure_share, loop.candidates_per_round,
                     loop.controller(), drift, failure_causes,
                     warmup_operation_evidence(warehouse, key, loop.controller_recency))
    return plan, temperature, drift


def _drift_table(drift: dict[int, float], loop: LoopConfig) -> dg.MarkdownMetadataValue:
    """The drift the plan's levels saw, one row for the levels at the round's
    temperature and one for the rest (each group shares one drift)."""
    rows = []
    for served, sampled_at in ((True, "the round's temperature"), (False, f"{loop.temperature:g}")):
        levels = [level for level in sorted(drift) if loop.at_round_temperature(level) == served]
        if levels:
            rows.append((", ".join(map(str, levels)), sampled_at, f"{drift[levels[0]]:+.3f}"))
    return markdown_table(["levels", "sampled at", "drift (logits)"], rows)


def rollout_temperature_row(warehouse: Warehouse, round_key: str, loop: LoopConfig) -> tuple[dict, float | None]:
    """(the rollout_temperatures row of `round_key`, the pass-rate shift the
    levels see): the schedule's temperature (shift None: the levels keep
    estimate_drift), or after it the controller's choice (controller_temperature)."""
    scheduled = loop.scheduled_temperature(round_key)
    if scheduled is not None:
        return {"round": round_key, "temperature": scheduled, "source": "schedule", "predicted_pass_rate": None,
                "pass_rate_shift": None,
                "reason": f"round {round_number(round_key)} of the schedule {loop.round_temperatures}"}, None
    decision = controller_temperature(warehouse, round_key, loop.controller(), loop.at_round_temperature)
    return {"round": round_key, "temperature": decision.temperature, "source": "controller",
            "predicted_pass_rate": decision.predicted_pass_rate, "pass_rate_shift": decision.pass_rate_shift,
            "reason": decision.reason}, decision.pass_rate_shift


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[synthesis_plan, domain_catalog])
def task_generators(context: dg.AssetExecutionContext, warehouse: Warehouse, loop: LoopConfig,
                    policy: PolicyModel) -> dg.MaterializeResult:
    """Generator programs build(seed) -> (workspace, answer key, contract), one per
    capability x domain x level: the built-in families, or (generator_source =
    "model") programs the round's input policy writes, each reply checked and
    rejected with its reason before anything runs."""
    key = context.partition_key
    root = workdir(key, "generators")
    specs = {spec.generator_id: spec for spec, _ in candidate_assignments(warehouse, key)}
    writer = _model_writer(warehouse, policy, loop, key) if loop.generator_source == "model" else None
    rows = []
    for i, spec in enumerate(specs.values()):
        directory = root / spec.generator_id
        if directory.exists():
            shutil.rmtree(directory)
        reason = None
        builtin = writer is None or catalogs.route_of(spec.capability) == "domain"  # the domain route's family is built in
        if builtin:
            write_generator(spec, directory)
        else:
            reason = writer(spec, directory)
            context.log.info(f"generator {i + 1}/{len(specs)} {spec.generator_id}: {reason or 'written'}")
        rows.append({"round": key, "generator_id": spec.generator_id, "capability_id": spec.capability,
                     "domain_id": spec.domain, "difficulty": spec.difficulty, "track": spec.track,
                     "source": "builtin" if builtin else "model", "status": "rejected" if reason else "written",
                     "reason": reason, "path": None if reason else str(directory)})
    warehouse.replace("generators", table_frame("generators", rows), {"round": key})
    rejected = [r for r in rows if r["status"] == "rejected"]
    rejected_domains = scan_domains()[1]  # left out of the domain route, the round goes on with the rest
    return dg.MaterializeResult(metadata={
        "rejected_domains": markdown_table(["domain directory", "reason"], [(d.root, d.reason) for d in rejected_domains]),
        "generators": len(rows),
        "source": loop.generator_source,
        "rejected": len(rejected),
        "rejections": markdown_table(["generator", "reason"], [(r["generator_id"], r["reason"]) for r in rejected[:20]]),
        "path": dg.MetadataValue.path(str(root)),
    })


def _model_writer(warehouse: Warehouse, policy: PolicyModel, loop: LoopConfig, key: str):
    """write(spec, directory) -> rejection reason or None, asking the round's
    input policy for each program; the plan's reason for the capability (what
    the last diagnosis found) is the guidance."""
    session = policy.load(input_policy(warehouse, policy, key).path)
    capabilities = {c.id: c for c in catalogs.load_capability_catalog()}
    domains = {d.id: d for d in catalogs.load_domain_catalog()}
    plan = warehouse.read("synthesis_plans", {"round": key})
    guidance = dict(zip(plan["capability_id"], plan["reason"]))
    # No stop string: the program itself is fenced.
    params = SamplingParams(max_new_tokens=loop.generator_max_tokens, temperature=loop.temperature, stop=(), seed=loop.seed)

    def write(spec: GeneratorSpec, directory) -> str | None:
        messages = generator_prompt(capabilities[spec.capability], domains[spec.domain], spec.difficulty,
                                    guidance.get(spec.capability, ""))
        completion = session.sample([session.chat_tokens(messages, add_generation_prompt=True)], 1, params)[0][0]
        try:
            write_model_generator(spec, completion.text, directory)
        except GeneratorReplyError as exc:
            return f"generator reply rejected: {exc}"
        return None

    return write


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL, deps=[task_generators])
def candidate_tasks(context: dg.AssetExecutionContext, warehouse: Warehouse, sandbox: Sandbox) -> dg.MaterializeResult:
    """Seeded task bundles: each generator run in the sandbox with its seeds."""
    key = context.partition_key
    generators = require_rows(warehouse, "generators", key, "task_generators")
    path_of = dict(zip(generators["generator_id"], generators["path"]))
    rejected = dict(zip(generators["generator_id"], generators["reason"]))
    root = workdir(key, "tasks")
    assignments = candidate_assignments(warehouse, key)
    rows = []
    with measure("synthesis") as cost:
        for i, (spec, seed) in enumerate(assignments):
            if path_of[spec.generator_id] is None:  # its generator was never written
                build = CandidateBuild(task_id_for(key, spec, seed), None, rejected[spec.generator_id], 0.0)
            else:
                build = build_candidate(sandbox, path_of[spec.generator_id], spec, seed, key, root)
            rows.append({
                "round": key, "task_id": build.task_id, "generator_id": spec.generator_id,
                "capability_id": spec.capability, "domain_id": spec.domain, "difficulty": spec.difficulty,
                "track": spec.track, "seed": seed,
                "bundle_path": str(build.bundle_dir) if build.bundle_dir else None,
                "build_status": "built" if build.error is None else "failed",
                "build_error": build.error, "seconds": build.seconds,
            })
            if (i + 1) % 10 == 0 or i + 1 == len(assignments):
                context.log.info(f"built {i + 1}/{len(assignments)} candidates")
    warehouse.replace("tasks", table_frame("tasks", rows), {"round": key})
    record_cost(warehouse, key, cost)
    failed = [r for r in rows if r["build_status"] == "failed"]
    return dg.MaterializeResult(metadata={
        "candidates": len(rows),
        "built": len(rows) - len(failed),
        "build_failures": markdown_table(["task", "reason"], [(r["task_id"], r["build_error"]) for r in failed[:20]]),
        "seconds": round(cost.wall_seconds, 2),
    })

"""The fixed evaluation set (built once, verified, repaired, never drawn by a
round) and its figure (pass@1 over k samples with a Wilson interval), on the
real sandbox and generators; the asset itself with the real embedded model."""

import json
import shutil

import dagster as dg
import pytest

from clawloop_assets.evaluation.fixed_set import (
    EVALUATION_SEED_BASE,
    MANIFEST,
    EvaluationSetError,
    EvaluationSetSpec,
    bundle_digest,
    ensure_own_set,
    evaluation_tasks,
    is_evaluation_seed,
    level_figures,
    own_dir,
    own_task_levels,
    paired_change_by_level,
    pass_at_1,
    pass_at_1_by_level,
    planned_cells,
    planned_tasks,
    sign_test,
    wilson_interval,
)
from clawloop_assets.harbor.task_format import MANIFEST_NAME
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.partitions import round_key
from clawloop_assets.synthesis.candidates import build_candidate, candidate_assignments, task_id_for, write_generator
from clawloop_assets.synthesis.catalogs import ROUTES, round_capabilities
from clawloop_assets.synthesis.plan import first_plan
from resources import paths
from resources.sandbox import BubblewrapSandbox
from resources.warehouse import DuckDBWarehouse, table_frame

# Two families, two seeds each: four tasks, built in a few seconds.
SMALL_SET = EvaluationSetSpec(capabilities=("grouped_statistics", "config_edits"), levels=(0,), seeds_per_cell=2)


def test_the_set_is_the_same_tasks_byte_for_byte_in_any_home(tmp_path, monkeypatch):
    built = {}
    for name in ("first", "second"):
        monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / name))
        set_id, tasks = ensure_own_set(BubblewrapSandbox(), SMALL_SET)
        built[name] = (set_id, {t.task_id: bundle_digest(t.bundle.root) for t in tasks})
    assert built["first"] == built["second"]
    set_id, digests = built["first"]
    assert len(digests) == 4
    # Fewer capabilities pick a subset of the tasks of all of them, never a reshuffle.
    every_capability = EvaluationSetSpec(levels=(0,), seeds_per_cell=2)
    assert set(digests) < {task_id_for("evaluation", g, s) for g, s in planned_tasks(every_capability)}
    assert all(t.startswith("evaluation.") for t in digests)


def test_the_set_is_reused_and_rebuilt_only_when_its_spec_changes(clawloop_home):
    messages = []
    set_id, tasks = ensure_own_set(BubblewrapSandbox(), SMALL_SET, messages.append)
    assert messages == ["building the evaluation set (4 tasks): none built yet"]
    manifest = (own_dir() / MANIFEST).read_text()
    messages.clear()
    again_id, again = ensure_own_set(BubblewrapSandbox(), SMALL_SET, messages.append)
    assert (again_id, [t.task_id for t in again]) == (set_id, [t.task_id for t in tasks])
    assert messages == [] and (own_dir() / MANIFEST).read_text() == manifest
    smaller = EvaluationSetSpec(capabilities=("grouped_statistics",), levels=(0,), seeds_per_cell=1)
    other_id, other = ensure_own_set(BubblewrapSandbox(), smaller, messages.append)
    assert messages == ["building the evaluation set (1 tasks): its spec changed"]
    assert other_id != set_id and len(other) == 1


def test_a_damaged_bundle_is_rebuilt_and_an_unrebuildable_one_is_named(clawloop_home):
    set_id, tasks = ensure_own_set(BubblewrapSandbox(), SMALL_SET)
    victim = tasks[1].bundle
    manifest = json.loads((own_dir() / MANIFEST).read_text())
    recorded = {e["task_id"]: e["sha256"] for e in manifest["tasks"]}
    (victim.root / "answer" / "answer.json").write_text('{"key": "tampered"}')
    messages = []
    repaired_id, _ = ensure_own_set(BubblewrapSandbox(), SMALL_SET, messages.append)
    assert repaired_id == set_id
    assert bundle_digest(victim.root) == recorded[victim.task_id]
    assert messages == [f"evaluation task {victim.task_id} is damaged or missing at {victim.root}: rebuilding it"]
    shutil.rmtree(tasks[0].bundle.root)  # a missing bundle is rebuilt too
    ensure_own_set(BubblewrapSandbox(), SMALL_SET)
    assert bundle_digest(tasks[0].bundle.root) == recorded[tasks[0].task_id]

    # The hash on record no longer matches what its generator builds (as after
    # the family changed): the bundle cannot be restored, and the error says which.
    manifest["tasks"][1]["sha256"] = "0" * 64
    (own_dir() / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(EvaluationSetError, match=f"evaluation bundle {victim.root} is damaged and its rebuild differs"):
        ensure_own_set(BubblewrapSandbox(), SMALL_SET)


def test_imported_bundles_join_the_set_and_a_malformed_one_is_named(clawloop_home):
    sandbox = BubblewrapSandbox()
    imports = paths.evaluation_imports_dir()
    _, own = evaluation_tasks(sandbox, SMALL_SET)  # no imports directory yet: fine
    assert {t.source for t in own} == {"own"}
    # A real bundle landed where the Harbor import puts its tasks.
    [(spec, _)] = planned_tasks(EvaluationSetSpec(capabilities=("log_analysis",)))
    build = build_candidate(sandbox, write_generator(spec, clawloop_home / "gen"), spec, 7, "harbor", imports)
    assert build.ok, build.error
    (imports / ".staging-half-written").mkdir()  # an import in progress is not a task yet
    # Not validated by an import (no manifest lists it): named, never loaded silently.
    with pytest.raises(EvaluationSetError, match="was not validated by `clawloop harbor-import`"):
        evaluation_tasks(sandbox, SMALL_SET)
    task_id = "harbor." + spec.generator_id + ".s7"
    row = {"task_id": task_id, "runnable": True, "sha256": bundle_digest(imports / task_id)}
    (imports / MANIFEST_NAME).write_text(json.dumps({"runnable": [row], "not_runnable": []}))
    _, tasks = evaluation_tasks(sandbox, SMALL_SET)
    imported = [t for t in tasks if t.source == "imported"]
    assert [(t.task_id, t.capability) for t in imported] == [("harbor." + spec.generator_id + ".s7", "log_analysis")]
    assert len(tasks) == len(own) + 1

    # Changed since it was validated: named.
    (imports / task_id / "instruction.md").write_text("something else")
    with pytest.raises(EvaluationSetError, match="changed since `clawloop harbor-import` validated it"):
        evaluation_tasks(sandbox, SMALL_SET)
    (imports / task_id).rename(imports / "broken-task")
    (imports / "broken-task" / "task.toml").write_text("[task]\n")
    row.update(task_id="broken-task", sha256=bundle_digest(imports / "broken-task"))
    (imports / MANIFEST_NAME).write_text(json.dumps({"runnable": [row], "not_runnable": []}))
    with pytest.raises(EvaluationSetError, match="imported evaluation task broken-task is malformed: .*task.toml"):
        evaluation_tasks(sandbox, SMALL_SET)


def test_tasks_validated_only_in_their_own_image_are_named_and_never_loaded(clawloop_home):
    sandbox = BubblewrapSandbox()
    imports = paths.evaluation_imports_dir()
    imports.mkdir(parents=True)
    row = {"task_id": "needs-its-image", "runnable": False, "image": "clawloop-harbor/needs-its-image:0123"}
    (imports / MANIFEST_NAME).write_text(json.dumps({"runnable": [], "image_only": [row], "not_runnable": []}))
    said = []
    _, tasks = evaluation_tasks(sandbox, SMALL_SET, log=said.append)
    assert {t.source for t in tasks} == {"own"}
    assert any("1 imported task(s) validate only in their own image" in m and "needs-its-image" in m for m in said)


def test_the_default_set_is_graded_with_a_seed_of_its_own_for_every_task():
    """Levels -2 to 1 of every capability, two seeds each, one sample: each
    level's interval rests on its own 26 tasks. Every seed is in the
    reserved range and each level has seeds of its own, so a warm-up task
    (one step on the family's level-0 workspace drawn from its seed) never
    shares its workspace with a level-0 task of the set."""
    loop = LoopConfig()
    planned = planned_tasks(loop.evaluation_set())
    capabilities = {c.id for c in round_capabilities(ROUTES)}
    assert (loop.evaluation_samples, len(capabilities)) == (1, 13)
    cells = {(g.capability, g.difficulty) for g, _ in planned}
    assert cells == {(c, level) for c in capabilities for level in (-2, -1, 0, 1)} and len(planned) == 104
    assert len({task_id_for("evaluation", g, s) for g, s in planned}) == len(planned)
    assert all(is_evaluation_seed(s) for _, s in planned)
    by_level = {}
    for generator, seed in planned:
        by_level.setdefault(generator.difficulty, set()).add(seed)
    assert all(len(s) == 2 for s in by_level.values())  # two seeds per level, shared by the capabilities
    assert not set.intersection(*by_level.values())


def test_no_round_ever_draws_an_evaluation_seed_or_task(clawloop_home):
    """Synthesis seeds (round * 1000 + j, j < candidates + 3) stay below the reserved range for every
    round number, even with far more candidates per round than any profile uses:
    for the default set, and for one of more levels and seeds."""
    evaluation_plan = [draw for spec in (LoopConfig().evaluation_set(), LoopConfig(
        evaluation_levels=[-2, -1, 0, 1, 5], evaluation_seeds_per_cell=3).evaluation_set())
        for cell in planned_cells(spec) for draw in cell]  # every draw a cell may fall back to
    assert {g.difficulty for g, _ in evaluation_plan} == {-2, -1, 0, 1, 5}
    evaluation_ids = {task_id_for("evaluation", g, s) for g, s in evaluation_plan}
    assert all(is_evaluation_seed(s) and s < 2**31 for _, s in evaluation_plan)
    warehouse = DuckDBWarehouse()
    capabilities = [c.id for c in round_capabilities(ROUTES)]
    for number, candidates in [(1, 64), (2, 64), (9999, 64), (9999, 5000)]:
        key = round_key(number)
        plan = first_plan(capabilities, candidates, LoopConfig().first_level)
        rows = [{"round": key, "capability_id": e.capability_id, "difficulty": e.difficulty, "weight": e.weight,
                 "candidates": e.candidates, "source_round": None, "reason": e.reason, "knobs": []} for e in plan]
        warehouse.replace("synthesis_plans", table_frame("synthesis_plans", rows), {"round": key})
        assignments = candidate_assignments(warehouse, key)
        assert len(assignments) == candidates
        seeds = [seed for _, seed in assignments]
        assert max(seeds) < EVALUATION_SEED_BASE and not any(is_evaluation_seed(s) for s in seeds), key
        assert not evaluation_ids & {task_id_for(key, spec, seed) for spec, seed in assignments}


def test_a_cell_whose_first_draw_cannot_be_built_takes_its_next_in_every_home(tmp_path, monkeypatch):
    """The domain route's level-1 graph for the second seed of this cell has
    no grounding in the domain that seed picks (the generator says so): the
    cell takes its next draw, a seed no other cell uses, the same in every
    home, and the set verifies as built from then on."""
    spec = EvaluationSetSpec(capabilities=("domain_workflow",), levels=(1,), seeds_per_cell=2)
    cells = planned_cells(spec)
    assert [len(cell) for cell in cells] == [8, 8]
    seeds = [seed for cell in cells for _, seed in cell]
    assert len(set(seeds)) == len(seeds)
    built = {}
    for name in ("first", "second"):
        monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / name))
        said = []
        _, tasks = ensure_own_set(BubblewrapSandbox(), spec, said.append)
        built[name] = sorted(t.task_id for t in tasks)
        assert len(tasks) == 2
        fell_back = [m for m in said if "took the cell's next draw" in m]
        assert len(fell_back) == 1 and "no grounding" in fell_back[0], said
        assert task_id_for("evaluation", *cells[1][0]) not in built[name]
        said.clear()
        ensure_own_set(BubblewrapSandbox(), spec, said.append)
        assert said == []  # verified, nothing rebuilt
    assert built["first"] == built["second"]


def test_wilson_interval_by_hand():
    # p = 0.45 over n = 4 tasks, z = 1.959964: z^2 = 3.841459, z^2/n = 0.960365,
    # center = (0.45 + 3.841459/8) / 1.960365 = 0.930182 / 1.960365 = 0.474494,
    # half = 1.959964/1.960365 * sqrt(0.45*0.55/4 + 3.841459/64)
    #      = 0.999795 * sqrt(0.061875 + 0.060023) = 0.999795 * 0.349139 = 0.349068.
    low, high = wilson_interval(0.45, 4)
    assert low == pytest.approx(0.474494 - 0.349068, abs=1e-5)
    assert high == pytest.approx(0.474494 + 0.349068, abs=1e-5)
    # Nothing passed on 12 tasks: [0, z^2/(n + z^2)] = [0, 3.841459/15.841459], not [0, 0].
    low, high = wilson_interval(0.0, 12)
    assert low == pytest.approx(0.0, abs=1e-12) and high == pytest.approx(3.841459 / 15.841459, abs=1e-6)
    with pytest.raises(ValueError, match="at least one task"):
        wilson_interval(0.5, 0)


def _rollouts(outcomes):
    return table_frame("rollouts", [
        {"round": "round-0001", "rollout_id": f"{task}.evaluation.{i}", "task_id": task, "phase": "evaluation",
         "status": status, "reward": reward, "sample_index": i}
        for task, samples in outcomes.items() for i, (status, reward) in enumerate(samples)])


def test_pass_at_1_averages_each_tasks_samples_then_the_tasks():
    scored = ("scored", 1.0), ("scored", 0.0)
    frame = _rollouts({
        "a": [("scored", 1.0)] * 5,  # 5/5 -> 1.0
        "b": [("scored", 1.0)] * 3 + [("scored", 0.0), ("sandbox_error", None)],  # the error is not a pass: 3/5
        "c": [scored[1]] * 4 + [scored[0]],  # 1/5 -> 0.2
        "d": [scored[1]] * 5,  # 0/5 -> 0.0
        "e": [("policy_error", None)] * 5,  # nothing scored: 0/5, still a task of the mean and of the interval
    })
    result = pass_at_1(frame)
    # (1.0 + 0.6 + 0.2 + 0.0 + 0.0) / 5 = 0.36, Wilson over n = 5 tasks.
    assert result.pass_at_1 == pytest.approx(0.36) and result.tasks == 5 and result.errors == 6
    low, high = wilson_interval(0.36, 5)
    assert (result.ci_low, result.ci_high) == (round(low, 4), round(high, 4))
    per_task = {r["task_id"]: (r["passes"], r["scored"], r["errors"], r["samples"])
                for r in result.per_task.iter_rows(named=True)}
    assert per_task == {"a": (5, 5, 0, 5), "b": (3, 4, 1, 5), "c": (1, 5, 0, 5), "d": (0, 5, 0, 5), "e": (0, 0, 5, 5)}
    errored = pass_at_1(_rollouts({"e": [("policy_error", None)]}))
    assert (errored.pass_at_1, errored.tasks, errored.errors) == (0.0, 1, 1)
    nothing = pass_at_1(_rollouts({}))
    assert (nothing.pass_at_1, nothing.ci_low, nothing.ci_high, nothing.tasks) == (None, None, None, 0)


def test_pass_at_1_by_level_splits_the_own_set_and_leaves_imports_out():
    frame = _rollouts({
        "w1": [("scored", 1.0)], "w2": [("scored", 1.0)], "w3": [("scored", 0.0)],  # level -2: 2/3
        "z1": [("scored", 0.0)], "z2": [("sandbox_error", None)],  # level 0: 0/2, the error a task all the same
        "harbor.x": [("scored", 1.0)],  # an imported benchmark's: no level of ours
    })
    levels = {"w1": -2, "w2": -2, "w3": -2, "z1": 0, "z2": 0}
    by_level = pass_at_1_by_level(frame, levels)
    assert list(by_level) == [-2, 0]
    warm = by_level[-2]
    assert (warm.pass_at_1, warm.tasks) == (pytest.approx(0.6667), 3)
    assert (warm.ci_low, warm.ci_high) == tuple(round(x, 4) for x in wilson_interval(2 / 3, 3))
    assert (by_level[0].pass_at_1, by_level[0].tasks, by_level[0].errors) == (0.0, 2, 1)
    assert level_figures(by_level) == {
        "-2": {"pass_at_1": warm.pass_at_1, "ci_low": warm.ci_low, "ci_high": warm.ci_high, "tasks": 3},
        "0": {"pass_at_1": 0.0, "ci_low": 0.0, "ci_high": by_level[0].ci_high, "tasks": 2}}


def test_sign_test_matches_the_binomial_tails():
    assert sign_test(15, 1) == pytest.approx(2 * 17 / 2**16)
    assert sign_test(1, 15) == sign_test(15, 1)
    assert sign_test(12, 2) == pytest.approx(2 * (1 + 14 + 91) / 2**14)
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0  # capped; nothing moved


def test_paired_change_compares_each_level_task_by_task_over_the_tasks_both_rounds_sampled():
    before = _rollouts({
        "r1": [("scored", 1.0)], "r2": [("scored", 0.0)], "r3": [("scored", 0.0)],
        "z1": [("scored", 0.0), ("scored", 1.0)], "z2": [("scored", 0.0), ("scored", 0.0)],
    })
    after = _rollouts({
        "r1": [("scored", 0.0)], "r2": [("scored", 1.0)], "r3": [("sandbox_error", None)],  # an error is no pass
        "z1": [("scored", 1.0), ("scored", 1.0)], "z2": [("scored", 0.0), ("scored", 0.0)],
        "z3": [("scored", 1.0)],  # sampled after only: not compared
    })
    levels = {"r1": -1, "r2": -1, "r3": -1, "z1": 0, "z2": 0, "z3": 0}
    change = paired_change_by_level(before, after, levels)
    assert [(level, c.tasks, c.rose, c.fell, c.p_value) for level, c in change.items()] == [
        (-1, 3, 1, 1, 1.0), (0, 2, 1, 0, 1.0)]
    assert paired_change_by_level(_rollouts({}), after, levels) == {}


def test_a_graded_set_records_each_tasks_level_and_its_warm_up_tasks_their_operation(clawloop_home):
    """Built on the real sandbox and generators: the manifest's level of each
    task (what splits the round's figure) is the bundle's, and a warm-up
    task's meta.json names the operation it asks for (what the diagnosis
    groups by); a level -1 task asks for its capability."""
    from clawloop_assets.diagnosis.failures import OPERATION_PHRASE, task_skill

    spec = EvaluationSetSpec(capabilities=("grouped_statistics", "config_edits"), levels=(-2, -1, 0, 1))
    assert own_task_levels() == {}  # nothing built yet
    _, tasks = ensure_own_set(BubblewrapSandbox(), spec)
    levels = own_task_levels()
    assert levels == {t.task_id: t.bundle.difficulty for t in tasks}
    assert sorted(levels.values()) == [-2, -2, -1, -1, 0, 0, 1, 1]
    for task in tasks:
        skill = task_skill(task.capability, task.bundle.difficulty, task.bundle.root)
        assert (skill in OPERATION_PHRASE) == (task.bundle.difficulty == -2), (task.task_id, skill)
        assert (skill == task.capability) == (task.bundle.difficulty >= -1), (task.task_id, skill)


def test_errors_never_raise_pass_at_1():
    # Two tasks, five samples each, one honest pass: 0.1. The same failures
    # turned into verifier errors must not read better (they read 1.0 when
    # only scored samples counted).
    honest = {"a": [("scored", 1.0)] + [("scored", 0.0)] * 4, "b": [("scored", 0.0)] * 5}
    hidden = {"a": [("scored", 1.0)] + [("verifier_error", None)] * 4, "b": [("verifier_error", None)] * 5}
    assert pass_at_1(_rollouts(honest)).pass_at_1 == pytest.approx(0.1)
    result = pass_at_1(_rollouts(hidden))
    assert result.pass_at_1 == pytest.approx(0.1) and result.tasks == 2 and result.errors == 9


def test_bad_evaluation_knobs_are_named():
    with pytest.raises(ValueError, match=r"evaluation capabilities \['juggling'\] are unknown"):
        LoopConfig(evaluation_capabilities=["juggling"])
    with pytest.raises(ValueError, match="evaluation levels must be a non-empty list within -2..5, got \\[7\\]"):
        LoopConfig(evaluation_levels=[7])
    with pytest.raises(ValueError, match="evaluation_samples must be at least 1"):
        LoopConfig(evaluation_samples=0)


@pytest.mark.slow
def test_the_evaluation_asset_with_the_real_model(clawloop_home, base_checkpoint_dir):
    from clawloop_assets.definitions import round_assets
    from resources.checkpoints import checkpoint_id
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.training_launcher import SubprocessTrainingLauncher

    key = "round-0001"
    warehouse = DuckDBWarehouse()
    # The round's trained policy is the base model here: the asset reads whatever policy_checkpoint registered.
    ckpt = checkpoint_id(base_checkpoint_dir)
    warehouse.replace("checkpoints", table_frame("checkpoints", [
        {"round": key, "checkpoint_id": ckpt, "kind": "policy", "path": str(base_checkpoint_dir),
         "parent_checkpoint_id": None}]), {"round": key, "kind": "policy"})
    loop = LoopConfig(evaluation_capabilities=["grouped_statistics", "entity_resolution"], evaluation_levels=[-1, 0],
                      evaluation_seeds_per_cell=1, evaluation_samples=3)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [key])
    result = dg.materialize(round_assets, selection="evaluation", partition_key=key, instance=instance, resources={
        "policy": EmbeddedPolicyModel(), "sandbox": BubblewrapSandbox(), "warehouse": warehouse, "loop": loop,
        "training_launcher": SubprocessTrainingLauncher()})  # the graph's other assets need it, this one does not
    assert result.success
    [materialization] = result.asset_materializations_for_node("evaluation")
    metadata = {k: v.value for k, v in materialization.metadata.items()}
    rollouts = warehouse.read("rollouts", {"round": key, "phase": "evaluation"})
    assert rollouts.height == 4 * 3 and set(rollouts["checkpoint_id"]) == {ckpt}
    assert metadata["evaluation_tasks"] == 4 and metadata["own_tasks"] == 4 and metadata["imported_tasks"] == 0
    # Every sample counts: one that errored is not a pass.
    per_task = [rollouts.filter((rollouts["task_id"] == t) & (rollouts["status"] == "scored"))["reward"].sum() / 3
                for t in sorted(set(rollouts["task_id"]))]
    assert metadata["evaluation_pass_at_1"] == pytest.approx(sum(per_task) / len(per_task), abs=1e-4)
    assert metadata["error_rollouts"] == int((rollouts["status"] != "scored").sum())
    assert metadata["evaluation_ci_low"] <= metadata["evaluation_pass_at_1"] <= metadata["evaluation_ci_high"]
    assert "| evaluation.grouped_statistics." in metadata["per_task"] and "/3 |" in metadata["per_task"]
    # Each level apart, two tasks each, its figure the mean of its tasks' (the own set has no other).
    levels = own_task_levels()
    by_level = metadata["evaluation_by_level"]
    assert list(by_level) == ["-1", "0"] and all(part["tasks"] == 2 for part in by_level.values())
    for level in (-1, 0):
        mine = [rate for t, rate in zip(sorted(set(rollouts["task_id"])), per_task) if levels[t] == level]
        assert by_level[str(level)]["pass_at_1"] == pytest.approx(sum(mine) / 2, abs=1e-4)
        assert metadata[f"pass_at_1[L{level}]"] == by_level[str(level)]["pass_at_1"]
        assert metadata[f"ci_low[L{level}]"] <= metadata[f"pass_at_1[L{level}]"] <= metadata[f"ci_high[L{level}]"]
    assert "| -1 | 2 |" in metadata["by_level"] and "| 0 | 2 |" in metadata["by_level"]
    [cost] = warehouse.read("cost_ledger", {"round": key, "phase": "evaluation"}).iter_rows(named=True)
    assert cost["rollouts"] == 12 and cost["tokens"] > 0 and cost["wall_seconds"] > 0

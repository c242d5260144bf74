"""Transfer: export a round's admitted pool and train a base model on it, RL only.

The pool comes from a warehouse holding one round's rows for tasks built by
the real generators; the slow test trains the real embedded model on it."""

import json
import shutil

import polars as pl
import pytest

from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis import catalogs
from clawloop_assets.synthesis.candidates import build_candidate, generator_spec, write_generator
from clawloop_assets.training.transfer import PoolError, export_pool, load_pool, transfer_rl_only
from resources.sandbox import BubblewrapSandbox
from resources.warehouse import DuckDBWarehouse, table_frame

ROUND = "round-0001"


def record_round(tmp_path, specs: list[tuple[str, str, int]], admitted: int, heldout: set[int]):
    """A round's rows in the warehouse for level-0 tasks (capability, domain,
    seed) built by the real generators: the first `admitted` are admitted,
    those at the indices in `heldout` held out, the other admitted ones trained on."""
    capabilities = {c.id: c for c in catalogs.load_capability_catalog()}
    domains = {d.id: d for d in catalogs.load_domain_catalog()}
    tasks, admissions, splits = [], [], []
    for i, (capability_id, domain_id, seed) in enumerate(specs):
        capability, domain = capabilities[capability_id], domains[domain_id]
        spec = generator_spec(capability, domain, 0)
        generator = write_generator(spec, tmp_path / "generators" / spec.generator_id)
        build = build_candidate(BubblewrapSandbox(), generator, spec, seed, ROUND, tmp_path / "tasks")
        assert build.error is None, build.error
        task_id = build.bundle_dir.name
        tasks.append({"round": ROUND, "task_id": task_id, "generator_id": spec.generator_id, "capability_id": capability.id,
                      "domain_id": domain.id, "difficulty": 0, "track": capability.track, "seed": seed,
                      "bundle_path": str(build.bundle_dir), "build_status": "built", "build_error": None, "seconds": 0.1})
        is_admitted = i < admitted
        admissions.append({"round": ROUND, "task_id": task_id, "pass_count": 3 if is_admitted else 8, "scored_rollouts": 8,
                           "excluded_rollouts": 0, "admitted": is_admitted,
                           "decision": "admitted" if is_admitted else "too_easy"})
        if is_admitted:
            splits.append({"round": ROUND, "task_id": task_id, "split": "heldout" if i in heldout else "train"})
    warehouse = DuckDBWarehouse()
    for table, rows in (("tasks", tasks), ("admissions", admissions), ("task_splits", splits)):
        warehouse.replace(table, table_frame(table, rows), {"round": ROUND})
    return warehouse, [t["task_id"] for t in tasks]


@pytest.fixture
def round_with_admissions(clawloop_home, tmp_path):
    """Six tasks: four admitted (three train, one held out), two not."""
    domain = catalogs.load_domain_catalog()[0].id
    specs = [("file_reorganization", domain, seed) for seed in range(11, 17)]
    return record_round(tmp_path, specs, admitted=4, heldout={3})


def test_export_pool_copies_the_admitted_tasks_with_their_splits(round_with_admissions, tmp_path):
    warehouse, task_ids = round_with_admissions
    pool = export_pool(warehouse, ROUND, tmp_path / "pool")

    manifest, bundles = load_pool(pool)
    assert manifest["round"] == ROUND
    assert sorted(t["task_id"] for t in manifest["tasks"]) == sorted(task_ids[:4])
    assert [b.task_id for b in bundles["train"]] == sorted(task_ids[:3])
    assert [b.task_id for b in bundles["heldout"]] == [task_ids[3]]
    assert all(t["pass_count"] == 3 for t in manifest["tasks"])
    assert not any(p.name.startswith(".pool.tmp-") for p in tmp_path.iterdir())
    with pytest.raises(PoolError, match="already exists"):
        export_pool(warehouse, ROUND, pool)


def test_a_damaged_pool_is_refused_naming_what_is_wrong(round_with_admissions, tmp_path):
    warehouse, task_ids = round_with_admissions
    pool = export_pool(warehouse, ROUND, tmp_path / "pool")
    with pytest.raises(PoolError, match="no pool.json"):
        load_pool(tmp_path)
    (pool / "tasks" / task_ids[0] / "tests" / "verify.py").unlink()
    with pytest.raises(Exception, match=f"{task_ids[0]}.*verify.py|verify.py.*{task_ids[0]}"):
        load_pool(pool)
    shutil.rmtree(pool / "tasks" / task_ids[0])
    manifest = json.loads((pool / "pool.json").read_text())
    manifest["tasks"] = [dict(t, split="test") if t["task_id"] == task_ids[1] else t for t in manifest["tasks"][1:]]
    (pool / "pool.json").write_text(json.dumps(manifest))
    with pytest.raises(PoolError, match=f"task '{task_ids[1]}' has split 'test'"):
        load_pool(pool)


def test_a_round_that_admitted_nothing_has_no_pool(round_with_admissions, tmp_path):
    warehouse, _ = round_with_admissions
    rows = warehouse.read("admissions", {"round": ROUND}).with_columns(pl.lit(False).alias("admitted"))
    warehouse.replace("admissions", rows, {"round": ROUND})
    with pytest.raises(PoolError, match="admitted no task"):
        export_pool(warehouse, ROUND, tmp_path / "pool")
    assert not (tmp_path / "pool").exists()


@pytest.mark.slow
def test_transfer_trains_the_base_model_on_the_pool_with_grpo_only(clawloop_home, base_checkpoint_dir, tmp_path):
    from resources.embedded_policy import EmbeddedPolicyModel

    # Level-0 tasks that a round with 192 candidates admitted, on which the
    # embedded model passed 7, 4, 6 and 3 of 16 samples: eight samples a task
    # give GRPO groups with a reward variance.
    specs = [("file_reorganization", "museum_artifact_loans", 1006), ("multi_module_refactor", "bikeshare_dock_audits", 1001),
             ("multi_module_refactor", "blood_bank_unit_inventory", 1013),
             ("multi_module_refactor", "ferry_crossing_manifests", 1009)]
    warehouse, _ = record_round(tmp_path, specs, admitted=4, heldout={3})
    pool = export_pool(warehouse, ROUND, tmp_path / "pool")
    policy = EmbeddedPolicyModel(model_cache_dir=str(base_checkpoint_dir.parent))
    loop = LoopConfig(max_turns=1)

    summary = transfer_rl_only(pool, base_checkpoint_dir, tmp_path / "transfer", policy, BubblewrapSandbox(),
                               loop.agent_settings(), loop.training_job_config("grpo"), loop.seed, samples=8,
                               log=lambda m: None)

    assert summary["mode"] == "grpo_only" and summary["grpo_steps"] >= 1
    assert summary["policy_checkpoint_id"] != summary["base_checkpoint_id"]
    # The groups GRPO trained on are the base model's own training-split
    # rollouts: the before-rate is theirs, and only groups with a reward
    # variance carry a signal.
    examples = [json.loads(line) for line in (tmp_path / "transfer" / "grpo_examples.jsonl").read_text().splitlines()]
    rewards: dict[str, list[float]] = {}
    for example in examples:
        rewards.setdefault(example["group_id"], []).append(example["reward"])
    assert len(rewards) == summary["train_tasks"] == 3 and all(len(r) <= 8 for r in rewards.values())
    every_reward = [r for group in rewards.values() for r in group]
    assert summary["train_pass_rate_before"] == pytest.approx(sum(every_reward) / len(every_reward), abs=1e-4)
    assert 1 <= summary["grpo_groups_used"] <= sum(len(set(r)) > 1 for r in rewards.values())
    # Every rate is a share of whole samples: 3 x 8 training, 1 x 8 held-out.
    for key, samples in (("train_pass_rate_after", 24), ("heldout_pass_rate_before", 8), ("heldout_pass_rate_after", 8)):
        assert summary[key] * samples == pytest.approx(round(summary[key] * samples), abs=0.01), key
    # GRPO moved the policy the way its groups pointed: the trained model puts
    # more advantage-weighted log-likelihood on the very samples it trained on.
    # Weights that merely changed (weight decay, a vanishing step) do not pass.
    examples_file = tmp_path / "transfer" / "grpo_examples.jsonl"
    before = advantage_weighted_logprob(base_checkpoint_dir, examples_file)
    after = advantage_weighted_logprob(tmp_path / "transfer" / "policy", examples_file)
    assert after - before > 1.0, (before, after)
    assert json.loads((tmp_path / "transfer" / "transfer.json").read_text()) == summary


def advantage_weighted_logprob(checkpoint, examples_file) -> float:
    """sum over rollouts of (group-normalized advantage x log-probability of
    the rollout's own action tokens) under `checkpoint`, loaded as the
    training jobs load one (a verified checkpoint): what a GRPO step climbs."""
    import torch

    from training_jobs.optimization import load_verified_model
    from training_jobs.policy_gradient import group_advantages, token_logprobs
    from training_jobs.trajectories import load_trajectories, pad_batch

    trajectories = load_trajectories(examples_file)
    advantages = group_advantages([t.reward for t in trajectories], [t.group_id for t in trajectories]).advantages
    model = load_verified_model(checkpoint).eval()
    total = 0.0
    with torch.no_grad():
        for start in range(0, len(trajectories), 4):
            batch = pad_batch(trajectories[start:start + 4])
            logprobs = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.temperature,
                                      batch.target_action_mask).sum(-1)
            total += float((torch.tensor(advantages[start:start + 4]) * logprobs).sum())
    return total

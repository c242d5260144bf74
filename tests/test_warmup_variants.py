"""benchmarks/warmup_variants.py: a run's warm-up variants read from a real
warehouse, the ceiling any variant mix could reach, and the predictors'
errors, on a two-round run written by hand."""

import json
import math

import pytest

from benchmarks.warmup_variants import best_mix_admission, ceilings, predictor_errors, read_run, report
from resources.warehouse import DuckDBWarehouse, table_frame


def test_the_best_mix_fills_the_floors_then_the_best_variants_up_to_the_cap():
    # Shares 0.5, 0.47, 0.03: 0.45 + 0.235 + 0.003.
    assert best_mix_admission([0.1, 0.9, 0.5], cap=0.5, floor=0.03) == pytest.approx(0.688)
    # Without a cap the best takes all but the floors; with an even cap, the mean.
    assert best_mix_admission([0.1, 0.9, 0.5], cap=1.0, floor=0.03) == pytest.approx(0.94 * 0.9 + 0.03 * (0.5 + 0.1))
    assert best_mix_admission([0.1, 0.9, 0.5], cap=1 / 3) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no mix of 3 variants"):
        best_mix_admission([0.1, 0.9, 0.5], cap=0.25)


def rollout(round_key, task, phase, i, reward):
    return {"round": round_key, "rollout_id": f"{task}.{phase}.{i}", "task_id": task, "phase": phase,
            "checkpoint_id": "c", "sample_index": i, "status": "scored", "reward": float(reward), "error": None,
            "turns": 1, "submitted": True, "canary_seen": False, "commands": [], "exit_codes": [], "last_output": "",
            "verifier_checks": "[]", "token_ids": [], "action_mask": [], "sampling_logprobs": [], "temperature": 0.7,
            "prompt_tokens": 1, "generated_tokens": 1, "model_seconds": 0.0, "sandbox_seconds": 0.0}


def write_run(tmp_path):
    """Two rounds: copy at -2 (two tasks a round, 16 rollouts each, one
    admitted in round 1) and a level-0 task the report leaves out; round 2
    stopped after its held-out baseline."""
    warehouse = DuckDBWarehouse(path=str(tmp_path / "warehouse.duckdb"))
    # (round, task, level, operation, validation passes of 16, admitted, before, after (of 16))
    plan = [("round-0001", "a", -2, "copy_file", 4, True, 4, 12), ("round-0001", "b", -2, "copy_file", 0, False, None, None),
            ("round-0001", "z", 0, None, 0, False, None, None),
            ("round-0002", "c", -2, "copy_file", 10, True, None, None), ("round-0002", "d", -2, "copy_file", 12, True, None, None)]
    for round_key in ("round-0001", "round-0002"):
        tasks, admissions, rollouts = [], [], []
        for r, task, level, operation, passes, admitted, before, after in plan:
            if r != round_key:
                continue
            bundle = tmp_path / "bundles" / task
            bundle.mkdir(parents=True)
            (bundle / "meta.json").write_text(json.dumps({"operation": operation} if operation else {}))
            tasks.append({"round": r, "task_id": task, "generator_id": "g", "capability_id": "cap", "domain_id": "dom",
                          "difficulty": level, "track": "t", "seed": 0, "bundle_path": str(bundle),
                          "build_status": "built", "build_error": None, "seconds": 0.1})
            admissions.append({"round": r, "task_id": task, "pass_count": passes // 2, "scored_rollouts": 8,
                               "excluded_rollouts": 0, "admitted": admitted, "decision": "admitted" if admitted else "too_hard"})
            rollouts += [rollout(r, task, "validation", i, i < passes) for i in range(16)]
            for phase, count in (("train_before", before), ("train_after", after)):
                if count is not None:
                    rollouts += [rollout(r, task, phase, i, i < count) for i in range(16)]
        # The held-out split: 8 of 32 passes before training, 16 of 32 after.
        # Round 2 stopped before its training ended: no held-out rerun after.
        for phase, count in (("heldout_before", 8), ("heldout_after", 16))[: 2 if round_key == "round-0001" else 1]:
            rollouts += [rollout(round_key, "h", phase, i, i < count) for i in range(32)]
        warehouse.replace("tasks", table_frame("tasks", tasks), {"round": round_key})
        warehouse.replace("admissions", table_frame("admissions", admissions), {"round": round_key})
        warehouse.replace("rollouts", table_frame("rollouts", rollouts), {"round": round_key})
    return warehouse


def test_a_runs_variants_are_read_by_round_with_the_held_out_drift(tmp_path):
    variants, drift = read_run(write_run(tmp_path))
    assert [(v.round, v.variant, v.candidates, v.admitted) for v in variants] == [
        ("round-0001", (-2, "copy_file"), 2, 1), ("round-0002", (-2, "copy_file"), 2, 2)]
    first, second = variants
    assert (first.validation.passes, first.validation.rollouts) == (4, 32)
    assert (first.before.passes, first.after.passes, first.after.rollouts) == (4, 12, 16)
    assert (second.validation.passes, second.validation.rollouts) == (22, 32)
    expected_drift = math.log(16.5 / 16.5) - math.log(8.5 / 24.5)  # smoothed by half a pass
    assert drift == pytest.approx({"round-0001": expected_drift})
    # One pair (round 1 -> 2) to predict; e.g. the first predictor's error:
    errors = predictor_errors([(variants, drift)])
    assert {len(e) for e in errors.values()} == {1}
    truth = math.log(22.5 / 10.5)
    assert errors["this round's validation + held-out drift"][0] == pytest.approx(
        abs(math.log(4.5 / 28.5) + expected_drift - truth))
    assert errors["after training, on the round's admitted tasks"][0] == pytest.approx(abs(math.log(12.5 / 4.5) - truth))
    # Too few candidates of a variant to say anything of its rate: no ceiling.
    assert ceilings(variants) == {}
    assert ceilings(variants, min_candidates=2) == {"round-0001": {c: 0.5 for c in (0.25, 0.4, 0.5, 1.0)},
                                                      "round-0002": {c: 1.0 for c in (0.25, 0.4, 0.5, 1.0)}}
    text = report([tmp_path])
    assert "| round-0001 | -2 | copy_file | 1/2 (50%) | 4/32 (12%) | 4/16 (25%) -> 12/16 (75%) |" in text

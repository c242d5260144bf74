import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox

from benchmarks import sandbox_overhead
from clawloop_assets.catalogs import load_capability_catalog
from clawloop_assets.curriculum import LEVELS


@pytest.mark.parametrize("backend", SANDBOX_BACKENDS)
def test_sandbox_overhead_is_reported_as_a_ratio_to_bare_bash(backend):
    results = sandbox_overhead.measure({backend: make_sandbox(backend)}, repeats=3)
    assert results[f"sandbox.{backend}.overhead_ratio"] == (
        results[f"sandbox.{backend}.command_seconds"] / results["sandbox.bare_bash_seconds"]
    )
    # A sandbox does strictly more work than the bare command it wraps.
    assert results[f"sandbox.{backend}.overhead_ratio"] > 1


def test_synthesis_throughput_reports_rates_per_rejection_kind():
    from benchmarks import synthesis_throughput

    capabilities = len(load_capability_catalog())
    plan = synthesis_throughput.candidate_plan(capabilities * len(LEVELS))
    # Any prefix of the plan spreads over every capability, then every level.
    assert len({c[0].id for c in plan[:capabilities]}) == capabilities and len({c[2] for c in plan}) == len(LEVELS)
    results = synthesis_throughput.measure(count=6, workers=2)
    assert results["synthesis.candidates"] == 6 and results["synthesis.candidates_per_second"] > 0
    kinds = sum(v for k, v in results.items() if k.startswith("synthesis.rejections."))
    assert kinds == pytest.approx(results["synthesis.rejection_rate"])


# One small GRPO group for the tiny model: 4 rollouts, 16 prompt tokens, 6-10 action tokens.
TINY_TRAINING_BATCH = dict(rollouts=4, prompt_tokens=16, action_tokens=8, action_spread=2)


@pytest.fixture(scope="module")
def tiny_training_checkpoint(tmp_path_factory):
    """A random 2-layer Llama (vocab 128) with a word-level tokenizer over the
    same 128 ids: TRL's trainers want a tokenizer (GRPO pads with its pad id)."""
    import torch
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=128,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    directory = tmp_path_factory.mktemp("models") / "tiny"
    LlamaForCausalLM(config).save_pretrained(directory)
    words = Tokenizer(models.WordLevel({f"t{i}": i for i in range(128)}, unk_token="t0"))
    PreTrainedTokenizerFast(tokenizer_object=words, pad_token="t0", eos_token="t1", unk_token="t0").save_pretrained(
        directory
    )
    return directory


def assert_training_ratios(results: dict[str, float]) -> None:
    import math

    for job in ("grpo", "sft"):
        for what in ("step_seconds", "peak_rss_mb"):
            ours, trl = results[f"training.{job}_{what}"], results[f"training.{job}_{what}_trl"]
            assert math.isfinite(ours) and ours > 0 and math.isfinite(trl) and trl > 0
        assert results[f"training.{job}_step_ratio_vs_trl"] == (
            results[f"training.{job}_step_seconds"] / results[f"training.{job}_step_seconds_trl"]
        )
        assert results[f"training.{job}_peak_memory_ratio_vs_trl"] == (
            results[f"training.{job}_peak_rss_mb"] / results[f"training.{job}_peak_rss_mb_trl"]
        )


def test_training_steps_agree_with_trl_and_are_reported_as_ratios(tiny_training_checkpoint, tmp_path):
    """Each side in this process (measure() gives each its own, for the peak RSS)."""
    import torch

    from benchmarks import training_steps

    spec = training_steps.BatchSpec(**TINY_TRAINING_BATCH)
    batch_path = tmp_path / "batch.pt"
    torch.save(training_steps.make_batch(training_steps.load_model(tiny_training_checkpoint), spec), batch_path)
    results, first_steps = {}, {}
    for job in ("grpo", "sft"):
        ours = training_steps.run_side(f"{job}_ours", tiny_training_checkpoint, batch_path, steps=1)
        # Same first loss and gradient norm as ours, or run_side raises.
        trl = training_steps.run_side(
            f"{job}_trl", tiny_training_checkpoint, batch_path, steps=1, expect=ours["first_step"]
        )
        assert trl["first_step"]["loss"] == pytest.approx(ours["first_step"]["loss"], rel=1e-4)
        first_steps[job] = ours["first_step"]
        results.update(training_steps.job_results(job, ours, trl))
    assert_training_ratios(results)
    # TRL's "grpo" loss averages per sequence first: with unequal action lengths it is another loss.
    with pytest.raises(training_steps.LossMismatch, match="loss"):
        training_steps.run_side(
            "grpo_trl",
            tiny_training_checkpoint,
            batch_path,
            steps=1,
            expect=first_steps["grpo"],
            trl_overrides={"loss_type": "grpo"},
        )


@pytest.mark.slow  # five Python processes that import torch, transformers and TRL: about 30 s
def test_training_steps_measure_runs_each_side_in_its_own_process(tiny_training_checkpoint):
    from benchmarks import training_steps

    assert_training_ratios(
        training_steps.measure(tiny_training_checkpoint, training_steps.BatchSpec(**TINY_TRAINING_BATCH), steps=1)
    )


@pytest.mark.slow
def test_sequential_rollouts_make_the_same_decisions_with_no_more_rollouts():
    from benchmarks import sequential_rollouts

    result = sequential_rollouts.measure(tasks_per_capability=1)
    assert result["sequential_rollouts.same_decisions"] is True
    assert result["sequential_rollouts.rollouts_fixed"] == 8 * result["sequential_rollouts.tasks"]
    assert 0 <= result["sequential_rollouts.rollouts_saved_fraction"] < 1

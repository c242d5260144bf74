from pathlib import Path

import pytest
from conftest import SANDBOX_BACKENDS, make_sandbox

from benchmarks import sandbox_overhead
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.catalogs import load_capability_catalog
from clawloop_assets.synthesis.plan import LEVELS
from resources.policy import PolicySession


@pytest.mark.parametrize("backend", SANDBOX_BACKENDS)
def test_sandbox_overhead_runs_the_command_in_the_real_sandbox(backend, monkeypatch, tmp_path):
    sandbox = make_sandbox(backend)
    outputs = []
    real_run = sandbox.run

    def run(*args, **kwargs):
        outputs.append(real_run(*args, **kwargs))
        return outputs[-1]

    monkeypatch.setattr(type(sandbox), "run", lambda self, *a, **k: run(*a, **k))
    results = sandbox_overhead.measure({backend: sandbox}, repeats=3)
    assert len(outputs) == 4 and all(o.exit_code == 0 and o.output.strip() == "3" for o in outputs)
    assert results[f"sandbox.{backend}.overhead_ratio"] > 1  # a sandbox wraps the bare command


def test_sandbox_overhead_is_the_median_command_time_over_the_median_bare_time(monkeypatch):
    """On a clock that only the calls advance: bare bash costs 2 ms, the
    sandbox 6, 6 and one slow outlier of 60: the medians give exactly 3."""
    clock = {"now": 0.0}
    monkeypatch.setattr(sandbox_overhead.time, "perf_counter", lambda: clock["now"])

    def bare(*args, **kwargs):
        clock["now"] += 0.002

    costs = iter([0.006, 0.006, 0.060, 0.006])

    class ClockSandbox:
        def run(self, argv, mounts):
            clock["now"] += next(costs)

    monkeypatch.setattr(sandbox_overhead.subprocess, "run", bare)
    results = sandbox_overhead.measure({"clock": ClockSandbox()}, repeats=3)
    assert results["sandbox.bare_bash_seconds"] == pytest.approx(0.002)
    assert results["sandbox.clock.command_seconds"] == pytest.approx(0.006)
    assert results["sandbox.clock.overhead_ratio"] == pytest.approx(3.0)


def test_synthesis_throughput_reports_rates_per_rejection_kind(monkeypatch):
    from benchmarks import synthesis_throughput

    capabilities = len(load_capability_catalog())
    plan = synthesis_throughput.candidate_plan(capabilities * len(LEVELS))
    # Any prefix of the plan spreads over every capability, then every level.
    assert len({c[0].id for c in plan[:capabilities]}) == capabilities and len({c[2] for c in plan}) == len(LEVELS)
    # The real generators in the real sandbox: every candidate gets a verdict.
    results = synthesis_throughput.measure(count=6, workers=2)
    assert results["synthesis.candidates"] == 6 and results["synthesis.candidates_per_second"] > 0
    # The rates per kind, on verdicts known in advance: 3 of 6 rejected, 2 for leakage, 1 for the oracle.
    verdicts = {0: None, 1: "leakage: 12 in instruction.md", 2: "oracle: verifier failed", 3: None,
                4: "leakage: key in workspace", 5: None}
    monkeypatch.setattr(synthesis_throughput, "_build_and_validate", lambda sandbox, root, c: verdicts[c[3]])
    known = synthesis_throughput.measure(count=6, workers=2)
    assert known["synthesis.rejection_rate"] == pytest.approx(3 / 6)
    assert known["synthesis.rejections.leakage"] == pytest.approx(2 / 6)
    assert known["synthesis.rejections.oracle"] == pytest.approx(1 / 6)
    assert {k for k in known if k.startswith("synthesis.rejections.")} == {
        "synthesis.rejections.leakage", "synthesis.rejections.oracle"}


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

    result = sequential_rollouts.measure(tasks_per_capability=1, capabilities=4)
    assert result["sequential_rollouts.same_decisions"] is True
    assert result["sequential_rollouts.tasks"] == 4
    assert result["sequential_rollouts.rollouts_fixed"] == 8 * result["sequential_rollouts.tasks"]
    assert 0 <= result["sequential_rollouts.rollouts_saved_fraction"] < 1


def test_the_table_prints_objects_entry_by_entry_and_booleans_as_words():
    from benchmarks.run import format_table

    table = format_table({"round.seconds_by_phase": {"grpo": 12.345678, "sft": 3.0}, "x.same": True, "x.ratio": 0.5})
    assert table.splitlines() == [
        "round.seconds_by_phase.grpo  12.35",
        "round.seconds_by_phase.sft   3",
        "x.ratio                      0.5",
        "x.same                       yes",
    ]
    with pytest.raises(TypeError, match="'x.name' is a str"):
        format_table({"x.name": "fast"})


def test_round_phase_shares_come_from_the_ledger_and_the_round_time():
    from benchmarks import round_phases

    ledger = {"synthesis": 30.0, "agent_free_validation": 10.0, "validation": 90.0, "sft": 20.0, "grpo": 30.0,
              "heldout_before": 5.0, "heldout_after": 5.0, "diagnosis_report": 5.0, "evaluation": 2.0}
    results = round_phases.phase_results(ledger, round_seconds=200.0)
    assert results["round.seconds_by_phase"] == ledger | {"outside_ledger": 3.0}
    ours = results["round.share_by_phase"]
    # The fixed-set evaluation and the time outside the ledger have no phase in the paper's round.
    assert ours == pytest.approx({"synthesis": 0.2, "validation_rollouts": 0.45, "sft": 0.1, "grpo": 0.15,
                                  "diagnosis": 0.075, "other": 0.025})
    paper = results["round.paper_share_by_phase"]
    # SPEC: validation rollouts 30.76 of 74.23 wall hours, "about 41%".
    assert paper["validation_rollouts"] == pytest.approx(30.76 / 74.23) and sum(paper.values()) == pytest.approx(1)
    assert results["round.validation_share_ratio_vs_paper"] == pytest.approx(0.45 / (30.76 / 74.23))
    table = round_phases.share_table(results)
    assert "validation_rollouts" in table and "45.0%" in table and "41.4%" in table
    with pytest.raises(ValueError, match="ledger holds 197.0 s of a 100.0 s round"):
        round_phases.phase_results(ledger, round_seconds=100.0)


class ScriptedSession(PolicySession):
    """A policy that always answers `cat input.txt`, taking a fixed time per
    call plus a little per sequence: the harness around it is the real one."""

    CALL_SECONDS, SEQUENCE_SECONDS = 0.05, 0.01

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, token_ids):
        return "".join(map(chr, token_ids))

    def chat_text(self, messages, *, add_generation_prompt):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<assistant>" if add_generation_prompt else "")

    def chat_tokens(self, messages, *, add_generation_prompt):
        return self.encode(self.chat_text(messages, add_generation_prompt=add_generation_prompt))

    def sample(self, prompts, n, params):
        import time

        from resources.policy import Completion

        time.sleep(self.CALL_SECONDS + self.SEQUENCE_SECONDS * len(prompts) * n)
        reply = "cat input.txt\n```"
        return [[Completion(self.encode(reply), [-0.5] * len(reply), reply, "stop") for _ in range(n)] for _ in prompts]

    def close(self):
        pass


def test_rollout_throughput_compares_one_validation_call_with_one_rollout_per_call():
    from benchmarks import rollout_throughput
    from resources.sandbox import BubblewrapSandbox

    results = rollout_throughput.measure(task_count=2, samples_per_task=2, open_session=ScriptedSession,
                                         sandbox=BubblewrapSandbox())
    assert results["rollout.rollouts"] == 4 and results["rollout.batch1_rollouts"] == 2
    assert results["rollout.batched_sequences_per_call"] == 4 and results["rollout.batch1_sequences_per_call"] == 1
    assert results["rollout.batched_speedup"] == (
        results["rollout.batched_rollouts_per_second"] / results["rollout.batch1_rollouts_per_second"]
    )
    for side, calls, rollouts in (("batched", 1, 4), ("batch1", 2, 2)):
        # Every rollout generated the scripted reply's tokens.
        per_rollout = results[f"rollout.{side}_tokens_per_second"] / results[f"rollout.{side}_rollouts_per_second"]
        assert per_rollout == pytest.approx(len("cat input.txt\n```"))
        # Model time, recovered from the harness share, holds at least the scripted sleeps.
        wall = rollouts / results[f"rollout.{side}_rollouts_per_second"]
        model_seconds = (1 - results[f"rollout.{side}_harness_share"]) * wall
        slept = calls * ScriptedSession.CALL_SECONDS + rollouts * ScriptedSession.SEQUENCE_SECONDS
        assert slept <= model_seconds < wall
        assert 0 < results[f"rollout.{side}_tokenizer_share"] < results[f"rollout.{side}_harness_share"]
    assert results["rollout.harness_share"] == results["rollout.batched_harness_share"]
    assert results["rollout.identical_fraction"] == 1.0


@pytest.mark.slow
def test_rollout_throughput_on_the_embedded_model():
    from benchmarks import rollout_throughput

    results = rollout_throughput.measure(task_count=4, samples_per_task=2)
    assert results["rollout.batched_sequences_per_call"] == 8 and results["rollout.batch1_sequences_per_call"] == 1
    # Each rollout generated between one token and its turns' whole budget, on both sides.
    settings = LoopConfig().agent_settings()
    per_rollout = {side: results[f"rollout.{side}_tokens_per_second"] / results[f"rollout.{side}_rollouts_per_second"]
                   for side in ("batched", "batch1")}
    for tokens in per_rollout.values():
        assert 1 <= tokens <= settings.max_turns * settings.max_new_tokens, per_rollout
    # The model is part of a rollout's time, never all of it (sandbox and verifier run too).
    assert 0 < results["rollout.harness_share"] < 1
    assert results["rollout.batched_tokenizer_share"] < results["rollout.batched_harness_share"]
    # Same tasks, seeds and streams: batching changes float rounding at most
    # (the batch-1 side is each task's first sample, compared token for token).
    assert results["rollout.batch1_rollouts"] == 4
    assert results["rollout.identical_fraction"] >= 0.75


@pytest.mark.slow
def test_round_phases_reads_a_real_rounds_ledger(finished_round):
    from conftest import ROUND_ONE

    from benchmarks import round_phases
    from resources.warehouse import DuckDBWarehouse

    ledger = round_phases.ledger_seconds(DuckDBWarehouse(), ROUND_ONE)
    results = round_phases.phase_results(ledger, finished_round.seconds)
    seconds = results["round.seconds_by_phase"]
    assert {"synthesis", "agent_free_validation", "validation", "sft", "grpo"} <= set(seconds)
    assert all(value > 0 for phase, value in seconds.items() if phase != round_phases.OUTSIDE_LEDGER), seconds
    assert sum(seconds.values()) == pytest.approx(results["round.seconds"])
    assert sum(results["round.share_by_phase"].values()) == pytest.approx(1)


def test_round_phases_profiles_the_round_it_times(monkeypatch, tmp_path):
    """`measure` with a profile: the report names what ran while it timed (a
    stand-in round that keeps the CPU busy for 0.3 s)."""
    import time

    from benchmarks import round_phases

    def stand_in_round(loop=None):
        until = time.perf_counter() + 0.3
        while time.perf_counter() < until:
            pass
        return {"synthesis": 0.1, "sft": 0.1}, 0.3

    monkeypatch.setattr(round_phases, "run_round", stand_in_round)
    results = round_phases.measure(profile=tmp_path / "profile.txt")
    assert "stand_in_round" in (tmp_path / "profile.txt").read_text()
    assert results["round.seconds_by_phase"]["synthesis"] == 0.1


def test_harness_throughput_times_the_oracles_episodes_per_thread_count(base_checkpoint_dir):
    from benchmarks import harness_throughput
    from resources.sandbox import BubblewrapSandbox

    results = harness_throughput.measure(task_count=2, samples_per_task=2, workers=(1, 2), sandbox=BubblewrapSandbox(),
                                         tokenizer_dir=base_checkpoint_dir)
    assert results["harness.rollouts"] == 4 and results["harness.turns_per_rollout"] == harness_throughput.TURNS
    for workers in (1, 2):
        key = f"harness.workers_{workers}"
        # Wall per turn is what the rate says, and each episode used the CPU of its sandboxes.
        turns = 4 * harness_throughput.TURNS
        assert results[f"{key}.wall_ms_per_turn"] == pytest.approx(4 / results[f"{key}.rollouts_per_second"] * 1000 / turns)
        assert results[f"{key}.cpu_ms_per_turn"] > 0 and results[f"{key}.cpu_seconds_per_rollout"] > 0
    assert results["harness.verifier_cpu_ms"] > 0 and results["harness.command_cpu_ms"] >= 0
    # A task's two rollouts share one verification batch: cheaper a rollout than one run each.
    assert 0 < results["harness.batched_verifier_cpu_ms"] < results["harness.verifier_cpu_ms"]


def test_harness_throughput_refuses_an_episode_that_did_not_score_1(base_checkpoint_dir, monkeypatch):
    from benchmarks import harness_throughput
    from resources.sandbox import BubblewrapSandbox

    monkeypatch.setattr(harness_throughput, "oracle_command", lambda task: "true")  # solves nothing
    with pytest.raises(RuntimeError, match="did not score 1"):
        harness_throughput.measure(task_count=1, samples_per_task=1, workers=(1,), sandbox=BubblewrapSandbox(),
                                   tokenizer_dir=base_checkpoint_dir)


def test_shared_prefix_batch_opens_every_row_with_the_agents_real_opening(base_checkpoint_dir):
    """The premise of the shared-prefix benchmark: rows of different tasks
    share the system prompt and worked examples, through the real template."""
    from transformers import AutoTokenizer

    from benchmarks import shared_prefix
    from clawloop_assets.harness.agent_loop import SYSTEM_PROMPT
    from training_jobs.policy_gradient import MIN_SHARED_PREFIX_TOKENS, shared_prefix_length
    from training_jobs.trajectories import pad_batch

    tokenizer = AutoTokenizer.from_pretrained(base_checkpoint_dir)
    rows = shared_prefix.realistic_batch(tokenizer, tokenizer.vocab_size)
    padded = pad_batch(rows)
    shared = shared_prefix_length(padded.input_ids, padded.attention_mask, padded.target_action_mask)
    assert shared >= MIN_SHARED_PREFIX_TOKENS
    assert SYSTEM_PROMPT in tokenizer.decode(rows[0].token_ids[:shared])
    assert len({tuple(row.token_ids[shared:]) for row in rows}) == len(rows)  # each row its own task


@pytest.mark.slow
def test_run_rounds_tables_a_real_round(finished_round, tmp_path):
    import json

    from conftest import ROUND_ONE

    from benchmarks import run_rounds

    summary = json.loads((finished_round.home / "rounds" / ROUND_ONE / "summary.json").read_text())
    log = tmp_path / "run.log"
    log.write_text(f"[{ROUND_ONE}] diagnosis_report: done in 3s\n== {ROUND_ONE} finished in 4.2min ==\n")
    header, rule, row = run_rounds.table(finished_round.home, log).splitlines()
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert len(cells) == len(run_rounds.COLUMNS) == header.count("|") - 1
    assert cells[:3] == ["1", "4.2min", f"{summary['admitted']} / {summary['candidates']} "
                                         f"({100 * summary['admission_rate']:.1f}%)"]
    # The round tests' round 1 plans every capability at the warm-up level.
    assert cells[4] == f"-2: {summary['candidates']}" and cells[5] == "0" and cells[6] == "0, 0"
    # The evaluation by level: each level the round evaluated with its interval, the others "-".
    for level, cell in zip(("-2", "-1", "0", "1"), cells[-4:]):
        evaluated = summary["evaluation_by_level"].get(level)
        assert cell == ("-" if evaluated is None else f"{100 * evaluated['pass_at_1']:.1f} "
                        f"[{100 * evaluated['ci_low']:.1f}, {100 * evaluated['ci_high']:.1f}]")


def test_plan_ablation_counts_the_candidates_a_plan_puts_elsewhere():
    from collections import Counter

    from benchmarks.plan_ablation import moved

    base = Counter({("a", -2, "", ""): 3, ("b", -2, "", ""): 2})
    assert moved(base, base) == 0
    # One of a's candidates to b's rung: one moved, whichever plan is the base.
    other = Counter({("a", -2, "", ""): 2, ("b", -2, "", ""): 2, ("b", -1, "", ""): 1})
    assert moved(base, other) == moved(other, base) == 1
    assert moved(base, Counter({("a", -2, "", "copy=0.100"): 3, ("b", -2, "", ""): 2})) == 3


@pytest.mark.slow
def test_plan_ablation_replays_a_real_rounds_plan(finished_round):
    from conftest import ROUND_ONE, small_round

    from benchmarks import plan_ablation
    from resources.warehouse import DuckDBWarehouse

    warehouse = DuckDBWarehouse(path=str(finished_round.home / "warehouse.duckdb"))
    loop = small_round()
    (row,) = plan_ablation.ablate(warehouse, loop)
    # Round one's plan is every capability at the lowest level, whatever the controller's switches.
    assert row == {"round": ROUND_ONE, "candidates": loop.candidates_per_round, "replay matches": True,
                   **{name: 0 for name in plan_ablation.ABLATIONS}}
    # A replay under another config than the run's is told apart from the stored plan.
    other = loop.model_copy(update={"candidates_per_round": loop.candidates_per_round + 1})
    assert plan_ablation.ablate(warehouse, other)[0]["replay matches"] is False


def _home_with_two_rounds(home):
    """A finished run's home in miniature: two rounds' folders and a warehouse
    whose round tables hold both."""
    import duckdb

    for key in ("round-0001", "round-0002"):
        (home / "rounds" / key / "checkpoints" / "policy").mkdir(parents=True)
        (home / "rounds" / key / "checkpoints" / "policy" / "model.safetensors").write_bytes(b"weights " + key.encode())
        (home / "rounds" / key / "tasks").mkdir()
        (home / "rounds" / key / "summary.json").write_text("{}")
    (home / "evaluation" / "own").mkdir(parents=True)
    (home / "dagster").mkdir()
    db = duckdb.connect(str(home / "warehouse.duckdb"))
    db.execute("CREATE TABLE round_summaries (round VARCHAR)")
    db.execute("CREATE TABLE tasks (round VARCHAR, task_id VARCHAR, capability_id VARCHAR, difficulty INTEGER, "
               "bundle_path VARCHAR)")
    db.execute("CREATE TABLE admissions (round VARCHAR, task_id VARCHAR, pass_count INTEGER, admitted BOOLEAN)")
    db.execute("INSERT INTO round_summaries VALUES ('round-0001'), ('round-0002')")
    bundles = {task: home / "rounds" / key / "tasks" / task for key, task in
               (("round-0001", "a"), ("round-0002", "b"), ("round-0002", "c"))}
    for task, bundle in bundles.items():
        bundle.mkdir()
        (bundle / "meta.json").write_text('{"operation": "copy_file"}' if task != "c" else "{}")
    db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?), (?, ?, ?, ?, ?), (?, ?, ?, ?, ?)",
               ["round-0001", "a", "ledger", -2, str(bundles["a"]), "round-0002", "b", "ledger", -2,
                str(bundles["b"]), "round-0002", "c", "merge", -1, str(bundles["c"])])
    db.execute("INSERT INTO admissions VALUES ('round-0001', 'a', 3, true), ('round-0002', 'b', 3, true), "
               "('round-0002', 'c', 0, false)")
    db.close()


def test_replay_round_prepares_the_home_as_it_stood_before_the_round(tmp_path):
    import duckdb

    from benchmarks import replay_round

    source, replay = tmp_path / "run", tmp_path / "replay"
    _home_with_two_rounds(source)
    assert replay_round.prepare(source, replay, "round-0002") == ["round-0001"]
    assert sorted(path.name for path in (replay / "rounds").iterdir()) == ["round-0001"]
    assert (replay / "evaluation" / "own").is_dir() and (replay / "rounds" / "round-0001" / "tasks").is_dir()
    # The weights are the run's own files, linked, not copies; the rest is copied.
    weights = Path("rounds/round-0001/checkpoints/policy/model.safetensors")
    assert (replay / weights).stat().st_ino == (source / weights).stat().st_ino
    summary = Path("rounds/round-0001/summary.json")
    assert (replay / summary).stat().st_ino != (source / summary).stat().st_ino
    db = duckdb.connect(str(replay / "warehouse.duckdb"), read_only=True)
    assert db.sql("SELECT DISTINCT round FROM tasks").fetchall() == [("round-0001",)]
    assert db.sql("SELECT round FROM round_summaries").fetchall() == [("round-0001",)]
    db.close()
    # The run itself is untouched.
    db = duckdb.connect(str(source / "warehouse.duckdb"), read_only=True)
    assert db.sql("SELECT count(*) FROM tasks").fetchall() == [(3,)]
    db.close()


def test_replay_round_refuses_a_home_it_cannot_replay_from(tmp_path):
    from benchmarks import replay_round

    source = tmp_path / "run"
    _home_with_two_rounds(source)
    with pytest.raises(SystemExit, match="no round-0003 to replay"):
        replay_round.prepare(source, tmp_path / "a", "round-0003")
    (tmp_path / "taken").mkdir()
    with pytest.raises(SystemExit, match="exists"):
        replay_round.prepare(source, tmp_path / "taken", "round-0002")
    # A round folder with no finished round behind it (a run stopped in round 1).
    (source / "rounds" / "round-0003").mkdir()
    import shutil
    shutil.rmtree(source / "rounds" / "round-0002")
    with pytest.raises(SystemExit, match="do not lead to round-0003"):
        replay_round.prepare(source, tmp_path / "b", "round-0003")
    assert not (tmp_path / "b").exists()
    # A run still writing the warehouse.
    from resources.run_lock import acquire_run_lock

    lock = acquire_run_lock(source / "warehouse.duckdb", "a-run", "round-0003")
    with pytest.raises(SystemExit, match="in use by run a-run"):
        replay_round.prepare(source, tmp_path / "c", "round-0003")
    lock.release()
    assert not (tmp_path / "c").exists()


def test_replay_round_compares_a_round_per_level_and_task_by_task(tmp_path):
    import duckdb

    from benchmarks import replay_round

    first, second = tmp_path / "run", tmp_path / "replay"
    _home_with_two_rounds(first)
    _home_with_two_rounds(second)
    db = duckdb.connect(str(second / "warehouse.duckdb"))
    db.execute("UPDATE admissions SET pass_count = 2 WHERE task_id = 'b'")
    db.execute("INSERT INTO tasks VALUES ('round-0002', 'd', 'merge', 0, NULL)")
    db.execute("INSERT INTO admissions VALUES ('round-0002', 'd', 1, true)")
    db.close()
    lines = replay_round.compare(first, second, "round-0002").splitlines()
    # At the warm-up level the cell is the operation the task asks (its meta.json).
    assert lines[0] == "| round-0002 | level -2 copy_file | level -1 | level 0 | admitted |"
    assert lines[2] == f"| {first} | 1/1 | 0/1 | 0/0 | 1/2 (50.0%) |"
    assert lines[3] == f"| {second} | 1/1 | 0/1 | 1/1 | 2/3 (66.7%) |"
    assert "tasks in both: 2, passed as often in both: 1" in lines
    assert lines[-1] == f"only in {second}: merge level 0 passed 1, admitted"
    # The same task id asking another operation is another task.
    (second / "rounds" / "round-0002" / "tasks" / "b" / "meta.json").write_text('{"operation": "append_word"}')
    lines = replay_round.compare(first, second, "round-0002").splitlines()
    assert "tasks in both: 1, passed as often in both: 1" in lines
    assert f"only in {second}: ledger level -2 append_word passed 2, admitted" in lines
    (second / "rounds" / "round-0002" / "tasks" / "b" / "meta.json").unlink()
    with pytest.raises(SystemExit, match="no meta.json to name its operation"):
        replay_round.compare(first, second, "round-0002")
    with pytest.raises(SystemExit, match="no admissions for round-0005"):
        replay_round.compare(first, second, "round-0005")


def test_admission_by_standing_splits_each_level_by_the_capabilitys_first_round_there(tmp_path):
    import duckdb

    from benchmarks import admission_by_standing

    home = tmp_path / "run"
    _home_with_two_rounds(home)
    db = duckdb.connect(str(home / "warehouse.duckdb"))
    # Round 2 also holds a rung task passed too often and one never scored (no admission row).
    db.execute("ALTER TABLE tasks ADD COLUMN seed INTEGER")
    db.execute("UPDATE tasks SET seed = 2000")
    db.execute("INSERT INTO tasks VALUES ('round-0002', 'd', 'merge', -1, NULL, 2001), "
               "('round-0002', 'e', 'ledger', -1, NULL, 2005)")
    db.execute("INSERT INTO admissions VALUES ('round-0002', 'd', 8, false)")
    db.close()
    counts = admission_by_standing.by_standing(admission_by_standing.candidates(home))
    # Round 1 counts for nothing; ledger's -2 is established in round 2, the rung new to both.
    assert counts == {(-2, "established"): {"candidates": 1, "admitted": 1},
                      (-1, "new"): {"candidates": 3, "passed 0": 1, "passed too often": 1, "never scored": 1}}
    lines = admission_by_standing.table([home], 0.7).splitlines()
    assert lines[2] == "| -2 | established | 1/1 (100.0%) | 0 | 0 | 0 | (the rest) |"
    # The rest at 100% leaves room for 30% of a round admitting nothing.
    assert lines[3] == "| -1 | new | 0/3 (0.0%) | 1 | 1 | 1 | 30% (19 of 64) |"
    # Per level-0 variant (the seed's), rounds 2 on.
    assert admission_by_standing.variant_table([home], -1).splitlines()[2:] == [
        "| ledger | 1 | 0/1 | - |", "| merge | 0 | 0/1 | 0 |", "| merge | 1 | 0/1 | 8 |"]
    with pytest.raises(SystemExit, match="no level-0 variants"):
        admission_by_standing.variant_table([home], -2)


def test_share_ceiling_is_the_most_a_level_may_take_of_a_round():
    from benchmarks.admission_by_standing import share_ceiling

    assert share_ceiling(0.5, 0.75, 0.7) == pytest.approx(0.2)  # 0.2 * 0.5 + 0.8 * 0.75 = 0.7
    assert share_ceiling(0.8, 0.75, 0.7) == 1.0  # the level reaches the target itself
    assert share_ceiling(0.5, 0.7, 0.7) == 0.0  # the rest alone only just reaches it

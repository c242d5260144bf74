import json

import pytest

from clawloop_assets.diagnosis.failures import (
    InvalidSummary,
    aggregate_patterns,
    classify_failure,
    extract_evidence,
    parse_model_summary,
    render_report,
    summarize_failures,
    summarize_with_model,
    task_skill,
)


def rollout(rollout_id, commands, exit_codes, checks, reward=0.0, last_output="", task="t1"):
    return {"rollout_id": rollout_id, "task_id": task, "status": "scored", "reward": reward, "commands": commands,
            "exit_codes": exit_codes, "last_output": last_output, "submitted": False, "verifier_checks": json.dumps(checks)}


WRONG_VALUE = [{"name": "answer.txt", "passed": False, "detail": "expected a different value"}]
MISSING = [{"name": "answer.txt", "passed": False, "detail": "deliverable answer.txt is missing"}]


def cause(r):
    return classify_failure(extract_evidence(r))[0]


def test_root_causes_follow_the_evidence():
    assert cause(rollout("a", [""], [None], MISSING)) == "format_violation"
    assert cause(rollout("b", ["frobnicate x"], [127], MISSING)) == "wrong_tool"
    assert cause(rollout("c", ["cat nope.csv > a"], [1], MISSING, last_output="cat: nope.csv: No such file or directory")) == "misread_task"
    assert cause(rollout("d", ["awk '{' x"], [2], MISSING, last_output="awk: syntax error")) == "edit_error"
    assert cause(rollout("e", ["echo 3 > answer.txt"], [0], WRONG_VALUE)) == "computation_error"
    assert cause(rollout("f", ["ls"], [0], MISSING)) == "premature_termination"
    assert cause(rollout("g", ["sleep 99"], [None], MISSING)) == "wrong_tool"


def test_only_scored_failures_are_summarized_and_patterns_aggregate():
    rollouts = [
        rollout("r1", ["echo 3 > answer.txt"], [0], WRONG_VALUE),
        rollout("r2", ["echo 4 > answer.txt"], [0], WRONG_VALUE),
        rollout("r3", [""], [None], MISSING, task="t2"),
        rollout("r4", ["wc -l"], [0], [], reward=1.0),
        {**rollout("r5", ["x"], [0], []), "status": "verifier_error", "reward": None},
    ]
    summaries = summarize_failures(rollouts, {"t1": "grouped_statistics", "t2": "file_reorganization"})
    assert [s.rollout_id for s in summaries] == ["r1", "r2", "r3"]
    patterns = aggregate_patterns(summaries, "round-0001")
    assert patterns[0].root_cause == "computation_error" and patterns[0].count == 2
    assert patterns[0].share == 2 / 3
    assert patterns[0].summary_ids == ["r1.summary", "r2.summary"]
    report = render_report("round-0001", patterns, {"grouped_statistics": (1, 3)}, len(summaries))
    assert "computation_error" not in report or "wrote a deliverable with wrong content" in report
    assert "| grouped_statistics | 1 | 3 | 33.3% |" in report


def test_a_warm_up_task_asks_for_its_operation_and_a_level_0_task_for_its_capability(tmp_path):
    def bundle(name, meta):
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(meta if isinstance(meta, str) else json.dumps(meta))
        return str(tmp_path / name)

    copying = bundle("copy", {"operation": "copy_file", "file": "ledger.csv"})
    assert task_skill("ledger_reconciliation", -2, copying) == "copy_file"
    # No level has delete_file, and level -1 (level 0's task, its command shown) and up ask for the
    # capability whatever meta.json says.
    assert task_skill("ledger_reconciliation", -2, bundle("delete", {"operation": "delete_file"})) \
        == "ledger_reconciliation"
    assert task_skill("ledger_reconciliation", -1, copying) == "ledger_reconciliation"
    assert task_skill("ledger_reconciliation", 0, copying) == "ledger_reconciliation"
    # A generator's meta.json is untrusted: no operation, an unknown one, a non-object, a bundle since removed.
    for meta in ({}, {"operation": "rm -rf / | x"}, "[1, 2]", "not json"):
        assert task_skill("log_analysis", -2, bundle(f"m{len(list(tmp_path.iterdir()))}", meta)) == "log_analysis"
    assert task_skill("log_analysis", -2, str(tmp_path / "gone")) == "log_analysis"
    assert task_skill("log_analysis", -1, None) == "log_analysis"


def test_warm_up_failures_group_by_operation_across_families():
    rollouts = [rollout("a", ["sudo cp ledger.csv backup.csv"], [1], MISSING, task="ledger"),
                rollout("b", ["sudo cp plots.csv backup.csv"], [1], MISSING, task="plots"),
                rollout("c", ["sudo cp plots.csv backup.csv"], [1], MISSING, task="level0")]
    capability_of = {"ledger": "ledger_reconciliation", "plots": "grouped_statistics", "level0": "grouped_statistics"}
    skill_of = {"ledger": "copy_file", "plots": "copy_file", "level0": "grouped_statistics"}
    summaries = summarize_failures(rollouts, capability_of, skill_of)
    assert [(s.capability_id, s.skill) for s in summaries] == [
        ("ledger_reconciliation", "copy_file"), ("grouped_statistics", "copy_file"),
        ("grouped_statistics", "grouped_statistics")]
    copying, level0 = aggregate_patterns(summaries, "round-0001")
    assert (copying.skill, copying.count, copying.task_ids, copying.capability_id) == (
        "copy_file", 2, ["ledger", "plots"], None)
    assert copying.pattern_id == "round-0001.copy_file.edit_error.0"
    assert copying.description == "copying a file fails: ran a command that failed, e.g. `sudo cp ledger.csv backup.csv`"
    assert (level0.skill, level0.capability_id) == ("grouped_statistics", "grouped_statistics")
    assert level0.description.startswith("grouped_statistics fails: ran a command that failed")
    # Without skills (a caller that has none), the capability is the skill.
    assert [s.skill for s in summarize_failures(rollouts, capability_of)] == [
        "ledger_reconciliation", "grouped_statistics", "grouped_statistics"]


# --- Summaries by the loop model: schema, grounding, retries, the probe --------

EVIDENCE = extract_evidence(rollout("x", ["cat data.csv > answer.txt", "echo 3 > answer.txt"], [0, 0], WRONG_VALUE))


def reply(**fields):
    value = {"failure_turn": 1, "failure_action": "echo 3 > answer.txt", "root_cause": "computation_error",
             "missing_capability": "count the data rows instead of guessing a number"}
    value.update(fields)
    return json.dumps({k: v for k, v in value.items() if v is not None})


def test_a_valid_model_summary_is_read_and_grounded():
    parsed = parse_model_summary('{"failure_turn": ' + reply()[len('{"failure_turn": '):] + " trailing", EVIDENCE)
    assert parsed["failure_turn"] == 1 and parsed["root_cause"] == "computation_error"


@pytest.mark.parametrize("text, reason", [
    ("I think it failed", "no JSON object"),
    ('{"failure_turn": 1, "failure_action": ', "not valid JSON"),
    (reply(missing_capability=None), "keys must be exactly"),
    (reply(failure_turn=5), "not a turn of this trajectory"),
    (reply(failure_turn=True), "not a turn of this trajectory"),
    (reply(failure_action="rm -rf /"), "not the command of turn 1"),
    (reply(root_cause="bad_luck"), "not in the taxonomy"),
    (reply(root_cause="premature_termination"), "but the deliverable exists"),
    (reply(missing_capability="no"), "one sentence"),
])
def test_invalid_model_summaries_are_rejected_with_the_reason(text, reason):
    with pytest.raises(InvalidSummary, match=reason):
        parse_model_summary(text, EVIDENCE)


def failures(n):
    rollouts = [rollout(f"r{i}", ["cat data.csv > answer.txt", "echo 3 > answer.txt"], [0, 0], WRONG_VALUE) for i in range(n)]
    return summarize_failures(rollouts, {"t1": "grouped_statistics"})


def test_the_model_summary_replaces_the_rule_one_and_invalid_replies_are_retried():
    calls = []

    def summarizer(instructions, evidences, attempt):
        calls.append((len(instructions), attempt))
        # First attempt: every other reply is garbage; the retry is valid.
        return [reply() if attempt or i % 2 == 0 else "garbage" for i in range(len(instructions))]

    summaries, stats = summarize_with_model(failures(6), {"t1": "Count the rows."}, summarizer, "loop_model:ck1",
                                            attempts=2, probe=2)
    assert [s.produced_by for s in summaries] == ["loop_model:ck1"] * 6
    assert summaries[0].missing_capability == "count the data rows instead of guessing a number"
    assert calls == [(2, 0), (1, 1), (4, 0), (2, 1)]
    assert stats.valid == 6 and stats.asked == 6 and not stats.probe_only


def test_a_model_that_fails_the_probe_is_not_asked_again_and_the_rules_stand():
    calls = []

    def summarizer(instructions, evidences, attempt):
        calls.append(len(instructions))
        return ["{}"] * len(instructions)

    before = failures(10)
    summaries, stats = summarize_with_model(before, {"t1": "Count the rows."}, summarizer, "loop_model:ck1",
                                            attempts=2, probe=4)
    assert summaries == before and calls == [4, 4]
    assert stats.probe_only and stats.valid == 0 and sum(stats.rejections.values()) == 8
    report = render_report("round-0001", aggregate_patterns(summaries, "round-0001"), {}, len(summaries), stats)
    assert "wrote no valid summary for the 4 failures of the probe" in report and "evidence rules wrote all 10" in report


# --- Clustering by meaning, with the real sentence-embedding model -------------


def test_patterns_within_a_cause_are_split_by_meaning():
    from clawloop_assets.diagnosis.sentence_embeddings import embed

    # Two ways of writing a wrong deliverable: the input copied instead of a
    # count, and a count that is off. Same root cause, different meaning.
    copied = [rollout(f"c{i}", [f"cat {name}_notes.txt > answer.txt"], [0],
                      [{"name": "line count", "passed": False, "detail": f"answer.txt: '{name} PT-01{i}7 checked' is not a number"}])
              for i, name in enumerate(["trap", "dock", "artifact"])]
    off = [rollout(f"o{i}", [f"wc -l < {name}.csv > answer.txt"], [0],
                   [{"name": "row count", "passed": False, "detail": f"answer.txt holds {n}, which is not the expected value"}])
           for i, (name, n) in enumerate([("plots", 20), ("batches", 31)])]
    summaries = summarize_failures(copied + off, {"t1": "grouped_statistics"})
    assert {s.root_cause for s in summaries} == {"computation_error"}
    assert len(aggregate_patterns(summaries, "round-0001")) == 1  # without embeddings: one per cause
    patterns = aggregate_patterns(summaries, "round-0001", embed=embed)
    assert [(p.count, sorted(p.example_rollout_ids)) for p in patterns] == [(3, ["c0", "c1", "c2"]), (2, ["o0", "o1"])]
    assert patterns[0].pattern_id == "round-0001.grouped_statistics.computation_error.0"
    assert "is not a number" in patterns[0].evidence and "FILE" in patterns[0].evidence
    assert patterns[0].produced_by == "evidence_rules: 3"


def test_the_report_says_which_rollouts_its_failures_come_from():
    rollouts = [rollout("h1", ["echo 3 > answer.txt"], [0], WRONG_VALUE),
                {**rollout("v1", ["ls"], [0], MISSING), "phase": "validation"},
                {**rollout("v2", ["ls"], [0], MISSING), "phase": "validation"}]
    summaries = summarize_failures(rollouts, {"t1": "grouped_statistics"})
    assert [s.phase for s in summaries] == ["heldout_after", "validation", "validation"]
    report = render_report("round-0001", aggregate_patterns(summaries, "round-0001"), {}, 3, None,
                           {"heldout_after": 1, "validation": 2})
    assert ("Failures diagnosed: 1 from the trained policy on the held-out split E_k; "
            "2 from validation rollouts of candidates the input policy never solved") in report

import json

from clawloop_assets.diagnosis import (
    aggregate_patterns,
    classify_failure,
    extract_evidence,
    render_report,
    summarize_failures,
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

"""`clawloop eval --tasks DIR`: a policy on a directory of imported,
validated tasks (here our own exported round, imported back), pass@1 with
its interval per task set and a table of tasks; bad input refused naming it."""

import json

import polars as pl
import pytest
from test_agent_loop import ScriptedSession, oracle_command

from clawloop_assets.cli import main
from clawloop_assets.evaluation.fixed_set import EvaluationTask, pass_at_1_by_set
from clawloop_assets.evaluation.task_dir import EvalError, evaluate_tasks, load_eval_tasks, render_eval
from clawloop_assets.harbor.task_format import export_round, import_harbor_directory
from clawloop_assets.harness.agent_loop import AgentSettings
from resources.policy import Completion
from resources.sandbox import BubblewrapSandbox


class ByTaskSession(ScriptedSession):
    """Replies by which task the prompt is about: the oracle's commands for
    `solve`, `ls` for the others; `submit` once a command has run."""

    def __init__(self, solve: dict[str, str]):
        super().__init__([])
        self.solve = solve
        self.seen = set()  # the prompts' common start: one per rollout

    def sample(self, prompts, n, params):
        out = []
        for prompt in prompts:
            text = self.decode(prompt)
            if text[:4000] in self.seen:
                reply = "submit\n```"
            else:
                self.seen.add(text[:4000])
                reply = next((cmd for marker, cmd in self.solve.items() if marker in text), "ls") + "\n```"
            ids = self.encode(reply)
            out.append([Completion(ids, [-0.5] * len(ids), reply, "stop") for _ in range(n)])
        return out


@pytest.fixture
def imported_round(clawloop_home, tmp_path):
    from test_transfer import ROUND, record_round

    from clawloop_assets.synthesis import catalogs

    domain = catalogs.load_domain_catalog()[0].id
    warehouse, _ = record_round(tmp_path, [("log_analysis", domain, 41), ("file_reorganization", domain, 42)],
                                admitted=2, heldout=set())
    export_round(warehouse, ROUND, tmp_path / "ours")
    results, _ = import_harbor_directory(tmp_path / "ours", tmp_path / "imported", BubblewrapSandbox())
    assert all(r.runnable for r in results), [r.reasons for r in results]
    return tmp_path / "imported"


def test_eval_reports_pass_at_1_per_task_set_and_a_table_of_tasks(imported_round, tmp_path):
    tasks = load_eval_tasks(imported_round)
    assert {t.task_set for t in tasks} == {"ours"}  # the benchmark: the directory imported from
    solved = tasks[0]
    session = ByTaskSession({solved.bundle.instruction[:80]: oracle_command(solved.bundle)})
    report = evaluate_tasks(session, BubblewrapSandbox(), tasks, "ckpt-test", 1, AgentSettings(max_turns=2),
                            tmp_path / "rollouts", seed=0)
    assert report.by_set["ours"].pass_at_1 == 0.5 and report.by_set["ours"].tasks == 2
    assert 0.0 < report.by_set["ours"].ci_low < 0.5 < report.by_set["ours"].ci_high < 1.0
    text = render_eval(report)
    assert "| ours | 2 | 0.5000 | [" in text
    assert f"| {solved.task_id} | ours | 1/1 | 1 | 0 |" in text
    assert f"| {tasks[1].task_id} | ours | 0/1 | 1 | 0 |" in text


def test_pass_at_1_is_reported_per_task_set_never_mixed():
    tasks = [EvaluationTask("own", "a", "c", None), EvaluationTask("imported", "b", "c", None, "terminal-bench-2"),
             EvaluationTask("imported", "c", "c", None, "terminal-bench-2")]
    rollouts = pl.DataFrame({"task_id": ["a", "b", "c"], "status": ["scored"] * 3, "reward": [1.0, 0.0, 0.0]})
    by_set = pass_at_1_by_set(rollouts, tasks)
    assert list(by_set) == ["own", "terminal-bench-2"]
    assert (by_set["own"].pass_at_1, by_set["own"].tasks) == (1.0, 1)
    assert (by_set["terminal-bench-2"].pass_at_1, by_set["terminal-bench-2"].tasks) == (0.0, 2)


def test_eval_refuses_a_directory_it_cannot_trust(clawloop_home, tmp_path, capsys):
    with pytest.raises(EvalError, match=f"--tasks {tmp_path / 'missing'}: not a directory"):
        load_eval_tasks(tmp_path / "missing")
    (tmp_path / "bundles").mkdir()
    with pytest.raises(SystemExit, match=r"no \.harbor-import\.json, so no task in it is known to be validated"):
        main(["eval", "--tasks", str(tmp_path / "bundles")])
    (tmp_path / "bundles" / ".harbor-import.json").write_text(json.dumps({"runnable": [], "not_runnable": []}))
    with pytest.raises(EvalError, match="its manifest lists no runnable task"):
        load_eval_tasks(tmp_path / "bundles")


def test_eval_refuses_an_unknown_checkpoint(imported_round):
    with pytest.raises(SystemExit, match="--checkpoint ckpt-nothere: neither a checkpoint directory"):
        main(["eval", "--tasks", str(imported_round), "--checkpoint", "ckpt-nothere"])


@pytest.mark.slow
def test_clawloop_eval_runs_the_embedded_policy_to_the_end(imported_round, capsys, monkeypatch):
    monkeypatch.setenv("CLAWLOOP_POLICY", "embedded")
    main(["eval", "--tasks", str(imported_round), "--samples", "1"])
    out = capsys.readouterr().out
    assert "| task set | tasks | pass@1 | 95% interval |" in out and "| ours | 2 |" in out

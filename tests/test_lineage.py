"""Lineage from a failure pattern to its tasks and back, on a real DuckDB
warehouse holding a small round written by hand: every level is reached by
the ids the rows carry, and exactly the rows they name."""

import json

import dagster as dg
import pytest

from clawloop_assets import cli
from clawloop_assets.reporting.lineage import (
    LEVEL_ASSETS,
    PHASE_ASSETS,
    LineageError,
    asset_url,
    lineage,
    pattern_lineage_table,
    render_markdown,
    render_text,
)
from resources.warehouse import DuckDBWarehouse, table_frame

R1, R2 = "round-0001", "round-0002"
STATS, FILES = "grouped_statistics", "file_reorganization"
# generator id -> (capability, domain)
GENERATORS = {f"{STATS}.sales.L0": (STATS, "sales"), f"{STATS}.library.L0": (STATS, "library"),
              f"{FILES}.sales.L1": (FILES, "sales")}
T1, T2, T3 = (f"{R1}.{g}.s100{i}" for i, g in enumerate(GENERATORS, 1))
P_COMPUTE = f"{R1}.{STATS}.computation_error.0"
P_MISREAD = f"{R1}.{STATS}.misread_task.0"
P_FILES = f"{R1}.{FILES}.premature_termination.0"
WRONG_VALUE = [{"name": "answer.txt", "passed": False, "detail": "expected a different value"}]


def rollout_row(round_key, task_id, phase, index, status="scored", reward=0.0, commands=("echo 3 > answer.txt",),
                checks=WRONG_VALUE):
    return {"round": round_key, "rollout_id": f"{task_id}.{phase}.{index}", "task_id": task_id, "phase": phase,
            "checkpoint_id": f"ckpt-{phase}", "sample_index": index, "status": status,
            "reward": reward if status == "scored" else None, "error": None if status == "scored" else "boom",
            "turns": len(commands), "submitted": True, "canary_seen": False, "commands": list(commands),
            "exit_codes": [0] * len(commands), "last_output": "", "verifier_checks": json.dumps(checks),
            "token_ids": [1, 2], "action_mask": [0, 1], "sampling_logprobs": [0.0, -0.5], "temperature": 0.7,
            "prompt_tokens": 1, "generated_tokens": 1, "model_seconds": 0.1, "sandbox_seconds": 0.1}


def summary_row(rollout_id, task_id, capability, cause):
    return {"round": R1, "summary_id": f"{rollout_id}.summary", "rollout_id": rollout_id, "task_id": task_id,
            "capability_id": capability, "failure_turn": 0, "failure_action": "echo 3 > answer.txt",
            "root_cause": cause, "missing_capability": "x", "evidence": "{}", "produced_by": "evidence_rules", "phase": "heldout_after"}


def pattern_row(pattern_id, capability, cause, summaries):
    return {"round": R1, "pattern_id": pattern_id, "capability_id": capability, "root_cause": cause,
            "count": len(summaries), "share": len(summaries) / 4, "description": f"{capability}: {cause}",
            "evidence": "e", "produced_by": f"evidence_rules: {len(summaries)}",
            "summary_ids": [s["summary_id"] for s in summaries],
            "example_rollout_ids": [s["rollout_id"] for s in summaries][:3],
            "task_ids": sorted({s["task_id"] for s in summaries})}


def catalog_rows(round_key, generators):
    return {
        "capabilities": [{"round": round_key, "capability_id": c, "track": "analysis" if c == STATS else "terminal",
                          "description": f"the {c} capability", "skills": ["s"], "route": "capability"}
                         for c in (STATS, FILES)],
        "domains": [{"round": round_key, "domain_id": d, "entity": f"{d} record", "vocabulary": "{}"}
                    for d in ("sales", "library")],
        "generators": [{"round": round_key, "generator_id": g, "capability_id": GENERATORS[g][0],
                        "domain_id": GENERATORS[g][1], "difficulty": 0, "track": "analysis", "source": "builtin",
                        "status": "written", "reason": None, "path": f"/gen/{round_key}/{g}"} for g in generators],
    }


def task_row(round_key, task_id, generator):
    capability, domain = GENERATORS[generator]
    return {"round": round_key, "task_id": task_id, "generator_id": generator, "capability_id": capability,
            "domain_id": domain, "difficulty": 0, "track": "analysis", "seed": 1, "bundle_path": f"/tasks/{task_id}",
            "build_status": "built", "build_error": None, "seconds": 0.1}


def write_rounds(warehouse):
    """Round 1: 3 tasks (2 capabilities, 2 domains), their rollouts, 4 failure
    summaries in 3 patterns. Round 2 reuses a generator id (generator,
    capability and domain ids repeat across rounds; task ids do not)."""
    generators = list(GENERATORS)
    tasks = [task_row(R1, t, g) for t, g in zip((T1, T2, T3), generators)]
    rollouts = [
        rollout_row(R1, T1, "validation", 0, reward=1.0),
        rollout_row(R1, T1, "heldout_after", 0),
        rollout_row(R1, T1, "heldout_after", 1, commands=("cat nope.csv",)),
        rollout_row(R1, T2, "heldout_after", 0),
        rollout_row(R1, T2, "heldout_after", 1, reward=1.0),
        rollout_row(R1, T3, "heldout_after", 0, commands=("ls",)),
        rollout_row(R1, T3, "heldout_after", 1, status="sandbox_error"),
    ]
    s1 = summary_row(f"{T1}.heldout_after.0", T1, STATS, "computation_error")
    s2 = summary_row(f"{T2}.heldout_after.0", T2, STATS, "computation_error")
    s3 = summary_row(f"{T1}.heldout_after.1", T1, STATS, "misread_task")
    s4 = summary_row(f"{T3}.heldout_after.0", T3, FILES, "premature_termination")
    patterns = [pattern_row(P_COMPUTE, STATS, "computation_error", [s1, s2]),
                pattern_row(P_MISREAD, STATS, "misread_task", [s3]),
                pattern_row(P_FILES, FILES, "premature_termination", [s4])]
    admissions = [{"round": R1, "task_id": t, "pass_count": 1, "scored_rollouts": 8, "excluded_rollouts": 0,
                   "admitted": True, "decision": "admitted"} for t in (T1, T2, T3)]
    splits = [{"round": R1, "task_id": t, "split": "heldout"} for t in (T1, T2, T3)]
    round_one = {**catalog_rows(R1, generators), "tasks": tasks, "rollouts": rollouts, "admissions": admissions,
                 "task_splits": splits, "failure_summaries": [s1, s2, s3, s4], "diagnosis_patterns": patterns}
    round_two = {**catalog_rows(R2, generators[:1]), "tasks": [task_row(R2, f"{R2}.{generators[0]}.s2001", generators[0])]}
    for key, tables in ((R1, round_one), (R2, round_two)):
        for table, rows in tables.items():
            warehouse.replace(table, table_frame(table, rows), {"round": key})


@pytest.fixture
def warehouse(clawloop_home):
    warehouse = DuckDBWarehouse()  # $CLAWLOOP_HOME/warehouse.duckdb, as the CLI finds it
    write_rounds(warehouse)
    return warehouse


def test_a_pattern_reaches_exactly_its_summaries_trajectories_tasks_generators_capability_and_domains(warehouse):
    chain = lineage(warehouse, P_COMPUTE)
    assert (chain.kind, chain.round, chain.level) == ("pattern", R1, "patterns")
    assert chain.ids("patterns") == [P_COMPUTE]
    assert chain.ids("summaries") == sorted([f"{T1}.heldout_after.0.summary", f"{T2}.heldout_after.0.summary"])
    assert chain.ids("trajectories") == sorted([f"{T1}.heldout_after.0", f"{T2}.heldout_after.0"])
    assert [(r.phase, r.reward, r.status, r.checkpoint_id) for r in chain.trajectories] == [
        ("heldout_after", 0.0, "scored", "ckpt-heldout_after")] * 2
    assert chain.ids("tasks") == sorted([T1, T2])
    assert all(t.split == "heldout" and t.admitted and t.bundle_path == f"/tasks/{t.task_id}" for t in chain.tasks)
    assert chain.ids("generators") == [f"{STATS}.library.L0", f"{STATS}.sales.L0"]
    assert {(g.round, g.source, g.path) for g in chain.generators} == {
        (R1, "builtin", f"/gen/{R1}/{STATS}.library.L0"), (R1, "builtin", f"/gen/{R1}/{STATS}.sales.L0")}
    # One capability row: round 1's, though round 2 has the same capability id.
    assert [(c.capability_id, c.round, c.track) for c in chain.capabilities] == [(STATS, R1, "analysis")]
    assert [(d.domain_id, d.round, d.entity) for d in chain.domains] == [("library", R1, "library record"),
                                                                         ("sales", R1, "sales record")]


def test_a_trajectory_goes_up_to_its_task_and_down_to_its_summary_and_pattern(warehouse):
    rollout_id = f"{T1}.heldout_after.1"
    chain = lineage(warehouse, rollout_id)
    assert (chain.kind, chain.round) == ("trajectory", R1)
    assert chain.ids("trajectories") == [rollout_id]
    assert chain.ids("summaries") == [f"{rollout_id}.summary"]
    assert chain.ids("patterns") == [P_MISREAD]
    assert chain.ids("tasks") == [T1]
    assert chain.ids("generators") == [f"{STATS}.sales.L0"]
    assert chain.ids("capabilities") == [STATS] and chain.ids("domains") == ["sales"]
    # A failure summary's id resolves to the same chain.
    summary = lineage(warehouse, f"{rollout_id}.summary")
    assert summary.kind == "failure summary"
    assert [summary.ids(level) for level in ("patterns", "trajectories", "tasks")] == [[P_MISREAD], [rollout_id], [T1]]


def test_a_task_lists_all_its_rollouts_their_summaries_and_patterns(warehouse):
    chain = lineage(warehouse, T1)
    assert chain.kind == "task" and chain.ids("tasks") == [T1]
    # Every phase, the summarized failures first.
    assert chain.ids("trajectories") == [f"{T1}.heldout_after.0", f"{T1}.heldout_after.1", f"{T1}.validation.0"]
    assert chain.ids("summaries") == [f"{T1}.heldout_after.0.summary", f"{T1}.heldout_after.1.summary"]
    assert chain.ids("patterns") == [P_COMPUTE, P_MISREAD]
    assert chain.ids("generators") == [f"{STATS}.sales.L0"] and chain.ids("domains") == ["sales"]
    # A task without failures still has its chain up to the domain; no patterns.
    clean = lineage(warehouse, f"{R2}.{STATS}.sales.L0.s2001")
    assert clean.round == R2 and clean.patterns == () and clean.trajectories == ()
    assert [(g.generator_id, g.round) for g in clean.generators] == [(f"{STATS}.sales.L0", R2)]
    assert clean.tasks[0].split is None and clean.tasks[0].admitted is None


def test_a_generator_id_is_qualified_by_its_round_when_rounds_share_it(warehouse):
    with pytest.raises(LineageError, match="round-0001, round-0002: qualify it"):
        lineage(warehouse, f"{STATS}.sales.L0")
    chain = lineage(warehouse, f"{R1}.{STATS}.sales.L0")
    assert chain.kind == "generator" and chain.ids("tasks") == [T1]
    assert chain.ids("patterns") == [P_COMPUTE, P_MISREAD]
    only_round_one = lineage(warehouse, f"{FILES}.sales.L1")
    assert only_round_one.round == R1 and only_round_one.ids("patterns") == [P_FILES]


def test_an_unknown_id_names_the_kinds_it_tried(warehouse):
    with pytest.raises(LineageError) as caught:
        lineage(warehouse, "round-0001.nothing")
    message = str(caught.value)
    assert "'round-0001.nothing'" in message
    for kind in ("pattern", "failure summary", "trajectory", "task", "generator"):
        assert kind in message


def test_lineage_works_while_a_round_is_in_progress(clawloop_home):
    """Only synthesis has written: no rollouts, summaries or patterns tables yet."""
    warehouse = DuckDBWarehouse()
    for table, rows in {**catalog_rows(R1, list(GENERATORS)[:1]), "tasks": [task_row(R1, T1, list(GENERATORS)[0])]}.items():
        warehouse.replace(table, table_frame(table, rows), {"round": R1})
    chain = lineage(warehouse, T1)
    assert chain.trajectories == () and chain.patterns == () and chain.ids("domains") == ["sales"]
    assert pattern_lineage_table(warehouse, R1) == f"No failure patterns in {R1}.\n"


def test_render_text_and_markdown_show_the_chain_capped(warehouse):
    text = render_text(lineage(warehouse, P_COMPUTE))
    lines = text.splitlines()
    assert lines[0].startswith(f"lineage of pattern {P_COMPUTE} ({R1})")
    assert f"  * {P_COMPUTE}: count 2, computation_error" in text
    # Each level indented under the one it came from.
    assert "  failure summaries (2)" in lines and "      tasks (2)" in lines
    assert "            domains (2)" in lines
    assert f"  - {T1}.heldout_after.0: heldout_after, reward 0, checkpoint ckpt-heldout_after" in text
    assert f"{T1}: split heldout, admitted, L0, bundle /tasks/{T1}" in text
    capped = render_text(lineage(warehouse, T1), limit=1)
    assert "(+2 more)" in capped and f"{T1}.validation.0" not in capped
    markdown = render_markdown(lineage(warehouse, T1))
    assert f"**Lineage of task `{T1}`**" in markdown and f"- **`{T1}`: split heldout" in markdown


def test_the_cli_prints_the_chain_and_exits_1_on_an_unknown_id(warehouse, capsys):
    cli.main(["lineage", f"{T1}.heldout_after.0"])
    out = capsys.readouterr().out
    assert out.startswith(f"lineage of trajectory {T1}.heldout_after.0 ({R1})")
    assert P_COMPUTE in out and f"{STATS}.sales.L0" in out and "sales record" in out
    with pytest.raises(SystemExit) as caught:
        cli.main(["lineage", "no-such-id"])
    assert caught.value.code not in (0, None)
    assert "unknown id 'no-such-id'" in str(caught.value.code)


def test_the_pattern_table_has_one_row_per_pattern_with_its_ids_and_links(warehouse):
    table = pattern_lineage_table(warehouse, R1)
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    assert [r[0].lstrip("| ") for r in rows] == [P_COMPUTE, P_FILES, P_MISREAD]
    compute = rows[0]
    # Each level's ids, then " in " and links to the round's pages of the assets holding them.
    ids = [cell.split(" in ")[0] for cell in compute]
    assert compute[1:3] == ["2", "2"]
    assert ids[3] == f"{T1}.heldout_after.0, {T2}.heldout_after.0"  # the pattern's examples
    assert ids[4] == ", ".join(sorted([T1, T2]))
    assert ids[5] == f"{STATS}.library.L0, {STATS}.sales.L0"
    # The skill (rows written before skills were recorded: the capability), then the tasks' capabilities.
    assert ids[6] == STATS and ids[7] == STATS and ids[8] == "library, sales"
    assert [cell.split(" in ")[0] for cell in rows[1][4:8]] == [T3, f"{FILES}.sales.L1", FILES, FILES]
    page = "/assets/{}?view=partitions&partition=" + R1
    # The summaries are of held-out rollouts: the trained policy's, written by diagnosis_rollouts.
    assert compute[3].endswith(f" in [diagnosis_rollouts]({page.format('diagnosis_rollouts')})")
    assert compute[4].endswith(f" in [candidate_tasks]({page.format('candidate_tasks')}) "
                               f"[admitted_tasks]({page.format('admitted_tasks')})")
    assert compute[5].endswith(f" in [task_generators]({page.format('task_generators')})")
    assert compute[7].endswith(f" in [capability_catalog]({page.format('capability_catalog')})")
    assert compute[8].endswith(f" in [domain_catalog]({page.format('domain_catalog')})")
    assert compute[9].rstrip(" |") == f"`clawloop lineage {P_COMPUTE}`"
    assert pattern_lineage_table(warehouse, R2) == f"No failure patterns in {R2}.\n"


def test_the_pattern_table_links_the_rollouts_of_each_phase_its_summaries_cover(warehouse):
    """A pattern of unsolved candidates' validation rollouts links to
    validation_rollouts, and one spanning both phases to both assets."""
    s5 = summary_row(f"{T1}.validation.0", T1, STATS, "computation_error") | {"phase": "validation"}
    summaries = warehouse.read("failure_summaries", {"round": R1}).to_dicts() + [s5]
    patterns = warehouse.read("diagnosis_patterns", {"round": R1}).to_dicts()
    compute = next(p for p in patterns if p["pattern_id"] == P_COMPUTE)
    compute["summary_ids"] = [*compute["summary_ids"], s5["summary_id"]]
    compute["count"] = 3
    validation_only = pattern_row(f"{R1}.{STATS}.misread_task.1", STATS, "misread_task", [s5])
    warehouse.replace("failure_summaries", table_frame("failure_summaries", summaries), {"round": R1})
    warehouse.replace("diagnosis_patterns", table_frame("diagnosis_patterns", [*patterns, validation_only]),
                      {"round": R1})
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in
            pattern_lineage_table(warehouse, R1).splitlines()[2:]}
    linked = {pattern: [a for a in ("diagnosis_rollouts", "validation_rollouts") if f"[{a}](/assets/{a}?" in row[3]]
              for pattern, row in rows.items()}
    assert linked[P_COMPUTE] == ["diagnosis_rollouts", "validation_rollouts"]
    assert linked[validation_only["pattern_id"]] == ["validation_rollouts"]
    assert linked[P_FILES] == ["diagnosis_rollouts"]


def test_the_lineage_links_open_assets_of_the_round():
    from clawloop_assets.definitions import round_assets

    names = {key.path[-1] for assets in round_assets for key in assets.keys}
    linked = {asset for assets in LEVEL_ASSETS.values() for asset in assets} | set(PHASE_ASSETS.values())
    assert linked <= names, linked - names
    assert asset_url("admitted_tasks", R2) == f"/assets/admitted_tasks?view=partitions&partition={R2}"


def test_the_diagnosis_report_links_each_pattern_to_its_lineage(clawloop_home):
    """The asset itself, on held-out rollouts written by hand (the loop model
    is not asked): its metadata carries the lineage table."""
    from clawloop_assets.assets.diagnosis import diagnosis_report
    from clawloop_assets.loop_config import LoopConfig
    from resources import paths
    from resources.embedded_policy import EmbeddedPolicyModel

    warehouse = DuckDBWarehouse()
    write_rounds(warehouse)
    paths.round_dir(R1).mkdir(parents=True)  # the round's earlier assets make it
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [R1])
    result = dg.materialize([diagnosis_report], partition_key=R1, instance=instance, resources={
        "warehouse": warehouse, "policy": EmbeddedPolicyModel(), "loop": LoopConfig(model_failure_summaries=False)})
    assert result.success
    metadata = result.asset_materializations_for_node("diagnosis_report")[0].metadata
    table = metadata["lineage"].value
    patterns = warehouse.read("diagnosis_patterns", {"round": R1})
    assert table == pattern_lineage_table(warehouse, R1)
    assert len(table.splitlines()) == 2 + patterns.height
    for pattern_id in patterns["pattern_id"]:
        assert pattern_id in table
        chain = lineage(warehouse, pattern_id)
        assert set(chain.ids("tasks")) <= {T1, T2, T3} and chain.capabilities


def test_a_warm_up_skill_pattern_spans_families_and_its_lineage_reaches_each(clawloop_home):
    """Two families' warm-up tasks that ask for the same operation (their
    meta.json names it, as one_step_task writes it) fail alike: the
    diagnosis report, the asset itself, groups them in one pattern named by
    the operation, and the lineage goes from it to both tasks and both
    capabilities. A task at level 0 stays grouped by its capability, and a
    meta.json naming no operation of its level does not make one up."""
    from clawloop_assets.assets.diagnosis import diagnosis_report
    from clawloop_assets.loop_config import LoopConfig
    from resources import paths
    from resources.embedded_policy import EmbeddedPolicyModel

    R3 = "round-0003"
    generators = {f"{STATS}.sales.L-2": (STATS, "sales", -2), f"{FILES}.library.L-2": (FILES, "library", -2),
                  f"{STATS}.library.L0": (STATS, "library", 0), f"{FILES}.sales.L-2": (FILES, "sales", -2)}
    operations = ["copy_file", "copy_file", "copy_file", "rm -rf /"]
    tasks, rollouts = [], []
    for i, ((generator, (capability, domain, level)), operation) in enumerate(zip(generators.items(), operations)):
        task_id = f"{R3}.{generator}.s{3000 + i}"
        bundle = clawloop_home / "bundles" / task_id
        bundle.mkdir(parents=True)
        (bundle / "meta.json").write_text(json.dumps({"operation": operation}))
        tasks.append({**task_row(R3, task_id, list(GENERATORS)[0]), "generator_id": generator,
                      "capability_id": capability, "domain_id": domain, "difficulty": level,
                      "bundle_path": str(bundle)})
        rollouts.append(rollout_row(R3, task_id, "heldout_after", 0, commands=("sudo cp data.csv backup.csv",)))
    catalog = catalog_rows(R3, [])
    for table, rows in {**catalog, "tasks": tasks, "rollouts": rollouts}.items():
        DuckDBWarehouse().replace(table, table_frame(table, rows), {"round": R3})
    warehouse = DuckDBWarehouse()
    paths.round_dir(R3).mkdir(parents=True)
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [R3])
    result = dg.materialize([diagnosis_report], partition_key=R3, instance=instance, resources={
        "warehouse": warehouse, "policy": EmbeddedPolicyModel(), "loop": LoopConfig(model_failure_summaries=False)})
    assert result.success
    [t1, t2, t3, t4] = [t["task_id"] for t in tasks]
    summaries = warehouse.read("failure_summaries", {"round": R3})
    assert dict(zip(summaries["task_id"], summaries["skill"])) == {t1: "copy_file", t2: "copy_file", t3: STATS,
                                                                   t4: FILES}
    patterns = {p["skill"]: p for p in warehouse.read("diagnosis_patterns", {"round": R3}).iter_rows(named=True)}
    assert set(patterns) == {"copy_file", STATS, FILES}
    copying = patterns["copy_file"]
    assert copying["task_ids"] == sorted([t1, t2]) and copying["capability_id"] is None
    assert copying["pattern_id"].startswith(f"{R3}.copy_file.")
    assert copying["description"].startswith("copying a file fails: ")
    assert patterns[STATS]["capability_id"] == STATS and patterns[STATS]["description"].startswith(f"{STATS} fails: ")
    chain = lineage(warehouse, copying["pattern_id"])
    assert chain.ids("tasks") == sorted([t1, t2])
    assert chain.ids("capabilities") == sorted([FILES, STATS]) and chain.patterns[0].skill == "copy_file"
    row = next(line.split(" | ") for line in pattern_lineage_table(warehouse, R3).splitlines()[2:]
               if copying["pattern_id"] in line)
    assert row[6] == "copy_file" and row[7].split(" in ")[0] == f"{FILES}, {STATS}"
    report = (paths.round_dir(R3) / "diagnosis_report.md").read_text()
    assert "| copying a file | 0 | 2 | 0.0% |" in report and f"| {STATS} | 0 | 1 | 0.0% |" in report

"""The domain-grounded route end to end in the real sandbox: an abstract task
graph with the level's structural features, grounded by execution on an
executable domain's seeded database, passes the same agent-free validation as
every other task, and its instruction keeps the information barrier."""

import json

import dagster as dg
import pytest

from clawloop_assets.synthesis import catalogs, task_graphs
from clawloop_assets.synthesis.candidates import build_candidate, domain_generator_spec, write_generator
from clawloop_assets.synthesis.executable_domains import BUILTIN_DOMAINS_DIR, load_domain
from clawloop_assets.task_bundle import load_task_bundle
from clawloop_assets.validation.agent_free import validate_without_agent
from resources.sandbox import BubblewrapSandbox

# The shipped domains alone: what a user put in $CLAWLOOP_HOME/domains never shapes the tests collected.
SHIPPED = sorted(p for p in BUILTIN_DOMAINS_DIR.iterdir() if (p / "domain.json").is_file())
DOMAINS = {d.id: d for d in map(load_domain, SHIPPED)}
CASES = [(domain, level) for domain in sorted(DOMAINS) for level in range(5)]


@pytest.fixture(scope="module")
def sandbox():
    return BubblewrapSandbox()


def build(sandbox, tmp_path, domain, level, seed=1):
    spec = domain_generator_spec(catalogs.DOMAIN_WORKFLOW, DOMAINS[domain], level)
    generator = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    return build_candidate(sandbox, generator, spec, seed, "round-0001", tmp_path / "tasks")


@pytest.mark.parametrize("domain, level", CASES, ids=[f"{d}-L{lv}" for d, lv in CASES])
def test_a_grounded_task_passes_agent_free_validation_and_keeps_the_barrier(sandbox, tmp_path, domain, level):
    candidate = build(sandbox, tmp_path, domain, level)
    assert candidate.error is None, candidate.error
    bundle = load_task_bundle(candidate.bundle_dir)
    result = validate_without_agent(sandbox, bundle, tmp_path / "scratch")
    assert result.passed, result.reason
    meta = json.loads((bundle.root / "meta.json").read_text())
    graph = task_graphs.from_dict(meta["task_graph"])
    task_graphs.validate_task_graph(graph)
    assert set(meta["features"]) <= task_graphs.graph_features(graph)
    assert bool(meta["features"]) == (level > 0)
    gold = meta["gold_trajectory"]
    if level == 3:
        assert meta["features"] == ["error_recovery"]
    if "error_recovery" in meta["features"]:
        assert any(step["refused"] for step in gold)  # a refusal really happened, then the retry went through
    # The barrier, checked again here: no gold tool and no order word in what the agent reads.
    steps = [task_graphs.GoldStep(s["tool"], s["arguments"], None, s["refused"]) for s in gold]
    assert not [v for v in task_graphs.barrier_violations(bundle.instruction, steps, {}, {}) if "names gold tool" in v
                or "tool sequence" in v or "procedure" in v]
    # The workspace: the database, the tools and their description; the solution calls only tools.
    names = {p.name for p in bundle.environment_dir.iterdir()}
    assert {"domain.db", "tools.py", "tool_cli.py", "TOOLS.md", "CONTRACT.md"} <= names
    assert all(line.startswith("python3 tools.py ") for line in bundle.solution_path.read_text().splitlines()[2:])


def test_an_ungroundable_domain_is_a_clear_build_failure(sandbox, tmp_path):
    from clawloop_assets.synthesis.executable_domains import load_domain

    root = tmp_path / "read_only_shop"
    root.mkdir()
    source = DOMAINS["order_management"].root
    for name in ("schema.sql", "seed.py"):
        (root / name).write_text((source / name).read_text())
    (root / "domain.json").write_text(json.dumps({"id": "read_only_shop", "title": "A shop nobody can change",
                                                  "description": "only lookups", "business_keys": {"orders": "order_id"}}))
    (root / "tools.py").write_text(
        "from tool_cli import ToolError\n\n\n"
        "def get_order(db, order_id: str) -> dict:\n    '''Look up an order.'''\n"
        "    row = db.execute(\"SELECT status FROM orders WHERE order_id = ?\", (order_id,)).fetchone()\n"
        "    return {\"status\": row[0]}\n\n\n"
        "if __name__ == '__main__':\n    from tool_cli import main\n    main(globals())\n")
    spec = domain_generator_spec(catalogs.DOMAIN_WORKFLOW, load_domain(root), 0)
    generator = write_generator(spec, tmp_path / "generators" / spec.generator_id)
    candidate = build_candidate(sandbox, generator, spec, 1, "round-0001", tmp_path / "tasks")
    assert candidate.bundle_dir is None
    assert "no grounding of a plain graph in read_only_shop after 400 attempts" in candidate.error


def test_a_round_draws_from_both_routes_and_the_switch_turns_one_off(clawloop_home):
    from clawloop_assets.definitions import gate_checks, round_assets
    from clawloop_assets.loop_config import LoopConfig
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.training_launcher import SubprocessTrainingLauncher
    from resources.warehouse import DuckDBWarehouse

    def synthesize(key, routes, candidates):
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("rounds", [key])
        result = dg.materialize(
            [*round_assets, *gate_checks], partition_key=key, instance=instance,
            selection=dg.AssetSelection.assets("agent_free_validation").upstream(),
            resources={"sandbox": BubblewrapSandbox(), "warehouse": DuckDBWarehouse(), "policy": EmbeddedPolicyModel(),
                       "training_launcher": SubprocessTrainingLauncher(),
                       "loop": LoopConfig(candidates_per_round=candidates, synthesis_routes=routes)},
        )
        assert result.success
        tasks = DuckDBWarehouse().read("tasks", {"round": key})
        checks = DuckDBWarehouse().read("agent_free_validations", {"round": key})
        return tasks, dict(zip(checks["task_id"], checks["passed"]))

    tasks, passed = synthesize("round-0001", ["capability", "domain"], 26)
    domain_tasks = tasks.filter(tasks["capability_id"] == "domain_workflow")
    assert domain_tasks.height >= 2 and set(domain_tasks["domain_id"]) <= set(DOMAINS)
    assert all(passed[t] for t in domain_tasks["task_id"])  # the same agent-free validation as the others
    assert tasks.filter(tasks["capability_id"] != "domain_workflow").height >= 20
    # A plan gives every capability it plans for a candidate, so one per
    # capability of the capability route would show domain_workflow if planned.
    capability_route = catalogs.round_capabilities(["capability"])
    tasks, _ = synthesize("round-0001", ["capability"], len(capability_route))
    assert set(tasks["capability_id"]) == {c.id for c in capability_route}
    with pytest.raises(Exception, match="synthesis routes must be a non-empty subset"):
        LoopConfig(synthesis_routes=["vibes"])

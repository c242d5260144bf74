"""The domain route's graph asset, materialized for real: every executable
domain's tripartite graph and skills land in the warehouse and the UI, and a
domain a user drops into $CLAWLOOP_HOME/domains joins them without code."""

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import dagster as dg

from clawloop_assets.synthesis.executable_domains import BUILTIN_DOMAINS_DIR, TOOL_CLI, load_domains

ROUND = "round-0001"


def materialize(instance=None):
    from clawloop_assets.assets.domains import domain_skill_graphs
    from clawloop_assets.loop_config import LoopConfig
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.warehouse import DuckDBWarehouse

    instance = instance or dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [ROUND])
    return dg.materialize([domain_skill_graphs], partition_key=ROUND, instance=instance,
                          resources={"warehouse": DuckDBWarehouse(), "policy": EmbeddedPolicyModel(), "loop": LoopConfig()})


def test_every_domain_graph_and_skill_lands_in_the_warehouse(clawloop_home):
    from resources.warehouse import DuckDBWarehouse

    result = materialize()
    assert result.success
    warehouse = DuckDBWarehouse()
    tools = warehouse.read("domain_tools", {"round": ROUND})
    edges = warehouse.read("domain_graph_edges", {"round": ROUND})
    skills = warehouse.read("domain_skills", {"round": ROUND})
    domains = {"order_management", "warehouse_load_planning", "database_administration"}
    assert set(tools["domain_id"]) == set(edges["domain_id"]) == set(skills["domain_id"]) == domains
    # Every tool sits in exactly one skill of its domain.
    for domain in domains:
        own = set(tools.filter(tools["domain_id"] == domain)["tool"])
        grouped = [t for row in skills.filter(skills["domain_id"] == domain)["tools"].to_list() for t in row]
        assert sorted(grouped) == sorted(own)
    # The graph has all four edge kinds, and a producer-consumer link in each domain.
    assert set(edges["kind"]) == {"consumes", "produces", "reads", "writes"}
    for domain in domains:
        mine = edges.filter(edges["domain_id"] == domain)
        produced = set(mine.filter(mine["kind"] == "produces")["node"])
        consumed = set(mine.filter(mine["kind"] == "consumes")["node"])
        assert produced & consumed, domain
    # Each skill's spec was read from its script, and the script runs.
    row = skills.row(0, named=True)
    spec = json.loads(row["capability_spec"])
    assert set(spec["tools"]) == set(row["tools"]) and row["decision"] == "accepted_prior"
    completed = subprocess.run([sys.executable, row["script_path"], "--help"], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr
    assert all(tool in completed.stdout for tool in row["tools"])
    metadata = result.asset_materializations_for_node("domain_skill_graphs")[0].metadata
    assert metadata["domains"].value == 3 and "Order management" in metadata["graphs"].value
    assert metadata["model_review"].value == "not asked (no capable model configured)"


def test_rematerializing_writes_the_skills_afresh(clawloop_home):
    """A skill file the current clustering does not yield (left by an earlier
    materialization, or an override since removed) is gone after the next."""
    from resources.warehouse import DuckDBWarehouse

    assert materialize().success
    skills = DuckDBWarehouse().read("domain_skills", {"round": ROUND})
    skill_dir = Path(skills.row(0, named=True)["script_path"]).parent
    stale = skill_dir / "retired_skill.py"
    stale.write_text("# a skill an earlier clustering yielded\n")
    assert materialize().success
    assert not stale.exists()
    assert all(Path(path).is_file() for path in DuckDBWarehouse().read("domain_skills", {"round": ROUND})["script_path"])


def user_domain(home, domain_id, title):
    root = home / "domains" / domain_id
    shutil.copytree(BUILTIN_DOMAINS_DIR / "order_management", root, ignore=shutil.ignore_patterns("__pycache__"))
    meta = json.loads((root / "domain.json").read_text())
    (root / "domain.json").write_text(json.dumps({**meta, "id": domain_id, "title": title}))
    return root


def test_a_user_domain_joins_without_code_and_a_broken_one_is_rejected_alone(clawloop_home):
    from resources.warehouse import DuckDBWarehouse

    user_domain(clawloop_home, "parcel_lockers", "Parcel lockers")
    assert "parcel_lockers" in {d.id for d in load_domains()}
    broken = user_domain(clawloop_home, "broken_shop", "Broken shop")
    (broken / "seed.py").unlink()
    result = materialize()
    assert result.success
    metadata = result.asset_materializations_for_node("domain_skill_graphs")[0].metadata
    assert metadata["domains"].value == 4 and metadata["rejected_domains"].value == 1
    assert f"| {broken} | {broken}: missing seed.py |" in metadata["domain_rejections"].value
    tools = DuckDBWarehouse().read("domain_tools", {"round": ROUND})
    assert "parcel_lockers" in set(tools["domain_id"]) and "broken_shop" not in set(tools["domain_id"])


def test_task_generators_go_on_past_a_broken_user_domain(clawloop_home):
    """Both routes' generators are written, the domain route's from the
    domains that load; the broken one is named in the asset's metadata."""
    from clawloop_assets.definitions import round_assets
    from clawloop_assets.loop_config import LoopConfig
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.sandbox import BubblewrapSandbox
    from resources.training_launcher import SubprocessTrainingLauncher
    from resources.warehouse import DuckDBWarehouse

    user_domain(clawloop_home, "parcel_lockers", "Parcel lockers")
    broken = user_domain(clawloop_home, "broken_shop", "Broken shop")
    (broken / "seed.py").unlink()
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [ROUND])
    result = dg.materialize(round_assets, partition_key=ROUND, instance=instance, raise_on_error=False,
                            selection=dg.AssetSelection.assets("task_generators").upstream(),
                            resources={"warehouse": DuckDBWarehouse(), "policy": EmbeddedPolicyModel(),
                                       "sandbox": BubblewrapSandbox(), "training_launcher": SubprocessTrainingLauncher(),
                                       "loop": LoopConfig(candidates_per_round=40)})
    assert result.success
    generators = DuckDBWarehouse().read("generators", {"round": ROUND})
    domain_route = set(generators.filter(generators["capability_id"] == "domain_workflow")["domain_id"])
    assert domain_route and "broken_shop" not in domain_route
    assert generators.filter(generators["capability_id"] != "domain_workflow").height > 0
    metadata = result.asset_materializations_for_node("task_generators")[0].metadata
    assert f"| {broken} | {broken}: missing seed.py |" in metadata["rejected_domains"].value
    assert (broken / "tools.py").is_file()  # nothing of the user's removed


def test_the_tool_runtime_tells_a_crash_from_a_refusal(tmp_path):
    shutil.copy(TOOL_CLI, tmp_path / "tool_cli.py")
    (tmp_path / "tools.py").write_text(
        "from tool_cli import ToolError\n\n\n"
        "def refuse(db, why: str) -> dict:\n    raise ToolError(why)\n\n\n"
        "def crash(db, flag: bool) -> dict:\n    return {'x': 1 / 0}\n\n\n"
        "if __name__ == '__main__':\n    from tool_cli import main\n    main(globals())\n")

    def run(*args):
        return subprocess.run([sys.executable, "tools.py", *args], cwd=tmp_path, capture_output=True, text=True)

    missing = run("refuse", "--why", "no")
    assert missing.returncode == 1 and "no database at domain.db" in missing.stdout
    assert not (tmp_path / "domain.db").exists()  # not created as a side effect
    sqlite3.connect(tmp_path / "domain.db").close()
    assert run("refuse", "--why", "no").returncode == 1
    crashed = run("crash", "--flag", "true")
    assert crashed.returncode == 3 and "ZeroDivisionError" in crashed.stdout
    assert run("crash", "--flag", "ture").returncode == 2  # not silently false


class ReviewingPolicy:
    """A unit-test double for a capable model reviewing the skill prior: it moves
    restock next to check_stock in order management and answers prose elsewhere."""

    def __new__(cls):
        from resources.policy import Completion, PolicyModel, PolicySession

        class Session(PolicySession):
            def encode(self, text):
                return [ord(c) for c in text]

            def decode(self, token_ids):
                return "".join(chr(t) for t in token_ids)

            def chat_text(self, messages, *, add_generation_prompt):
                return "\n".join(m["content"] for m in messages)

            def sample(self, prompts, n, params):
                out = []
                for prompt in prompts:
                    text = self.decode(prompt)
                    reply = ('```json\n[{"skill_id": "shelf", "tools": ["check_stock", "restock"], '
                             '"reason": "both keep the shelf stocked"}]\n```' if "Domain: order_management" in text
                             else "I would leave it as it is.")
                    out.append([Completion(self.encode(reply), [0.0] * len(reply), reply, "stop")] * n)
                return out

        class Model(PolicyModel):
            def base_checkpoint(self):
                from conftest import MODEL_CACHE

                return MODEL_CACHE / "smollm2-135m-instruct"

            def load(self, checkpoint_dir):
                return Session()

        return Model()


def test_a_capable_model_may_override_the_skill_prior_with_a_reason(clawloop_home, base_checkpoint_dir):
    from clawloop_assets.assets.domains import domain_skill_graphs
    from clawloop_assets.loop_config import LoopConfig
    from resources.warehouse import DuckDBWarehouse

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("rounds", [ROUND])
    result = dg.materialize([domain_skill_graphs], partition_key=ROUND, instance=instance,
                            resources={"warehouse": DuckDBWarehouse(), "policy": ReviewingPolicy(),
                                       "loop": LoopConfig(generator_source="model")})
    assert result.success
    skills = DuckDBWarehouse().read("domain_skills", {"round": ROUND})
    shelf = skills.filter((skills["domain_id"] == "order_management") & (skills["skill_id"] == "shelf")).row(0, named=True)
    assert shelf["tools"] == ["check_stock", "restock"] and shelf["decision"] == "overridden"
    assert shelf["reason"] == "model: both keep the shelf stocked"
    others = skills.filter(skills["domain_id"] != "order_management")
    assert set(others["decision"]) == {"accepted_prior"}
    review = result.asset_materializations_for_node("domain_skill_graphs")[0].metadata["model_review"].value
    assert "1 override(s) applied" in review and "rejected, the prior stands: the skill review holds no JSON list" in review

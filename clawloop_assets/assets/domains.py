"""The domain-grounded route's first stage: each executable domain's
tripartite graph (tools, the fields they consume and produce, the tables they
read and write; by AST inspection of tools.py, never by running it) and its
skills (tools clustered by affinity, or as a stated override moved them),
each materialized as a CLI script, a document and a capability spec read back
from the script's code."""

import json
import shutil

import dagster as dg

from clawloop_assets.assets.common import WAREHOUSE_WRITER_POOL
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.markdown import markdown_table
from clawloop_assets.partitions import round_partitions
from clawloop_assets.round_state import input_policy, workdir
from clawloop_assets.synthesis import domain_graph, executable_domains
from resources.policy import PolicyModel, SamplingParams
from resources.warehouse import Warehouse, table_frame

GROUP = "domain_route"


@dg.asset(partitions_def=round_partitions, group_name=GROUP, pool=WAREHOUSE_WRITER_POOL)
def domain_skill_graphs(context: dg.AssetExecutionContext, warehouse: Warehouse, policy: PolicyModel,
                        loop: LoopConfig) -> dg.MaterializeResult:
    """Tripartite graph and skills of every executable domain (built-in and
    `$CLAWLOOP_HOME/domains/`), in the warehouse and on disk. The clustering is
    a prior: the domain's skills_override.json (a person's), then, where a
    capable model is configured (`generator_source = "model"`), the round's
    input policy may move tools with a stated reason; a review that does not
    hold up is recorded and the prior stands. A malformed user domain is
    rejected alone, with its file and reason in the metadata."""
    key = context.partition_key
    root = workdir(key, "domains")
    tool_rows, edge_rows, skill_rows = [], [], []
    sections, reviews = [], []
    review = _model_review(warehouse, policy, loop, key) if loop.generator_source == "model" else None
    domains, rejected = executable_domains.scan_domains()
    for bad in rejected:
        context.log.warning(f"user domain rejected: {bad.reason}")
    for domain in domains:
        source = domain.tools_source
        graph = domain_graph.extract_graph(domain.id, source, str(domain.path("tools.py")))
        skills, decisions = domain_graph.apply_overrides(
            domain_graph.cluster_skills(graph), domain_graph.load_overrides(domain.root), graph)
        if review is not None:
            try:
                overrides = [{**o, "reason": f"model: {o.get('reason', '')}" if str(o.get("reason", "")).strip() else ""}
                             if isinstance(o, dict) else o for o in review(graph, skills)]
                reviewed, reviewed_decisions = domain_graph.apply_overrides(skills, overrides, graph)
                if overrides:
                    # A skill the file overrode and the model left alone stays overridden.
                    before = {d["skill_id"]: d["decision"] for d in decisions}
                    for d in reviewed_decisions:
                        if before.get(d["skill_id"]) == "overridden":
                            d["decision"] = "overridden"
                    skills, decisions = reviewed, reviewed_decisions
                reviews.append((domain.id, f"{len(overrides)} override(s) applied" if overrides else "accepted the prior"))
            except domain_graph.DomainGraphError as exc:
                reviews.append((domain.id, f"rejected, the prior stands: {exc}"))
        skill_dir = root / domain.id / "skills"
        # A rematerialization writes the skills afresh: a skill the clustering
        # or a review no longer yields must not linger beside the current ones.
        if skill_dir.exists():
            shutil.rmtree(skill_dir)
        artifacts = {s.skill_id: domain_graph.materialize_skill(graph, s, source, skill_dir) for s in skills}
        # Beside the tools they wrap, so the directory runs as a workspace would.
        shutil.copyfile(domain.path("tools.py"), skill_dir / "tools.py")
        shutil.copyfile(executable_domains.TOOL_CLI, skill_dir / "tool_cli.py")
        tool_rows += [{"round": key, "domain_id": domain.id, "tool": t.name, "description": t.description,
                       "parameters": json.dumps([p.__dict__ for p in t.params]), "refuses": t.refuses} for t in graph.tools]
        edge_rows += [{"round": key, **row} for row in domain_graph.graph_rows(graph)]
        for row in domain_graph.skill_rows(skills, decisions):
            artifact = artifacts[row["skill_id"]]
            skill_rows.append({"round": key, **row, "capability_spec": json.dumps(artifact.capability_spec, sort_keys=True),
                               "script_path": str(artifact.script_path), "doc_path": str(artifact.doc_path)})
        sections.append(f"### {domain.title} (`{domain.id}`)\n\n" + markdown_table(
            ["tool", "consumes", "produces", "reads", "writes", "refuses"],
            [(t.name, ", ".join(p.name for p in t.params), ", ".join(t.returns), ", ".join(t.reads),
              ", ".join(t.writes), "yes" if t.refuses else "") for t in graph.tools]).value
            + "\n\n" + markdown_table(["skill", "tools", "decision", "why"],
                                      [(d["skill_id"], ", ".join(d["tools"]), d["decision"], d["reason"]) for d in decisions]).value)
        context.log.info(f"{domain.id}: {len(graph.tools)} tools, {len(skills)} skills")
    for table, rows in (("domain_tools", tool_rows), ("domain_graph_edges", edge_rows), ("domain_skills", skill_rows)):
        warehouse.replace(table, table_frame(table, rows), {"round": key})
    return dg.MaterializeResult(metadata={
        "domains": len(sections),
        "rejected_domains": len(rejected),
        "domain_rejections": markdown_table(["domain directory", "reason"], [(d.root, d.reason) for d in rejected]),
        "tools": len(tool_rows),
        "edges": len(edge_rows),
        "skills": len(skill_rows),
        "model_review": markdown_table(["domain", "model's review"], reviews) if reviews else "not asked (no capable model configured)",
        "graphs": dg.MetadataValue.md("\n\n".join(sections)),
        "path": dg.MetadataValue.path(str(root)),
    })


def _model_review(warehouse: Warehouse, policy: PolicyModel, loop: LoopConfig, key: str):
    """review(graph, skills) -> overrides, asking the round's input policy."""
    session = policy.load(input_policy(warehouse, policy, key).path)
    params = SamplingParams(max_new_tokens=1024, temperature=loop.temperature, stop=(), seed=loop.seed)

    def review(graph, skills):
        prompt = session.chat_tokens(domain_graph.skill_review_messages(graph, skills), add_generation_prompt=True)
        return domain_graph.parse_skill_review(session.sample([prompt], 1, params)[0][0].text)

    return review

"""The domain-grounded route's first stage: each executable domain's
tripartite graph (tools, the fields they consume and produce, the tables they
read and write; by AST inspection of tools.py, never by running it) and its
skills (tools clustered by affinity, or as a stated override moved them),
each materialized as a CLI script, a document and a capability spec read back
from the script's code."""

import json
import shutil

import dagster as dg

from clawloop_assets import domain_graph, executable_domains
from clawloop_assets.assets.common import markdown_table
from clawloop_assets.partitions import round_partitions
from clawloop_assets.round_state import workdir
from resources.warehouse import Warehouse, table_frame

GROUP = "domain_route"


@dg.asset(partitions_def=round_partitions, group_name=GROUP)
def domain_skill_graphs(context: dg.AssetExecutionContext, warehouse: Warehouse) -> dg.MaterializeResult:
    """Tripartite graph and skills of every executable domain (built-in and
    `$CLAWLOOP_HOME/domains/`), in the warehouse and on disk."""
    key = context.partition_key
    root = workdir(key, "domains")
    tool_rows, edge_rows, skill_rows = [], [], []
    sections = []
    for domain in executable_domains.load_domains():
        source = domain.tools_source
        graph = domain_graph.extract_graph(domain.id, source, str(domain.path("tools.py")))
        skills, decisions = domain_graph.apply_overrides(
            domain_graph.cluster_skills(graph), domain_graph.load_overrides(domain.root), graph)
        skill_dir = root / domain.id / "skills"
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
        "tools": len(tool_rows),
        "edges": len(edge_rows),
        "skills": len(skill_rows),
        "graphs": dg.MetadataValue.md("\n\n".join(sections)),
        "path": dg.MetadataValue.path(str(root)),
    })

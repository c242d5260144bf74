"""Lineage: from a failure pattern back to the failure summaries, trajectories,
tasks, generators, capability and domain it came from, and from a task or a
trajectory down to the failures and patterns it fed.

Every step is a join or a filter on the id columns the warehouse rows carry
(schemas.py), never a search over their content. Task, rollout, summary and
pattern ids carry their round and are unique across rounds; generator,
capability and domain ids repeat in every round, so those rows are joined on
(round, id)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import polars as pl

from resources.schemas import ROLLOUT_PHASES
from resources.warehouse import Warehouse, polars_schema


class LineageError(LookupError):
    pass


# --- The chain ----------------------------------------------------------------


@dataclass(frozen=True)
class PatternNode:
    pattern_id: str
    round: str
    capability_id: str | None  # None: a warm-up skill whose failures span families (its tasks name theirs)
    root_cause: str
    count: int
    description: str
    skill: str | None = None  # what its tasks asked for; None in rows written before skills were recorded


@dataclass(frozen=True)
class SummaryNode:
    summary_id: str
    round: str
    rollout_id: str
    task_id: str
    root_cause: str
    failure_turn: int
    produced_by: str


@dataclass(frozen=True)
class TrajectoryNode:
    rollout_id: str
    round: str
    task_id: str
    phase: str
    sample_index: int
    status: str
    reward: float | None  # None unless scored
    checkpoint_id: str


@dataclass(frozen=True)
class TaskNode:
    task_id: str
    round: str
    generator_id: str
    capability_id: str
    domain_id: str
    difficulty: int
    build_status: str
    admitted: bool | None  # None: no admission decision (never built, or not validated yet)
    decision: str | None
    split: str | None  # None: not admitted, so in neither split
    bundle_path: str | None


@dataclass(frozen=True)
class GeneratorNode:
    generator_id: str
    round: str
    capability_id: str | None  # None from here on: a task names a generator the generators table lacks
    domain_id: str | None
    source: str | None
    status: str | None
    path: str | None


@dataclass(frozen=True)
class CapabilityNode:
    capability_id: str
    round: str
    track: str | None  # None from here on: not in the round's capabilities table
    route: str | None
    description: str | None


@dataclass(frozen=True)
class DomainNode:
    domain_id: str
    round: str
    entity: str | None  # None: not in the round's domains table


# Upstream to downstream of a failure: a pattern comes from failure summaries,
# each of one trajectory, of one task, built by one generator, of one
# capability in one domain.
LEVELS = ("patterns", "summaries", "trajectories", "tasks", "generators", "capabilities", "domains")
# The kinds of id `lineage` resolves, in the order it looks them up: the
# level each starts from, and the table and column that hold it.
KINDS = {
    "pattern": ("patterns", "diagnosis_patterns", "pattern_id"),
    "failure summary": ("summaries", "failure_summaries", "summary_id"),
    "trajectory": ("trajectories", "rollouts", "rollout_id"),
    "task": ("tasks", "tasks", "task_id"),
    "generator": ("generators", "generators", "generator_id"),
}
LABELS = {"patterns": "patterns", "summaries": "failure summaries", "trajectories": "trajectories", "tasks": "tasks",
          "generators": "generators", "capabilities": "capabilities", "domains": "domains"}


@dataclass(frozen=True)
class Lineage:
    """One id's chain, pattern -> summaries -> trajectories -> tasks ->
    generators -> capabilities -> domains: the levels above the id's own are
    what it fed (for a task: its rollouts, their summaries, the patterns they
    fell into), the levels below are where it came from."""

    item_id: str
    kind: str  # a key of KINDS
    round: str
    patterns: tuple[PatternNode, ...] = ()
    summaries: tuple[SummaryNode, ...] = ()
    trajectories: tuple[TrajectoryNode, ...] = ()
    tasks: tuple[TaskNode, ...] = ()
    generators: tuple[GeneratorNode, ...] = ()
    capabilities: tuple[CapabilityNode, ...] = ()
    domains: tuple[DomainNode, ...] = ()

    @property
    def level(self) -> str:
        """The level the id itself is on."""
        return KINDS[self.kind][0]

    def ids(self, level: str) -> list[str]:
        """The ids on one level, in chain order (for a generator, capability or domain: the bare id)."""
        return [_node_id(node) for node in getattr(self, level)]


def _node_id(node) -> str:
    return getattr(node, next(iter(node.__dataclass_fields__)))


# --- Reading the warehouse ------------------------------------------------------


def _sql_type(dtype) -> str:
    if isinstance(dtype, pl.List):
        return _sql_type(dtype.inner) + "[]"
    for base, name in ((pl.String, "VARCHAR"), (pl.Int64, "BIGINT"), (pl.Float64, "DOUBLE"), (pl.Boolean, "BOOLEAN")):
        if dtype == base:
            return name
    raise TypeError(f"no SQL type for {dtype}")


class _Tables:
    """Each table as a SQL relation with all of its schema's columns: the
    table itself, or, where it is not written yet (a round in progress) or was
    written before a column existed, a relation that fills the gaps with NULLs."""

    def __init__(self, warehouse: Warehouse):
        self.warehouse = warehouse
        self.columns: dict[str, set[str]] = {}
        for table, column in warehouse.query("SELECT table_name, column_name FROM information_schema.columns").iter_rows():
            self.columns.setdefault(table, set()).add(column)

    def __call__(self, table: str) -> str:
        schema = polars_schema(table)
        have = self.columns.get(table, set())
        if set(schema) <= have:
            return table
        columns = ", ".join(f'"{c}"' if c in have else f'NULL::{_sql_type(t)} AS "{c}"' for c, t in schema.items())
        return f"(SELECT {columns} FROM {table})" if have else f"(SELECT {columns} WHERE false)"

    def rows(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        return list(self.warehouse.query(sql, params).iter_rows(named=True))


IN_IDS = "IN (SELECT unnest(?::VARCHAR[]))"
# (round, id) pairs as a relation to join on: two lists zipped by unnest.
KEYS = "(SELECT unnest(?::VARCHAR[]) AS round, unnest(?::VARCHAR[]) AS id) k"


def _keys(pairs: Iterable[tuple[str, str | None]]) -> list[list[str]]:
    pairs = sorted({(r, i) for r, i in pairs if i is not None})
    return [[r for r, _ in pairs], [i for _, i in pairs]]


def _patterns(t: _Tables, where: str, params: list[Any]) -> tuple[PatternNode, ...]:
    rows = t.rows(f"SELECT pattern_id, round, capability_id, root_cause, count, description, skill "
                  f"FROM {t('diagnosis_patterns')} p WHERE {where} ORDER BY count DESC, pattern_id", params)
    return tuple(PatternNode(**r) for r in rows)


def _summaries(t: _Tables, where: str, params: list[Any]) -> tuple[SummaryNode, ...]:
    rows = t.rows(f"SELECT summary_id, round, rollout_id, task_id, root_cause, failure_turn, produced_by "
                  f"FROM {t('failure_summaries')} s WHERE {where} ORDER BY summary_id", params)
    return tuple(SummaryNode(**r) for r in rows)


def _trajectories(t: _Tables, where: str, params: list[Any]) -> tuple[TrajectoryNode, ...]:
    rows = t.rows(f"SELECT rollout_id, round, task_id, phase, sample_index, status, reward, checkpoint_id "
                  f"FROM {t('rollouts')} r WHERE {where}", params)
    phase = {p: i for i, p in enumerate(ROLLOUT_PHASES)}
    return tuple(sorted((TrajectoryNode(**r) for r in rows),
                        key=lambda n: (n.task_id, phase.get(n.phase, len(phase)), n.sample_index)))


def _tasks(t: _Tables, where: str, params: list[Any]) -> tuple[TaskNode, ...]:
    rows = t.rows(
        f"SELECT t.task_id, t.round, t.generator_id, t.capability_id, t.domain_id, t.difficulty, t.build_status, "
        f"a.admitted, a.decision, s.split, t.bundle_path FROM {t('tasks')} t "
        f"LEFT JOIN {t('admissions')} a ON a.round = t.round AND a.task_id = t.task_id "
        f"LEFT JOIN {t('task_splits')} s ON s.round = t.round AND s.task_id = t.task_id "
        f"WHERE {where} ORDER BY t.task_id", params)
    return tuple(TaskNode(**r) for r in rows)


def _generators(t: _Tables, pairs: Iterable[tuple[str, str | None]]) -> tuple[GeneratorNode, ...]:
    rows = t.rows(f"SELECT k.id AS generator_id, k.round, g.capability_id, g.domain_id, g.source, g.status, g.path "
                  f"FROM {KEYS} LEFT JOIN {t('generators')} g ON g.round = k.round AND g.generator_id = k.id "
                  f"ORDER BY k.round, k.id", _keys(pairs))
    return tuple(GeneratorNode(**r) for r in rows)


def _capabilities(t: _Tables, pairs: Iterable[tuple[str, str | None]]) -> tuple[CapabilityNode, ...]:
    rows = t.rows(f"SELECT k.id AS capability_id, k.round, c.track, c.route, c.description "
                  f"FROM {KEYS} LEFT JOIN {t('capabilities')} c ON c.round = k.round AND c.capability_id = k.id "
                  f"ORDER BY k.round, k.id", _keys(pairs))
    return tuple(CapabilityNode(**r) for r in rows)


def _domains(t: _Tables, pairs: Iterable[tuple[str, str | None]]) -> tuple[DomainNode, ...]:
    rows = t.rows(f"SELECT k.id AS domain_id, k.round, d.entity "
                  f"FROM {KEYS} LEFT JOIN {t('domains')} d ON d.round = k.round AND d.domain_id = k.id "
                  f"ORDER BY k.round, k.id", _keys(pairs))
    return tuple(DomainNode(**r) for r in rows)


QUALIFIED = re.compile(r"^(round-\d{4})\.(.+)$")


def _resolve(t: _Tables, item_id: str) -> tuple[str, str, str]:
    """(kind, round, id as stored) of `item_id`, looked up by equality on each
    kind's id column. A generator id repeats in every round: it resolves
    qualified by its round ("round-0001.<generator id>") or, unqualified,
    where only one round has it."""
    lookups, params = [], []
    for kind, (_, table, column) in KINDS.items():
        if kind == "generator":
            qualified = QUALIFIED.match(item_id)
            lookups.append(f"SELECT '{kind}' AS kind, round, {column} AS id FROM {t(table)} "
                           f"WHERE {column} = ? OR (round = ? AND {column} = ?)")
            params += [item_id, *(qualified.groups() if qualified else (None, None))]
        else:
            lookups.append(f"SELECT '{kind}' AS kind, round, {column} AS id FROM {t(table)} WHERE {column} = ?")
            params.append(item_id)
    found = t.rows(" UNION ALL ".join(lookups), params)
    if not found:
        tried = [f"{kind} ({table}.{column})" for kind, (_, table, column) in KINDS.items()]
        raise LineageError(f"unknown id {item_id!r}: looked it up as a {', '.join(tried[:-1])} or {tried[-1]}, "
                           "and found none")
    order = list(KINDS)
    kind = min((r["kind"] for r in found), key=order.index)
    mine = sorted({(r["round"], r["id"]) for r in found if r["kind"] == kind})
    if len(mine) > 1:
        rounds = ", ".join(r for r, _ in mine)
        raise LineageError(f"{kind} id {item_id!r} is in rounds {rounds}: qualify it with its round, "
                           f"e.g. {mine[-1][0]}.{item_id}")
    return kind, mine[0][0], mine[0][1]


def lineage(warehouse: Warehouse, item_id: str) -> Lineage:
    """The chain through a pattern, failure summary, trajectory (rollout),
    task or generator id; LineageError for an id that is none of these."""
    t = _Tables(warehouse)
    kind, round_key, key = _resolve(t, item_id)
    start = LEVELS.index(KINDS[kind][0])
    found: dict[str, tuple] = {}
    # The id's own level.
    if kind == "pattern":
        found["patterns"] = _patterns(t, f"pattern_id {IN_IDS}", [[key]])
    elif kind == "failure summary":
        found["summaries"] = _summaries(t, f"summary_id {IN_IDS}", [[key]])
    elif kind == "trajectory":
        found["trajectories"] = _trajectories(t, f"rollout_id {IN_IDS}", [[key]])
    elif kind == "task":
        found["tasks"] = _tasks(t, f"t.task_id {IN_IDS}", [[key]])
    else:
        found["generators"] = _generators(t, [(round_key, key)])

    # Down: what the id fed.
    for level in reversed(LEVELS[:start]):
        if level == "tasks":  # from generators
            gens = found["generators"]
            found[level] = _tasks(t, f"t.task_id IN (SELECT x.task_id FROM {t('tasks')} x JOIN {KEYS} "
                                     f"ON k.round = x.round AND k.id = x.generator_id)",
                                  _keys((g.round, g.generator_id) for g in gens))
        elif level == "trajectories":
            found[level] = _trajectories(t, f"task_id {IN_IDS}", [[n.task_id for n in found["tasks"]]])
        elif level == "summaries":
            found[level] = _summaries(t, f"rollout_id {IN_IDS}", [[n.rollout_id for n in found["trajectories"]]])
        elif level == "patterns":
            found[level] = _patterns(t, f"pattern_id IN (SELECT m.pattern_id FROM (SELECT pattern_id, unnest(summary_ids) "
                                        f"AS summary_id FROM {t('diagnosis_patterns')}) m WHERE m.summary_id {IN_IDS})",
                                     [[n.summary_id for n in found["summaries"]]])

    # Up: where it came from.
    for level in LEVELS[start + 1:]:
        if level == "summaries":
            found[level] = _summaries(t, f"summary_id IN (SELECT unnest(summary_ids) FROM {t('diagnosis_patterns')} "
                                         f"WHERE pattern_id {IN_IDS})", [[p.pattern_id for p in found["patterns"]]])
        elif level == "trajectories":
            found[level] = _trajectories(t, f"rollout_id {IN_IDS}", [[s.rollout_id for s in found["summaries"]]])
        elif level == "tasks":
            # A summary names its task too: the chain holds where a rollout row is gone.
            ids = {n.task_id for n in found["trajectories"]} | {s.task_id for s in found.get("summaries", ())}
            found[level] = _tasks(t, f"t.task_id {IN_IDS}", [sorted(ids)])
        elif level == "generators":
            found[level] = _generators(t, ((n.round, n.generator_id) for n in found["tasks"]))
        elif level == "capabilities":
            sources = [*found.get("patterns", ()), *found.get("tasks", ()), *found["generators"]]
            found[level] = _capabilities(t, ((n.round, n.capability_id) for n in sources))
        elif level == "domains":
            sources = [*found.get("tasks", ()), *found["generators"]]
            found[level] = _domains(t, ((n.round, n.domain_id) for n in sources))
    if found.get("summaries"):
        # Those with a failure summary first, so a capped list shows what the patterns rest on.
        failed = {s.rollout_id for s in found["summaries"]}
        found["trajectories"] = tuple(sorted(found["trajectories"], key=lambda n: n.rollout_id not in failed))
    return Lineage(item_id=item_id, kind=kind, round=round_key, **found)


# --- Rendering ----------------------------------------------------------------------


def _describe(node, code: Callable[[str], str]) -> str:
    if isinstance(node, PatternNode):
        return f"{code(node.pattern_id)}: count {node.count}, {node.root_cause}; {node.description}"
    if isinstance(node, SummaryNode):
        return f"{code(node.summary_id)}: {node.root_cause} at turn {node.failure_turn}, by {node.produced_by}"
    if isinstance(node, TrajectoryNode):
        outcome = f"reward {node.reward:g}" if node.status == "scored" and node.reward is not None else f"{node.status}, no reward"
        return f"{code(node.rollout_id)}: {node.phase}, {outcome}, checkpoint {code(node.checkpoint_id)}"
    if isinstance(node, TaskNode):
        if node.build_status != "built":
            admission = "build failed"
        elif node.admitted is None:
            admission = "no admission decision"
        else:
            admission = "admitted" if node.admitted else f"not admitted ({node.decision})"
        bundle = code(node.bundle_path) if node.bundle_path else "none"
        return f"{code(node.task_id)}: split {node.split or 'none'}, {admission}, L{node.difficulty}, bundle {bundle}"
    if isinstance(node, GeneratorNode):
        if node.source is None:
            return f"{code(node.generator_id)}: not in the {node.round} generators table"
        path = code(node.path) if node.path else "no program"
        return f"{code(node.generator_id)}: {node.source}, {node.status}, {path}"
    if isinstance(node, CapabilityNode):
        if node.track is None:
            return f"{code(node.capability_id)}: not in the {node.round} capabilities table"
        return f"{code(node.capability_id)}: {node.track} track, {node.route} route; {node.description}"
    if isinstance(node, DomainNode):
        if node.entity is None:
            return f"{code(node.domain_id)}: not in the {node.round} domains table"
        return f"{code(node.domain_id)}: entity {node.entity}"
    raise TypeError(node)


def render_text(lineage: Lineage, limit: int = 10) -> str:
    """The chain as an indented tree for a terminal, each level under the one
    it came from; `*` marks the id asked about; up to `limit` per level."""
    lines = [f"lineage of {lineage.kind} {lineage.item_id} ({lineage.round}); * marks it"]
    for depth, level in enumerate(LEVELS):
        nodes = getattr(lineage, level)
        indent = "  " * depth
        lines.append(f"{indent}{LABELS[level]} ({len(nodes)})")
        bullet = "*" if level == lineage.level else "-"
        lines += [f"{indent}  {bullet} {_describe(node, str)}" for node in nodes[:limit]]
        if len(nodes) > limit:
            lines.append(f"{indent}  (+{len(nodes) - limit} more)")
        if not nodes:
            lines.append(f"{indent}  (none)")
    return "\n".join(lines) + "\n"


def render_markdown(lineage: Lineage, limit: int = 10) -> str:
    """The chain as nested markdown lists; the id asked about in bold."""
    lines = [f"**Lineage of {lineage.kind} `{lineage.item_id}`** ({lineage.round})", ""]
    for depth, level in enumerate(LEVELS):
        nodes = getattr(lineage, level)
        indent = "  " * depth
        lines.append(f"{indent}- {LABELS[level]} ({len(nodes)})")
        for node in nodes[:limit]:
            text = _describe(node, lambda s: f"`{s}`")
            lines.append(f"{indent}  - **{text}**" if level == lineage.level else f"{indent}  - {text}")
        if len(nodes) > limit:
            lines.append(f"{indent}  - (+{len(nodes) - limit} more)")
        if not nodes:
            lines.append(f"{indent}  - (none)")
    return "\n".join(lines) + "\n"


def _capped(ids: list[str], limit: int, total: int | None = None) -> str:
    total = len(ids) if total is None else total
    shown = ", ".join(ids[:limit])
    return shown + (f" (+{total - min(limit, len(ids))} more)" if total > min(limit, len(ids)) else "")


# The assets of a round whose rows and metadata hold each level (tasks: built
# by candidate_tasks, admitted or not by admitted_tasks), so the lineage table
# can link to their pages in the UI; trajectories by the phase of the rollouts
# a pattern's failure summaries cover.
LEVEL_ASSETS = {"tasks": ("candidate_tasks", "admitted_tasks"), "generators": ("task_generators",),
                "capabilities": ("capability_catalog",), "domains": ("domain_catalog",)}
PHASE_ASSETS = {"validation": "validation_rollouts", "heldout_after": "diagnosis_rollouts"}


def asset_url(asset: str, round_key: str) -> str:
    """The Dagster UI's page of one round (partition) of an asset: its
    materialization's metadata. A path from the UI's root, so the link works
    wherever the webserver is served from the root (`make ui`)."""
    return f"/assets/{asset}?view=partitions&partition={round_key}"


def _links(assets: Iterable[str], round_key: str) -> str:
    return " ".join(f"[{a}]({asset_url(a, round_key)})" for a in assets)


def pattern_lineage_table(warehouse: Warehouse, round_key: str, limit: int = 5) -> str:
    """One markdown row per pattern of the round: its summaries, example
    trajectories, tasks, the skill it groups, and the generators,
    capabilities and domains of those tasks (joined on the tasks' (round,
    task_id): a warm-up skill's pattern spans families); after each level's ids, links
    to the pages of the round's assets that hold them, and the command that
    prints the pattern's whole chain."""
    t = _Tables(warehouse)
    rows = t.rows(
        f"WITH members AS (SELECT round, pattern_id, unnest(task_ids) AS task_id FROM {t('diagnosis_patterns')} "
        f"WHERE round = ?), "
        f"phases AS (SELECT p.pattern_id, list(DISTINCT s.phase ORDER BY s.phase) AS phases "
        f"FROM (SELECT round, pattern_id, unnest(summary_ids) AS summary_id FROM {t('diagnosis_patterns')} "
        f"WHERE round = ?) p JOIN {t('failure_summaries')} s ON s.round = p.round AND s.summary_id = p.summary_id "
        f"GROUP BY p.pattern_id) "
        f"SELECT p.pattern_id, any_value(p.count) AS count, any_value(len(p.summary_ids)) AS summaries, "
        f"any_value(p.example_rollout_ids) AS examples, any_value(p.task_ids) AS task_ids, "
        f"any_value(coalesce(p.skill, p.capability_id)) AS skill, any_value(ph.phases) AS phases, "
        f"list(DISTINCT x.generator_id ORDER BY x.generator_id) FILTER (WHERE x.generator_id IS NOT NULL) AS generators, "
        f"list(DISTINCT x.capability_id ORDER BY x.capability_id) FILTER (WHERE x.capability_id IS NOT NULL) "
        f"AS capabilities, "
        f"list(DISTINCT x.domain_id ORDER BY x.domain_id) FILTER (WHERE x.domain_id IS NOT NULL) AS domains "
        f"FROM {t('diagnosis_patterns')} p "
        f"LEFT JOIN members m ON m.round = p.round AND m.pattern_id = p.pattern_id "
        f"LEFT JOIN {t('tasks')} x ON x.round = m.round AND x.task_id = m.task_id "
        f"LEFT JOIN phases ph ON ph.pattern_id = p.pattern_id "
        f"WHERE p.round = ? GROUP BY p.pattern_id ORDER BY count DESC, p.pattern_id",
        [round_key, round_key, round_key])
    if not rows:
        return f"No failure patterns in {round_key}.\n"
    lines = ["| pattern | count | summaries | trajectories | tasks | generators | skill | capabilities | domains "
             "| whole chain |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rollout_assets = sorted({PHASE_ASSETS[p] for p in r["phases"] or [] if p in PHASE_ASSETS})
        cells = [r["pattern_id"], r["count"], r["summaries"],
                 _with_links(_capped(r["examples"] or [], limit, r["summaries"]), rollout_assets, round_key),
                 _with_links(_capped(r["task_ids"] or [], limit), LEVEL_ASSETS["tasks"], round_key),
                 _with_links(_capped(r["generators"] or [], limit), LEVEL_ASSETS["generators"], round_key),
                 r["skill"],
                 _with_links(", ".join(r["capabilities"] or []), LEVEL_ASSETS["capabilities"], round_key),
                 _with_links(", ".join(r["domains"] or []), LEVEL_ASSETS["domains"], round_key),
                 f"`clawloop lineage {r['pattern_id']}`"]
        lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _with_links(ids: str, assets: Iterable[str], round_key: str) -> str:
    """A cell's ids, then the links to the assets holding them ("in" them)."""
    links = _links(assets, round_key)
    return f"{ids} in {links}" if ids and links else ids or links

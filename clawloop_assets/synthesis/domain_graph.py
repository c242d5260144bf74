"""The tripartite graph of an executable domain, its skills, and their scripts.

A domain's tools.py is untrusted: it is only parsed (`ast`), never imported or
run here. From it we extract, per tool, the atomic fields it consumes
(parameters) and produces (keys of the dict literals it returns) and the
tables it reads and writes (from its SQL string literals). Tools are clustered
into skills by weighted affinity; the clustering is a prior a model or the
user may override with a stated reason, which is recorded. Each skill becomes
a CLI script exposing exactly its tools, a skill doc, and a capability spec
extracted from the generated script's own AST (not from the doc).

See executable_domains.py for the domain directory format and the
conventions of tools.py.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PARAM_TYPES = ("str", "int", "float", "bool")  # what tool_cli can parse from the command line
OVERRIDES_FILE = "skills_override.json"

# Why these weights: a field one tool produces and another consumes is a data
# dependency, so the two are used in sequence in one workflow: the strongest
# evidence. A shared field (both take or return `order_id`) means they work on
# the same entity. A shared table is the weakest: unrelated tools often touch
# a common table (stock, an audit log), so it counts half of a shared field.
AFFINITY_WEIGHTS = {"shared_field": 1.0, "shared_table": 0.5, "producer_consumer": 2.0}

# Skill scripts sit next to tools.py in the workspace, where a file named like
# a stdlib module would shadow it for every script there.
_RESERVED_SKILL_IDS = frozenset(sys.stdlib_module_names) | {"tools", "tool_cli", "seed", "domain"}
_IDENTIFIER = re.compile(r"^[a-z][a-z0-9_]*$")

# Only strings that start like SQL (a statement or a clause, for SQL built in
# pieces) are scanned, so that prose such as "not enough stock from ..." never
# yields a table. Docstrings and refusal messages are skipped for the same reason.
_SQL_START = re.compile(r"^\s*\(?\s*(SELECT|INSERT|UPDATE|DELETE|REPLACE|WITH|FROM|JOIN|LEFT|INNER|CROSS|WHERE)\b", re.I)
_NAME = r"[\"`\[]?([A-Za-z_]\w*)\b[\"`\]]?"  # a table name, possibly quoted
_WRITES = [re.compile(p + _NAME, re.I) for p in (
    r"\bINSERT\s+(?:OR\s+\w+\s+)?INTO\s+", r"\bREPLACE\s+INTO\s+",
    r"\bUPDATE\s+(?:OR\s+\w+\s+)?(?!SET\b)",  # not the `DO UPDATE SET` of an upsert
    r"\bDELETE\s+FROM\s+")]
_DELETE_FROM = re.compile(r"\bDELETE\s+FROM\b", re.I)
# FROM/JOIN <table> (not a table-valued function such as json_each(...)); the
# lookahead sees a `FROM a x, b y` list without consuming a following JOIN.
_TABLE_ITEM = r"[\"`\[]?[A-Za-z_]\w*\b[\"`\]]?(?:\s+(?:AS\s+)?\w+)?"
_READS = re.compile(r"\b(?:FROM|JOIN)\s+" + _NAME + r"(?!\s*\()(?=((?:\s+(?:AS\s+)?\w+)?(?:\s*,\s*" + _TABLE_ITEM + r")*))",
                    re.I)
_LISTED = re.compile(r",\s*" + _NAME, re.I)
_CTE = re.compile(r"(?:\bWITH\s+(?:RECURSIVE\s+)?|,\s*)" + _NAME + r"\s*(?:\([^)]*\))?\s+AS\s*\(", re.I)

# Tokens of tool names that are actions or glue, not the thing a skill is about.
_VERBS = frozenset("""get list show find search lookup look fetch read check count create add new make insert register
open close update set change edit modify adjust apply move transfer assign remove delete drop cancel clear reset
release reserve receive record post place hold ship send pay refund submit issue approve reject mark compute calculate
run start stop
by for of to from the a an all and or with in on at per""".split())


class DomainGraphError(ValueError):
    """A tools module, skill or override is malformed; the message says where."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # one of PARAM_TYPES
    required: bool


@dataclass(frozen=True)
class ToolNode:
    name: str
    description: str
    params: tuple[Param, ...]  # without the leading `db`
    returns: tuple[str, ...]  # keys of the dict literals it returns, sorted
    reads: tuple[str, ...]  # tables after FROM / JOIN, lowercased, sorted
    writes: tuple[str, ...]  # tables after INSERT INTO / UPDATE / DELETE FROM / REPLACE INTO
    refuses: bool  # raises ToolError (itself or in a helper it calls)

    @property
    def fields(self) -> frozenset[str]:
        return frozenset(p.name for p in self.params) | frozenset(self.returns)

    @property
    def tables(self) -> frozenset[str]:
        return frozenset(self.reads) | frozenset(self.writes)


@dataclass(frozen=True)
class DomainGraph:
    domain_id: str
    tools: tuple[ToolNode, ...]

    def tool(self, name: str) -> ToolNode:
        for node in self.tools:
            if node.name == name:
                return node
        raise DomainGraphError(f"domain {self.domain_id!r} has no tool {name!r}")

    def edges(self) -> list[tuple[str, str, str]]:
        """(kind, tool, node): consumes/produces a field, reads/writes a table."""
        out = []
        for t in self.tools:
            out += [("consumes", t.name, p.name) for p in t.params]
            out += [("produces", t.name, f) for f in t.returns]
            out += [("reads", t.name, table) for table in t.reads]
            out += [("writes", t.name, table) for table in t.writes]
        return out

    def producers(self, field: str) -> list[str]:
        return [t.name for t in self.tools if field in t.returns]

    def consumers(self, field: str) -> list[str]:
        return [t.name for t in self.tools if any(p.name == field for p in t.params)]


# --------------------------------------------------------------------------- extraction


def _text(node: ast.AST, constants: dict[str, str]) -> str | None:
    """The text of a string expression; non-literal parts become `{expr}`, so they never match a table name."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values if isinstance(v, (ast.Constant, ast.FormattedValue)))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "... %s ..." % args: the template
        return _text(node.left, constants)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left, constants), _text(node.right, constants)
        if left is None and right is None:
            return None
        return (left if left is not None else "{" + ast.unparse(node.left) + "}") + \
            (right if right is not None else "{" + ast.unparse(node.right) + "}")
    return None


def sql_tables(sql: str) -> tuple[set[str], set[str]]:
    """(read, written) table names of one SQL text, lowercased (SQLite names are case-insensitive)."""
    writes = {m.group(1).lower() for pattern in _WRITES for m in pattern.finditer(sql)}
    rest = _DELETE_FROM.sub("DELETE ", sql)  # the FROM of a DELETE names a written table, not a read one
    reads = set()
    for m in _READS.finditer(rest):
        reads.add(m.group(1).lower())
        reads.update(n.lower() for n in _LISTED.findall(m.group(2)))
    return reads - {m.lower() for m in _CTE.findall(sql)}, writes


def _is_refusal(node: ast.Raise) -> bool:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return (isinstance(exc, ast.Name) and exc.id == "ToolError") or \
        (isinstance(exc, ast.Attribute) and exc.attr == "ToolError")


def _own_returns(func: ast.FunctionDef) -> list[ast.expr]:
    """The values of the function's own return statements (not those of nested functions)."""
    out, stack = [], list(func.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.Return) and node.value is not None:
            out.append(node.value)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _dict_keys(value: ast.expr, func: ast.FunctionDef) -> set[str]:
    """String keys of the dict literals in a returned expression; a returned name
    is followed to the dict literals assigned to it and the keys set on it."""
    exprs, keys = [value], set()
    if isinstance(value, ast.Name):
        for node in ast.walk(func):
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == value.id for t in node.targets):
                exprs.append(node.value)
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store) and \
                    isinstance(node.value, ast.Name) and node.value.id == value.id:
                keys.add(node.slice)
    keys.update(k for e in exprs for d in ast.walk(e) if isinstance(d, ast.Dict) for k in d.keys)
    return {k.value for k in keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}


def _callee(call: ast.Call, functions: set[str], aliases: set[str]) -> str | tuple[str, str] | None:
    """A call's target when it can be followed: a module-level function, or `alias.tool` of an imported graph."""
    f = call.func
    if isinstance(f, ast.Name) and f.id in functions:
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in aliases:
        return (f.value.id, f.attr)
    return None


@dataclass
class _Facts:
    """What one function's own body shows, before following the functions it calls."""
    reads: set[str]
    writes: set[str]
    refusals: list[str]  # message templates of its `raise ToolError(...)`
    refuses: bool
    returns: set[str]
    calls: set  # callees (see _callee) it calls
    returned_calls: set  # callees whose result it returns


def _facts(func: ast.FunctionDef, constants: dict[str, str], functions: set[str], aliases: set[str]) -> _Facts:
    facts = _Facts(set(), set(), [], False, set(), set(), set())
    skip: set[int] = set()  # docstring and refusal messages are prose, not SQL
    if func.body and isinstance(func.body[0], ast.Expr) and isinstance(func.body[0].value, ast.Constant):
        skip.add(id(func.body[0].value))
    for node in ast.walk(func):
        if isinstance(node, ast.Raise) and node.exc is not None and _is_refusal(node):
            facts.refuses = True
            if isinstance(node.exc, ast.Call) and node.exc.args:
                facts.refusals.append(_text(node.exc.args[0], constants) or ast.unparse(node.exc.args[0]))
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(func):
        if id(node) not in skip and (sql := _text(node, constants)) is not None and _SQL_START.match(sql):
            reads, writes = sql_tables(sql)
            facts.reads |= reads
            facts.writes |= writes
        if isinstance(node, ast.Call) and (callee := _callee(node, functions - {func.name}, aliases)):
            facts.calls.add(callee)
    for value in _own_returns(func):
        facts.returns |= _dict_keys(value, func)
        if isinstance(value, ast.Call) and (callee := _callee(value, functions - {func.name}, aliases)):
            facts.returned_calls.add(callee)
    return facts


def _params(func: ast.FunctionDef, filename: str) -> tuple[Param, ...]:
    where = f"{filename}:{func.lineno}: tool {func.name!r}"
    a = func.args
    if a.vararg or a.kwarg:
        raise DomainGraphError(f"{where}: *args/**kwargs cannot be given on the command line")
    positional = a.posonlyargs + a.args
    if not positional or positional[0].arg != "db":
        raise DomainGraphError(f"{where}: the first parameter must be `db` (the sqlite3 connection)")
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    out = []
    for arg, default in list(zip(positional, defaults))[1:] + list(zip(a.kwonlyargs, a.kw_defaults)):
        node = arg.annotation
        type_name = node.id if isinstance(node, ast.Name) else \
            node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
        if type_name not in PARAM_TYPES:
            shown = ast.unparse(node) if node is not None else "no annotation"
            raise DomainGraphError(f"{filename}:{arg.lineno}: tool {func.name!r}: parameter {arg.arg!r} is annotated "
                                   f"with {shown}; annotate it with one of {', '.join(PARAM_TYPES)}")
        out.append(Param(arg.arg, type_name, default is None))
    return tuple(out)


def _module(source: str, filename: str, aliases: set[str]) -> tuple[dict[str, ast.FunctionDef], dict[str, _Facts]]:
    """The module-level functions of a source and the facts of each."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise DomainGraphError(f"{filename}:{exc.lineno}: syntax error: {exc.msg}") from None
    for node in tree.body:
        if isinstance(node, ast.AsyncFunctionDef) and _is_tool(node.name):
            raise DomainGraphError(f"{filename}:{node.lineno}: tool {node.name!r}: a tool cannot be async")
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    constants: dict[str, str] = {}  # module-level string constants, e.g. a shared SQL query
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None
        if isinstance(target, ast.Name) and (text := _text(node.value, constants)) is not None:
            constants[target.id] = text
    return functions, {name: _facts(f, constants, set(functions), aliases) for name, f in functions.items()}


def _imports(source: str, filename: str, imported: dict[str, DomainGraph]) -> dict[str, DomainGraph]:
    """alias -> graph for the top-level `import <module> [as alias]` of the modules in `imported`."""
    if not imported:
        return {}
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise DomainGraphError(f"{filename}:{exc.lineno}: syntax error: {exc.msg}") from None
    return {a.asname or a.name: imported[a.name] for node in tree.body if isinstance(node, ast.Import)
            for a in node.names if a.name in imported}


def _is_tool(name: str) -> bool:
    return not name.startswith("_") and name != "main"


def extract_graph(domain_id: str, source: str, filename: str = "tools.py",
                  imported: dict[str, DomainGraph] | None = None) -> DomainGraph:
    """The tool graph of a tools module, by AST inspection only (the source is never executed).

    Calls to module-level functions (`_found(db, ...)`) are followed one level
    deep: their tables and refusals count for the caller, and so do their
    returned fields when the caller returns their result. `imported` maps a
    module name to its already extracted graph: in a skill script that does
    `import tools as _tools`, a call `_tools.x(db, ...)` is resolved against
    tool `x` of that graph the same way. That is how a skill script's
    capability spec is read from the script's own code, not from its doc.
    """
    aliases = _imports(source, filename, imported or {})
    functions, facts = _module(source, filename, set(aliases))
    tools = []
    for name, func in functions.items():
        if not _is_tool(name):
            continue
        own = facts[name]
        reads, writes, refuses, returns = set(own.reads), set(own.writes), own.refuses, set(own.returns)
        for callee in own.calls:
            # a helper's own facts, or the imported tool's (raises naming the domain when it has no such tool)
            target = facts[callee] if isinstance(callee, str) else aliases[callee[0]].tool(callee[1])
            reads |= set(target.reads)
            writes |= set(target.writes)
            refuses = refuses or target.refuses
            if callee in own.returned_calls:
                returns |= set(target.returns)
        doc = ast.get_docstring(func) or ""
        tools.append(ToolNode(name, doc.splitlines()[0] if doc else "", _params(func, filename),
                              tuple(sorted(returns)), tuple(sorted(reads)), tuple(sorted(writes)), refuses))
    return DomainGraph(domain_id, tuple(tools))


def refusal_messages(source: str, filename: str = "tools.py") -> dict[str, list[str]]:
    """Per tool, the message templates of the refusals it can raise (itself or one helper deep), for the docs."""
    functions, facts = _module(source, filename, set())
    return {name: list(dict.fromkeys(facts[name].refusals + [m for c in sorted(facts[name].calls)
                                                              for m in facts[c].refusals]))
            for name in functions if _is_tool(name)}


# --------------------------------------------------------------------------- skills


def _shared(a: ToolNode, b: ToolNode) -> tuple[list[str], list[str], list[str]]:
    """(fields that flow from one to the other, other shared fields, shared tables)."""
    params_a, params_b = {p.name for p in a.params}, {p.name for p in b.params}
    flows = sorted((set(a.returns) & params_b) | (set(b.returns) & params_a))
    return flows, sorted((a.fields & b.fields) - set(flows)), sorted(a.tables & b.tables)


def _weight(shared: tuple[list[str], list[str], list[str]]) -> float:
    flows, fields, tables = shared
    w = AFFINITY_WEIGHTS
    return w["producer_consumer"] * len(flows) + w["shared_field"] * len(fields) + w["shared_table"] * len(tables)


def affinity(graph: DomainGraph) -> dict[tuple[str, str], float]:
    """Positive affinities, under both (a, b) and (b, a). A flowing field counts
    once, as producer_consumer, not also as a shared field."""
    out = {}
    for i, a in enumerate(graph.tools):
        for b in graph.tools[i + 1:]:
            if (weight := _weight(_shared(a, b))) > 0:
                out[(a.name, b.name)] = out[(b.name, a.name)] = weight
    return out


@dataclass(frozen=True)
class Skill:
    skill_id: str
    tools: tuple[str, ...]
    reason: str  # the strongest affinities among its tools, or an override's stated reason


def _describe(graph: DomainGraph, a: str, b: str, weight: float) -> str:
    flows, fields, tables = _shared(graph.tool(a), graph.tool(b))
    parts = [f"{label} {', '.join(names)}" for label, names in
             (("flow", flows), ("share", fields), ("both touch", tables)) if names]
    return f"{a} + {b} ({weight:g}: {'; '.join(parts)})"


def _reason(graph: DomainGraph, tools: tuple[str, ...], aff: dict[tuple[str, str], float]) -> str:
    if len(tools) == 1:
        others = sorted(((w, b) for (a, b), w in aff.items() if a == tools[0]), key=lambda x: (-x[0], x[1]))
        return f"{tools[0]} stands alone: " + (f"its strongest affinity is {others[0][0]:g} with {others[0][1]}"
                                               if others else "it shares no field or table with another tool")
    pairs = sorted(((aff.get((a, b), 0.0), a, b) for i, a in enumerate(tools) for b in tools[i + 1:]),
                   key=lambda x: (-x[0], x[1], x[2]))
    average = sum(p[0] for p in pairs) / len(pairs)
    strongest = ", ".join(_describe(graph, a, b, w) for w, a, b in pairs[:3] if w > 0)
    return f"average affinity {average:.2f}; strongest: {strongest}"


def _token(word: str) -> str:
    """A crude singular, so that list_orders and create_order agree on `order`."""
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")) else word


def _tokens(name: str) -> set[str]:
    return {_token(w.lower()) for w in name.split("_") if w} - _VERBS


def _name_candidates(graph: DomainGraph, tools: tuple[str, ...]) -> list[tuple[tuple[int, int], str]]:
    """Nouns of the tool names, best first: by how many tool names hold them,
    then by how many of the tools touch a table named by them (check_stock and
    restock are about `stock`), then alphabetically."""
    in_names = Counter(t for name in tools for t in _tokens(name))
    in_tables = Counter(t for name in tools for t in {x for table in graph.tool(name).tables for x in _tokens(table)})
    scored = [((in_names[t], in_tables[t]), t) for t in in_names if _IDENTIFIER.match(t)]
    return sorted(scored, key=lambda x: (-x[0][0], -x[0][1], x[1]))


def _skill_ids(graph: DomainGraph, clusters: list[tuple[str, ...]]) -> list[str]:
    """One id per cluster: its best noun not taken by a cluster with a stronger
    claim to it, else the best noun with a numeric suffix (or the first tool's
    name when no tool name has a noun)."""
    candidates = [_name_candidates(graph, c) or [((0, 0), c[0].lower())] for c in clusters]
    ids: dict[int, str] = {}
    for i in sorted(range(len(clusters)), key=lambda i: (-candidates[i][0][0][0], -candidates[i][0][0][1], i)):
        free = [n for _, n in candidates[i] if n not in ids.values() and n not in _RESERVED_SKILL_IDS]
        if free:
            ids[i] = free[0]
            continue
        base = candidates[i][0][1] + ("_skill" if candidates[i][0][1] in _RESERVED_SKILL_IDS else "")
        n = 2
        while f"{base}_{n}" in ids.values():
            n += 1
        ids[i] = f"{base}_{n}"
    return [ids[i] for i in range(len(clusters))]


def cluster_skills(graph: DomainGraph, threshold: float = 1.0, max_tools: int = 5) -> list[Skill]:
    """Agglomerative clustering with average linkage: merge the pair of clusters
    with the highest average affinity while it is >= threshold and the merged
    cluster has at most max_tools tools. The default threshold asks, on
    average, for one shared field per pair of tools (or one flow between two of
    them). Tools are taken in name order and ties go to the first pair, so the
    result does not depend on the order of the source."""
    if threshold <= 0 or max_tools < 1:
        raise DomainGraphError(f"cluster_skills: threshold must be > 0 and max_tools >= 1, got {threshold}, {max_tools}")
    aff = affinity(graph)
    clusters = [[name] for name in sorted(t.name for t in graph.tools)]
    while True:
        best = None
        for i, ci in enumerate(clusters):
            for j in range(i + 1, len(clusters)):
                cj = clusters[j]
                if len(ci) + len(cj) > max_tools:
                    continue
                average = sum(aff.get((a, b), 0.0) for a in ci for b in cj) / (len(ci) * len(cj))
                if best is None or average > best[0]:
                    best = (average, i, j)
        if best is None or best[0] < threshold:
            break
        _, i, j = best
        clusters[i] = sorted(clusters[i] + clusters.pop(j))
    ids = _skill_ids(graph, [tuple(c) for c in clusters])
    return [Skill(sid, tuple(c), _reason(graph, tuple(c), aff)) for sid, c in zip(ids, clusters)]


def load_overrides(domain_root: Path) -> list:
    """The domain's skills_override.json (a list of {"skill_id", "tools", "reason"}), or [] if it has none."""
    path = Path(domain_root) / OVERRIDES_FILE
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DomainGraphError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, list):
        raise DomainGraphError(f"{path}: must be a JSON list of overrides")
    return data


def apply_overrides(skills: list[Skill], overrides: list, graph: DomainGraph) -> tuple[list[Skill], list[dict]]:
    """Move tools into the skill each override names (a new one if no skill has
    that id), in order. Returns the skills and one decision per skill:
    "accepted_prior" with the clustering's reason, or "overridden" with the
    stated reasons (a skill that lost tools records where they went and why)."""
    order = {t.name: i for i, t in enumerate(sorted(graph.tools, key=lambda t: t.name))}
    members = {s.skill_id: list(s.tools) for s in skills}
    reasons: dict[str, list[str]] = {}
    for n, override in enumerate(overrides):
        where = f"domain {graph.domain_id!r}: override {n}"
        if not isinstance(override, dict):
            raise DomainGraphError(f"{where}: must be an object with skill_id, tools and reason")
        skill_id, tools, reason = override.get("skill_id"), override.get("tools"), override.get("reason")
        if not isinstance(skill_id, str) or not _IDENTIFIER.match(skill_id) or skill_id in _RESERVED_SKILL_IDS:
            raise DomainGraphError(f"{where}: skill_id must be a lowercase identifier that is not a module name, "
                                   f"got {skill_id!r}")
        if not isinstance(reason, str) or not reason.strip():
            raise DomainGraphError(f"{where} ({skill_id}): give a non-empty reason for the override")
        if not isinstance(tools, list) or not tools or not all(isinstance(t, str) for t in tools):
            raise DomainGraphError(f"{where} ({skill_id}): tools must be a non-empty list of tool names")
        unknown = [t for t in tools if t not in order]
        if unknown:
            raise DomainGraphError(f"{where} ({skill_id}): unknown tools {', '.join(unknown)}; "
                                   f"the domain has {', '.join(sorted(order))}")
        for sid, held in members.items():
            moved = [t for t in tools if t in held and sid != skill_id]
            if moved:
                held[:] = [t for t in held if t not in moved]
                reasons.setdefault(sid, []).append(f"{', '.join(moved)} moved to {skill_id}: {reason.strip()}")
        target = members.setdefault(skill_id, [])
        target += [t for t in tools if t not in target]
        reasons.setdefault(skill_id, []).append(reason.strip())
    prior = {s.skill_id: s for s in skills}
    out, decisions = [], []
    for sid, held in members.items():
        if not held:  # every tool moved away: the skill is gone
            continue
        tools_t = tuple(sorted(held, key=order.__getitem__))
        if sid in reasons:
            skill, decision = Skill(sid, tools_t, "; ".join(reasons[sid])), "overridden"
        else:
            skill, decision = prior[sid], "accepted_prior"
        out.append(skill)
        decisions.append({"domain_id": graph.domain_id, "skill_id": sid, "tools": list(tools_t),
                          "decision": decision, "reason": skill.reason})
    return out, decisions


def skill_review_messages(graph: DomainGraph, skills: list[Skill]) -> list[dict[str, str]]:
    """The prompt asking a capable model to review the clustering prior."""
    tools = "\n".join(f"- {t.name}({', '.join(p.name for p in t.params)}) -> {', '.join(t.returns) or '-'}; "
                      f"reads {', '.join(t.reads) or '-'}; writes {', '.join(t.writes) or '-'}" for t in graph.tools)
    prior = "\n".join(f"- {s.skill_id}: {', '.join(s.tools)} ({s.reason})" for s in skills)
    return [
        {"role": "system", "content": "You group the tools of a software domain into skills an agent learns "
                                      "together. Answer with a JSON list and nothing else."},
        {"role": "user", "content": f"Domain: {graph.domain_id}\nTools:\n{tools}\n\nProposed skills (a prior "
                                    f"from shared fields and tables):\n{prior}\n\nIf a tool belongs elsewhere, "
                                    'answer [{"skill_id": ..., "tools": [...], "reason": "why"}, ...] moving it; '
                                    "answer [] to accept the proposal."},
    ]


def parse_skill_review(text: str) -> list:
    """The overrides in a model's reply (a JSON list, possibly fenced), or
    DomainGraphError naming what is wrong; apply_overrides checks the rest."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        raise DomainGraphError("the skill review holds no JSON list")
    try:
        value = json.loads(text[start:end + 1])
    except json.JSONDecodeError as exc:
        raise DomainGraphError(f"the skill review is not valid JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise DomainGraphError("the skill review must be a JSON list")
    return value


# --------------------------------------------------------------------------- materialization


@dataclass(frozen=True)
class SkillArtifact:
    skill_id: str
    script_path: Path
    doc_path: Path
    capability_spec: dict[str, Any]


def _wrapper(tool: ToolNode) -> str:
    # Optional parameters default to None and are passed on only when given
    # (tool_cli never passes None), so the tool's own defaults apply; the
    # defaults of the untrusted source are never copied into generated code.
    signature = ", ".join(["db"] + [f"{p.name}: {p.type}" for p in tool.params if p.required]
                          + [f"{p.name}: {p.type} = None" for p in tool.params if not p.required])
    arguments = ["db"] + [f"{p.name}={p.name}" for p in tool.params if p.required]
    optional = [f"{p.name}={p.name}" for p in tool.params if not p.required]
    if optional:
        arguments.append(f"**_given({', '.join(optional)})")
    return (f"def {tool.name}({signature}):\n    {tool.description!r}\n"
            f"    return _tools.{tool.name}({', '.join(arguments)})\n")


def skill_script(graph: DomainGraph, skill: Skill) -> str:
    """A stdlib CLI exposing exactly the skill's tools through tool_cli; it runs next to tools.py and tool_cli.py."""
    body = "\n\n".join(_wrapper(graph.tool(t)) for t in skill.tools)
    return (f"#!/usr/bin/env python3\n"
            f"# Skill {skill.skill_id} of domain {graph.domain_id!r}: {', '.join(skill.tools)}.\n"
            f"#     python3 {skill.skill_id}.py <tool> --param value ...\n"
            f"#     python3 {skill.skill_id}.py --schema\n"
            "# Generated by clawloop_assets.synthesis.domain_graph. Each call is one transaction on\n"
            "# DOMAIN_DB (./domain.db); a refusal prints {\"error\": ...} and exits 1.\n\n"
            "import sys\n\n"
            "sys.dont_write_bytecode = True  # leave no __pycache__ in the workspace\n\n"
            "import tool_cli as _tool_cli  # noqa: E402\n"
            "import tools as _tools  # noqa: E402\n\n"
            f"SKILL_TOOLS = {tuple(skill.tools)!r}\n\n\n"
            "def _given(**arguments):\n    return {k: v for k, v in arguments.items() if v is not None}\n\n\n"
            f"{body}\n\nif __name__ == \"__main__\":\n    _tool_cli.main(globals())\n")


def capability_spec(skill_id: str, script_graph: DomainGraph) -> dict[str, Any]:
    tools = {t.name: {"description": t.description,
                      "params": {p.name: {"type": p.type, "required": p.required} for p in t.params},
                      "returns": list(t.returns), "reads": list(t.reads), "writes": list(t.writes),
                      "refuses": t.refuses} for t in script_graph.tools}
    return {"skill_id": skill_id, "tools": tools,
            "consumes": sorted({p for t in tools.values() for p in t["params"]}),
            **{key: sorted({x for t in tools.values() for x in t[of]})
               for key, of in (("produces", "returns"), ("reads", "reads"), ("writes", "writes"))}}


def skill_doc(graph: DomainGraph, skill: Skill, refusals: dict[str, list[str]]) -> str:
    lines = [f"# Skill `{skill.skill_id}` (domain `{graph.domain_id}`)", "", f"Why these tools: {skill.reason}.", "",
             f"Run `python3 {skill.skill_id}.py <tool> --param value ...` in the workspace "
             f"(`python3 {skill.skill_id}.py --schema` lists the tools). Each call is one transaction on the "
             "workspace database; it prints the result as JSON, or `{\"error\": ...}` and exits 1 when refused.", ""]
    for name in skill.tools:
        t = graph.tool(name)
        lines += [f"## `{name}`", "", t.description or "(no description)", "", "Parameters:"]
        lines += [f"- `--{p.name.replace('_', '-')}` ({p.type}, {'required' if p.required else 'optional'})"
                  for p in t.params] or ["- none"]
        lines += ["", "Produces: " + (", ".join(f"`{f}`" for f in t.returns) or "nothing"),
                  "Reads tables: " + (", ".join(t.reads) or "none"),
                  "Writes tables: " + (", ".join(t.writes) or "none"),
                  "Refusals: " + (("; ".join(f"\"{m}\"" for m in refusals.get(name, [])) or "may refuse")
                                  if t.refuses else "none"), ""]
    return "\n".join(lines)


def materialize_skill(graph: DomainGraph, skill: Skill, tools_source: str, out_dir: Path) -> SkillArtifact:
    """Write <skill_id>.py and <skill_id>.md under out_dir; the capability spec
    is extracted from the written script's AST (its `_tools.x` calls resolved
    against the domain graph), and must expose exactly the skill's tools."""
    if not _IDENTIFIER.match(skill.skill_id) or skill.skill_id in _RESERVED_SKILL_IDS:
        raise DomainGraphError(f"skill {skill.skill_id!r}: the id must be an identifier that is not a module name")
    for name in skill.tools:
        graph.tool(name)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    script_path, doc_path = out_dir / f"{skill.skill_id}.py", out_dir / f"{skill.skill_id}.md"
    script = skill_script(graph, skill)
    script_path.write_text(script, encoding="utf-8")
    script_path.chmod(0o755)
    script_graph = extract_graph(graph.domain_id, script, script_path.name, imported={"tools": graph})
    exposed = tuple(t.name for t in script_graph.tools)
    if sorted(exposed) != sorted(skill.tools):
        raise DomainGraphError(f"{script_path}: exposes {exposed}, but skill {skill.skill_id!r} has {skill.tools}")
    doc_path.write_text(skill_doc(graph, skill, refusal_messages(tools_source)), encoding="utf-8")
    return SkillArtifact(skill.skill_id, script_path, doc_path, capability_spec(skill.skill_id, script_graph))


# --------------------------------------------------------------------------- warehouse rows


def graph_rows(graph: DomainGraph) -> list[dict]:
    """Rows of domain_graph_edges."""
    return [{"domain_id": graph.domain_id, "kind": k, "tool": t, "node": n} for k, t, n in graph.edges()]


def skill_rows(skills: list[Skill], decisions: list[dict]) -> list[dict]:
    """Rows of domain_skills: each skill with its decision (from apply_overrides)."""
    by_id = {d["skill_id"]: d for d in decisions}
    missing = [s.skill_id for s in skills if s.skill_id not in by_id]
    if missing:
        raise DomainGraphError(f"skills without a decision: {', '.join(missing)}")
    return [{"domain_id": by_id[s.skill_id]["domain_id"], "skill_id": s.skill_id, "tools": list(s.tools),
             "decision": by_id[s.skill_id]["decision"], "reason": s.reason} for s in skills]

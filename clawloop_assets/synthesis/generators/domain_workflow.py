"""Generator family `domain_workflow` (terminal track): the domain-grounded route.

Run in the sandbox like every family (`python3 -I /generator/domain_workflow.py
--params P --seed N --out /out`), with the executable domain's files beside
it (schema.sql, seed.py, tools.py, tool_cli.py) and task_graphs.py. The
domain's code is untrusted, so seeding and every tool call happen here.

A task comes in two stages. An abstract task graph is sampled with the level's
structural features (task_graphs.py: knowledge states and actions over
abstract slots, no business content, no tool names); then it is grounded by
execution on the seeded database: each action gets a tool whose parameters
take the fields its consumed slots are bound to, each produced slot is bound
to a field of the real result, a `fail` action must really be refused, its
`recover` must really let the retry through, and a branch takes whichever
alternative's condition holds on the data. A graph that cannot be grounded is
resampled (a new attempt), up to ATTEMPTS.

The workspace is the seeded database with the tools (TOOLS.md describes them;
RULES.md states the branch conditions where there is a branch). The
instruction is written apart from the gold trajectory: the initial parameters
and the goal state (the rows the trajectory changed, by business key), never
a tool, a step or an intermediate value; task_graphs.check_barrier audits it.
The verifier reads the end state: every table of domain.db, rows located by
business key.
"""

import importlib.util
import os
import random
import re
import shlex
import shutil
import sqlite3
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True

import task_graphs  # noqa: E402
import tool_cli  # noqa: E402
from generator_common import assemble, family, numbered_levels  # noqa: E402

DB = "domain.db"
# Level -> structural features of the abstract graph, gold steps, background size.
GRAPH_LEVELS = [
    ((), 2, 1),
    (("long_range_dependency",), 4, 1),
    (("convergence",), 4, 1),
    (("error_recovery",), 4, 2),
    (("branching", "error_recovery"), 5, 2),
    (task_graphs.FEATURES, 6, 3),
]
ATTEMPTS = 400
SMALL_INTS = (1, 2, 3, 4, 5)
LARGE_INTS = (50, 500, 5000, 100000)  # to provoke a refusal (over stock, over capacity, over quota)


class Ungroundable(Exception):
    """This attempt's graph cannot be grounded on this data; resample."""


def _module(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Domain:
    """The domain's tools and a seeded database, with trial calls on copies."""

    def __init__(self, params, rng, size, scratch):
        self.meta = params["domain"]
        self.tools = {t["name"]: t for t in params["graph"]["tools"]}
        self.namespace = vars(_module("tools"))
        self.scratch = scratch
        self.base = os.path.join(scratch, "base.db")
        db = sqlite3.connect(self.base)
        with open(os.path.join(HERE, "schema.sql"), encoding="utf-8") as handle:
            db.executescript(handle.read())
        _module("seed").populate(db, rng, size)
        db.commit()
        db.execute("VACUUM")
        db.close()
        self.columns = {}  # column -> tables holding it
        db = sqlite3.connect(self.base)
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"):
            for row in db.execute('PRAGMA table_info("%s")' % table):
                self.columns.setdefault(row[1], []).append(table)
        db.close()

    def params_of(self, tool):
        return {p["name"]: p for p in self.tools[tool]["params"]}

    def pick(self, db_path, column, rng):
        """An existing value of `column` in the background data, or None."""
        db = sqlite3.connect(db_path)
        try:
            values = []
            for table in self.columns.get(column, ()):
                values += [r[0] for r in db.execute('SELECT DISTINCT "%s" FROM "%s" WHERE "%s" IS NOT NULL ORDER BY 1'
                                                    % (column, table, column))]
        finally:
            db.close()
        return rng.choice(sorted(set(values), key=str)) if values else None

    def trial(self, db_path, tool, args):
        """(result or None, refusal or None, the database after the call) on a copy."""
        copy = os.path.join(self.scratch, "trial-%d.db" % random.getrandbits(32))
        shutil.copyfile(db_path, copy)
        try:
            return tool_cli.call(self.namespace, copy, tool, dict(args)), None, copy
        except tool_cli.ToolError as exc:
            return None, str(exc), copy
        except Exception as exc:  # a crash is no grounding, never a refusal
            raise Ungroundable("%s crashed: %s" % (tool, exc))


def _scalar_fields(result):
    return {k: v for k, v in sorted(result.items()) if isinstance(v, (str, int, float)) and not isinstance(v, bool)}


class Grounding:
    """One attempt at grounding an abstract graph on the domain."""

    def __init__(self, domain, graph, rng):
        self.domain, self.graph, self.rng = domain, graph, rng
        self.db = os.path.join(domain.scratch, "live-%d.db" % rng.getrandbits(32))
        shutil.copyfile(domain.base, self.db)
        self.bound = {}  # slot -> (field, value)
        self.initial = {}  # parameter -> value: what the instruction gives
        self.steps = []  # (tool, args, result, refused)
        self.calls = {}  # action id -> (tool, args)
        self.rules = []  # branch conditions, for RULES.md
        self.consumable = {p for t in domain.tools for p in domain.params_of(t)}

    def run(self):
        for action in self.graph.gold_path():
            if action.kind == "branch":
                self.branch(action)
            elif action.kind == "fail":
                self.fail(action)
            elif action.kind == "recover":
                self.recover(action)
            elif action.retry_of:
                tool, args = self.calls[action.retry_of]
                self.commit(action, tool, args)
            else:
                self.act(action)
        return self

    # --- arguments ---------------------------------------------------------

    def arguments(self, tool, action, ints=SMALL_INTS):
        """Arguments for `tool` taking `action`'s consumed slots, or None."""
        params = self.domain.params_of(tool)
        args = {}
        for slot in action.consumes:
            if slot in self.bound:
                field, value = self.bound[slot]
                if field not in params or args.get(field, value) != value:
                    return None
                args[field] = value
        for slot in action.consumes:  # initial slots: a required parameter from the background data
            if slot in self.bound:
                continue
            free = [p for p, spec in sorted(params.items()) if spec["required"] and p not in args
                    and self.domain.columns.get(p)]
            if not free:
                return None
            name = self.rng.choice(free)
            value = self.initial.get(name) or self.domain.pick(self.db, name, self.rng)
            if value is None:
                return None
            args[name] = value
            self.bound[slot] = (name, value)
            self.initial[name] = value
        for name, spec in sorted(params.items()):
            if name in args or not spec["required"]:
                continue
            earlier = [r[name] for _, _, r, _ in reversed(self.steps) if r and name in r]
            if earlier:
                args[name] = earlier[0]
            elif name in self.initial:
                args[name] = self.initial[name]
            elif self.domain.columns.get(name):
                args[name] = self.domain.pick(self.db, name, self.rng)
            elif spec["type"] == "int":
                args[name] = self.rng.choice(ints)
            elif spec["type"] == "float":
                args[name] = float(self.rng.choice(ints))
            elif spec["type"] == "bool":
                args[name] = False
            else:
                return None
            if args[name] is None:
                return None
            if not earlier:
                self.initial.setdefault(name, args[name])
        return args

    def tools_for(self, action, exclude=()):
        consumed = [self.bound[s][0] for s in action.consumes if s in self.bound]
        tools = [t for t in sorted(self.domain.tools) if t not in exclude
                 and all(f in self.domain.params_of(t) for f in consumed)]
        self.rng.shuffle(tools)
        return tools

    # --- actions -----------------------------------------------------------

    def bind_products(self, action, result):
        fields = _scalar_fields(result)
        linkable = [f for f in fields if f in self.consumable]
        taken = {field for field, _ in self.bound.values()}
        order = [f for f in linkable if f not in taken] + [f for f in linkable if f in taken] + \
                [f for f in fields if f not in linkable]
        if len(order) < len(action.produces):
            raise Ungroundable("%s returns too few fields" % action.action_id)
        for slot, field in zip(action.produces, order):
            self.bound[slot] = (field, fields[field])

    def commit(self, action, tool, args):
        result, refusal, after = self.domain.trial(self.db, tool, args)
        if refusal is not None:
            raise Ungroundable("%s refused: %s" % (tool, refusal))
        shutil.move(after, self.db)
        self.steps.append((tool, args, result, False))
        self.calls[action.action_id] = (tool, args)
        self.bind_products(action, result)

    def act(self, action, exclude=()):
        saved = (dict(self.bound), dict(self.initial))
        for tool in self.tools_for(action, exclude):
            args = self.arguments(tool, action)
            if args is None:
                self.bound, self.initial = dict(saved[0]), dict(saved[1])
                continue
            result, refusal, after = self.domain.trial(self.db, tool, args)
            os.remove(after)
            if refusal is None:
                self.commit(action, tool, args)
                return tool
            self.bound, self.initial = dict(saved[0]), dict(saved[1])
        raise Ungroundable("no tool takes %s" % action.action_id)

    def fail(self, action):
        for tool in [t for t in self.tools_for(action) if self.domain.tools[t]["refuses"]]:
            for _ in range(4):
                saved = (dict(self.bound), dict(self.initial))
                args = self.arguments(tool, action, ints=LARGE_INTS)
                if args is None:
                    self.bound, self.initial = saved
                    break
                _, refusal, after = self.domain.trial(self.db, tool, args)
                os.remove(after)
                if refusal is not None:
                    self.steps.append((tool, args, None, True))
                    self.calls[action.action_id] = (tool, args)
                    # What the refusal makes known: the refused call's own
                    # arguments, first those a tool that could fix it takes.
                    reads = set(self.domain.tools[tool]["reads"])
                    fixers = [t for t in self.domain.tools if t != tool and reads & set(self.domain.tools[t]["writes"])]
                    useful = [n for n in sorted(args) if any(n in self.domain.params_of(t) for t in fixers)]
                    self.rng.shuffle(useful)
                    names = useful + [n for n in sorted(args) if n not in useful]
                    for slot, name in zip(action.produces, names):
                        self.bound[slot] = (name, args[name])
                    return
                self.bound, self.initial = saved
        raise Ungroundable("no refusal for %s" % action.action_id)

    def recover(self, action):
        failed = next(a for a in self.graph.actions if a.kind == "fail" and a.target in action.sources)
        tool, args = self.calls[failed.action_id]
        reads = set(self.domain.tools[tool]["reads"])
        for fixer in self.tools_for(action, exclude=(tool,)):
            if not reads & set(self.domain.tools[fixer]["writes"]):
                continue
            for ints in (SMALL_INTS, LARGE_INTS):
                saved = (dict(self.bound), dict(self.initial))
                fix_args = self.arguments(fixer, action, ints=ints)
                if fix_args is None:
                    self.bound, self.initial = saved
                    break
                fixed, refusal, after = self.domain.trial(self.db, fixer, fix_args)
                if refusal is None:
                    _, still, retried = self.domain.trial(after, tool, args)
                    os.remove(retried)
                    if still is None:  # the retry goes through now
                        shutil.move(after, self.db)
                        self.steps.append((fixer, fix_args, fixed, False))
                        self.calls[action.action_id] = (fixer, fix_args)
                        self.bind_products(action, fixed)
                        return
                os.remove(after)
                self.bound, self.initial = saved
        raise Ungroundable("nothing lets %s through" % tool)

    def branch(self, action):
        alternatives = [a for a in self.graph.actions if a.kind == "branch" and a.sources == action.sources]
        slot, op, right = alternatives[0].condition.split(" ", 2)
        if slot not in self.bound:
            # An initial parameter no call has used yet: bind it to a parameter
            # of a tool the branch could take, from the background data.
            for tool in self.tools_for(alternatives[0]):
                saved = (dict(self.bound), dict(self.initial))
                if self.arguments(tool, alternatives[0]) is not None and slot in self.bound:
                    break
                self.bound, self.initial = saved
        if slot not in self.bound or (right.startswith("f") and right not in self.bound):
            raise Ungroundable("the condition reads a slot no call has bound")
        field, value = self.bound[slot]
        if right == "threshold":
            if not isinstance(value, (int, float)):
                raise Ungroundable("threshold on a non-number")
            right_value = value if self.rng.random() < 0.5 else value + 1
        elif right.startswith("f"):
            right_value = self.bound[right][1]
        else:
            right_value = value if self.rng.random() < 0.5 else self.domain.pick(self.db, field, self.rng)
        holds = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
                 "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
        used = []
        taken = None
        for alternative in alternatives:
            _, alt_op, _ = alternative.condition.split(" ", 2)
            try:
                true = holds[alt_op](value, right_value)
            except TypeError:
                raise Ungroundable("incomparable condition") from None
            if true and taken is None:
                tool = self.act(alternative, exclude=used)
                taken = alternative
            else:
                options = [t for t in self.tools_for(alternative, exclude=used)]
                if not options:
                    raise Ungroundable("no tool for the other branch")
                tool = options[0]
            used.append(tool)
            self.rules.append((field, alt_op, right_value, self.domain.tools[tool]["description"]))
        if taken is None:
            raise Ungroundable("no branch condition holds")


# --- the bundle ------------------------------------------------------------------

def table_rows(path, keys):
    db = sqlite3.connect(path)
    try:
        out = {}
        for table, key in sorted(keys.items()):
            cursor = db.execute('SELECT * FROM "%s" ORDER BY "%s"' % (table, key))
            header = [d[0] for d in cursor.description]
            out[table] = (header, [dict(zip(header, row)) for row in cursor.fetchall()])
        return out
    finally:
        db.close()


def goal_lines(before, after, keys):
    """The rows the trajectory changed, by business key: (lines, values stated)."""
    lines, values = [], []
    for table, key in sorted(keys.items()):
        old = {r[key]: r for r in before[table][1]}
        new = {r[key]: r for r in after[table][1]}
        for k in sorted(set(old) | set(new), key=str):
            if k not in new:
                lines.append("- %s %s no longer exists" % (table, k))
                values.append(k)
            elif old.get(k) != new[k]:
                changed = [(c, v) for c, v in new[k].items() if c != key and (k not in old or old[k].get(c) != v)
                           and v is not None]
                lines.append("- %s %s%s: %s" % (table, k, "" if k in old else " (new)",
                                                ", ".join("%s = %s" % (c, v) for c, v in changed)))
                values += [k] + [v for _, v in changed]
    return lines, values


def tools_doc(namespace):
    lines = ["# Tools", "", "Run one with `python3 tools.py <tool> --param value` (underscores in a parameter "
             "name become dashes: --order-id). It prints its result as JSON; a refusal prints "
             "{\"error\": ...} and exits 1.", ""]
    for name, spec in sorted(tool_cli.schema(namespace).items()):
        params = ", ".join("%s (%s%s)" % (p, s["type"], "" if s["required"] else ", optional")
                           for p, s in spec["parameters"].items()) or "none"
        lines.append("- `%s`: %s Parameters: %s." % (name, spec["description"], params))
    return "\n".join(lines) + "\n"


def command(tool, args):
    return "python3 tools.py %s %s" % (tool, " ".join("--%s %s" % (k.replace("_", "-"), shlex.quote(str(v)))
                                                      for k, v in sorted(args.items())))


def graph_task(rng, seed, params, level):
    # The shared rng goes unused: the graph and its grounding draw from their own seeded sources.
    features, length, size = GRAPH_LEVELS[level]
    meta = params["domain"]
    keys = meta["business_keys"]
    rng = random.Random("%s|L%d|%d" % (meta["id"], level, seed))
    with tempfile.TemporaryDirectory() as scratch:
        domain = Domain(params, rng, size, scratch)
        reasons = {}
        for attempt in range(ATTEMPTS):
            arng = random.Random("%s|L%d|%d|%d" % (meta["id"], level, seed, attempt))
            graph = task_graphs.sample_task_graph(arng, features, length)
            try:
                grounding = Grounding(domain, graph, arng).run()
                before, after = table_rows(domain.base, keys), table_rows(grounding.db, keys)
                lines, goal_values = goal_lines(before, after, keys)
                if not lines:
                    raise Ungroundable("the trajectory changes nothing")
                instruction = instruction_text(meta, grounding, lines)
                gold = [task_graphs.GoldStep(t, a, r, refused) for t, a, r, refused in grounding.steps]
                task_graphs.check_barrier(instruction, gold, grounding.initial, dict(enumerate(goal_values)))
            except (Ungroundable, task_graphs.BarrierViolation) as exc:
                reason = str(exc).split(":")[0]
                reasons[reason] = reasons.get(reason, 0) + 1
                continue
            with open(domain.base, "rb") as handle:
                database = handle.read()
            return bundle(params, meta, domain, grounding, graph, instruction, database, after, keys,
                          goal_values, attempt, features)
    common = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
    raise ValueError("no grounding of a %s graph in %s after %d attempts (%s)"
                     % ("+".join(features) or "plain", meta["id"], ATTEMPTS, "; ".join("%s x%d" % kv for kv in common)))


def instruction_text(meta, grounding, lines):
    given = ", ".join("%s %s" % (k, v) for k, v in sorted(grounding.initial.items()))
    rules = " The house rules in RULES.md apply." if grounding.rules else ""
    return ("%s. The records are in %s, and its tools (tools.py, described in TOOLS.md) are the way to change "
            "them.%s\n\nYou are given: %s.\n\nBring %s to this state:\n%s\n\nNothing else in %s may change."
            % (meta["title"], DB, rules, given or "nothing more", DB, "\n".join(lines), DB))


def bundle(params, meta, domain, grounding, graph, instruction, database, after, keys, goal_values, attempt, features):
    environment = {
        DB: database,
        "tools.py": open(os.path.join(HERE, "tools.py"), encoding="utf-8").read(),
        "tool_cli.py": open(os.path.join(HERE, "tool_cli.py"), encoding="utf-8").read(),
        "TOOLS.md": tools_doc(domain.namespace),
    }
    if grounding.rules:
        environment["RULES.md"] = "# House rules\n\n" + "\n".join(
            "- When %s %s %s: %s" % (field, op, value, what) for field, op, value, what in grounding.rules) + "\n"
    checks = []
    for table, key in sorted(keys.items()):
        header, rows = after[table]
        checks.append({"type": "sqlite_records", "name": "rows of %s" % table, "path": DB, "table": table,
                       "key": [key], "columns": {c: {"kind": "text"} for c in header if c != key},
                       "expected": rows})
    stated = list(grounding.initial.values()) + list(goal_values)
    # Numbers inside stated ids ("ORD-0013" holds 13) are stated too.
    stated += [int(n) for v in stated if isinstance(v, str) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", v)]
    contract = {
        "deliverable": {"path": DB, "format": "sqlite", "schema": "the tables of %s as they are" % DB},
        "rules": ["Every table of %s is compared row by row, located by its business key." % DB,
                  "Change the records only through the tools; a refusal changes nothing."],
        # The instruction states these by design (the givens and the goal state).
        "parameters": {"p%d" % i: v for i, v in enumerate(stated) if isinstance(v, (int, float))},
        "labels": sorted({str(v) for v in stated if not isinstance(v, (int, float))}),
    }
    solution = "\n".join(command(t, a) + (" || true  # refused, as planned" if refused else "")
                         for t, a, _, refused in grounding.steps)
    task = assemble(params, instruction, environment, contract, checks, {DB: "end state"}, solution, "sqlite")
    task["meta"]["features"] = sorted(features)
    task["meta"]["task_graph"] = task_graphs.to_dict(graph)
    task["meta"]["gold_trajectory"] = [{"tool": t, "arguments": a, "refused": refused} for t, a, _, refused in grounding.steps]
    task["meta"]["grounding_attempts"] = attempt + 1
    return task


# Levels 0-5 are task graphs; below them level -1 is level 0's task with its
# commands shown and level -2 one shell command on a text file of the level-0
# workspace (generator_common).
LEVELS = numbered_levels(graph_task, range(len(GRAPH_LEVELS)))
build = family(__name__, LEVELS)

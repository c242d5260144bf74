#!/usr/bin/env python3
"""Generator family `multi_module_refactor` (terminal track).

build(seed, params) -> task: a small multi-module Python program about the
domain's records (a package plus main.py), a refactoring request, the answer
contract, and a `python_imports` check on the end state: every module
parses, every import of the program's own modules resolves, each function
sits where the refactoring puts it with its code unchanged (an AST digest),
and nothing is left behind. The program is read as data, never run. Stdlib-only,
with generator_common.py beside it.

Levels: 0 = one command (rename or delete a module nothing imports, fix one
import of a renamed module, move a module into a folder); 1 = rename a module
and update every import of it; 2 = move functions between modules under
stated rules (no re-export left behind, the moved code unchanged, its
dependencies imported where it lands); 3 = the moves come as tickets listed by
an index (plan.csv names the ticket files; each ticket names one move), the
package's `__init__.py` is the public API to keep, and a module the moves
empty is deleted; 4 = the same with a dirty plan (cancelled tickets, tickets
for names that do not exist, module paths written as paths or dotted names,
moves to where a function already is); 5 = a larger program, relative imports
in some modules, and a function moved twice (tickets applied in step order,
not file order).
"""

import ast
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import assemble, csv_text, family, level0_variant, python_oracle, shaped_levels  # noqa: E402

VERBS = ("load", "parse", "check", "total", "format", "merge", "rank", "summarize", "export", "clean", "count", "pick")
EXTRA_MODULES = ("common", "formats", "checks", "reports", "models", "storage", "rules", "tables")
STDLIB = set(getattr(sys, "stdlib_module_names", ())) | {"main"}


# ---- the program model: functions, where each lives, what each calls

def package_name(d):
    name = d["record_file"]
    return name if name not in STDLIB else name + "_app"


def module_names(d, count):
    stems = [s for s in d["file_stems"] if s not in STDLIB]
    names = stems + [w for w in EXTRA_MODULES if w not in stems]
    return names[:count]


def function_names(rng, d, count):
    nouns = [d["numeric_field"], d["group_field"], d["id_field"], d["record_file"], d["entity"].replace(" ", "_")]
    names = sorted({"%s_%s" % (v, n) for v in VERBS for n in nouns})
    return rng.sample(names, min(count, len(names)))


BODIES = {
    "load": ('rows = [dict(zip(header, line.split(","))) for line in lines]', 'rows'),
    "parse": ('rows = [r for r in rows if r.get("%(id)s", "").strip()]', 'rows'),
    "check": ('rows = [r for r in rows if float(r.get("%(num)s") or 0) >= 0]', 'rows'),
    "total": ('total = sum(float(r.get("%(num)s") or 0) for r in rows)', 'total'),
    "format": ('text = "\\n".join("%%s,%%s" %% (r["%(id)s"], r["%(num)s"]) for r in rows)', 'text'),
    "merge": ('rows = sorted(rows, key=lambda r: r["%(id)s"])', 'rows'),
    "rank": ('rows = sorted(rows, key=lambda r: -float(r.get("%(num)s") or 0))', 'rows'),
    "summarize": ('groups = {}\n    for r in rows:\n        groups.setdefault(r["%(group)s"], []).append(r)', 'groups'),
    "export": ('text = json.dumps(rows, sort_keys=True)', 'text'),
    "clean": ('rows = [{k.strip(): v.strip() for k, v in r.items()} for r in rows]', 'rows'),
    "count": ('count = len(rows)', 'count'),
    "pick": ('rows = [r for r in rows if r.get("%(group)s")]', 'rows'),
}


def function_source(name, deps, d):
    verb = name.split("_", 1)[0]
    statement, result = BODIES[verb]
    fields = {"id": d["id_field"], "num": d["numeric_field"], "group": d["group_field"]}
    params = "lines, header" if verb == "load" else "rows"
    lines = ["def %s(%s):" % (name, params), '    """%s the %s."""' % (verb.capitalize(), d["entity_plural"])]
    for dep in deps:
        lines.append("    %s(%s)" % (dep, params))
    lines.append("    " + statement % fields)
    lines.append("    return " + result)
    return "\n".join(lines) + "\n"


class Program:
    """Functions in declaration order, each with its module and callees; the
    package's public API (re-exported by __init__.py) and main.py's calls."""

    def __init__(self, pkg, d):
        self.pkg, self.d = pkg, d
        self.functions = []  # names, declaration order
        self.module_of = {}
        self.deps = {}
        self.public = []
        self.main_calls = []
        self.relative = set()  # modules whose imports of package modules are relative

    def add(self, name, module, deps):
        self.functions.append(name)
        self.module_of[name] = module
        self.deps[name] = list(deps)

    def modules(self):
        return sorted(set(self.module_of.values()))

    def callers(self, name):
        return [f for f in self.functions if name in self.deps[f]]

    def files(self):
        """{path: text} of the whole program as it stands."""
        files = {}
        for module in self.modules():
            files[module_path(self.pkg, module)] = self.module_text(module)
        init = ['"""The %s package: its public API."""' % self.pkg]
        for module, names in grouped(self.public, self.module_of):
            init.append("from .%s import %s" % (module, ", ".join(names)))
        files["%s/__init__.py" % self.pkg] = "\n".join(init) + "\n"
        main_lines = ['"""Command-line entry point for the %s."""' % self.d["entity_plural"], "import sys", ""]
        for module, names in grouped(self.main_calls, self.module_of):
            main_lines.append("from %s.%s import %s" % (self.pkg, module, ", ".join(names)))
        main_lines += ["", "", "def main(argv):", "    rows = []"]
        main_lines += ["    %s(rows)" % name if not name.startswith("load_") else "    %s([], [])" % name for name in self.main_calls]
        main_lines += ["    return 0", "", "", 'if __name__ == "__main__":', "    sys.exit(main(sys.argv))"]
        files["main.py"] = "\n".join(main_lines) + "\n"
        return files

    def module_text(self, module):
        own = [f for f in self.functions if self.module_of[f] == module]
        needed = sorted({dep for f in own for dep in self.deps[f] if self.module_of[dep] != module})
        lines = ['"""%s: %s of the %s."""' % (module, module.replace("_", " "), self.d["entity_plural"])]
        if any(f.startswith("export_") for f in own):
            lines.append("import json")
        for other, names in grouped(needed, self.module_of):
            target = ".%s" % other if module in self.relative else "%s.%s" % (self.pkg, other)
            lines.append("from %s import %s" % (target, ", ".join(names)))
        body = "\n\n".join(function_source(f, self.deps[f], self.d) for f in own)
        return "\n".join(lines) + "\n\n\n" + body


def grouped(names, module_of):
    by_module = {}
    for name in names:
        by_module.setdefault(module_of[name], []).append(name)
    return [(m, sorted(by_module[m])) for m in sorted(by_module)]


def module_path(pkg, module):
    return "%s/%s.py" % (pkg, module.replace(".", "/"))


def digest(text, name):
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return hashlib.sha256(ast.dump(node).encode()).hexdigest()


def random_program(rng, d, n_modules, n_functions, n_public, n_main):
    pkg = package_name(d)
    program = Program(pkg, d)
    modules = module_names(d, n_modules)
    names = function_names(rng, d, n_functions)[:n_functions]
    for index, name in enumerate(names):
        earlier = names[:index]
        deps = sorted(rng.sample(earlier, min(len(earlier), rng.choice([0, 1, 1, 2]))))
        program.add(name, modules[index % len(modules)] if index < len(modules) else rng.choice(modules), deps)
    program.public = sorted(rng.sample(names, n_public))
    program.main_calls = sorted(rng.sample(names, n_main))
    return program


def movable(program, name, moving):
    """A function may move when every caller in its own module moves too (so
    the old module never has to import it back)."""
    src = program.module_of[name]
    return all(c in moving for c in program.callers(name) if program.module_of[c] == src)


def end_state_check(before, after, removed_modules=(), moved=()):
    """The python_imports check of the program `after`, the one `before` turns into."""
    files = after.files()
    defines = {}
    for name in after.functions:
        defines.setdefault("%s.%s" % (after.pkg, after.module_of[name]), []).append(name)
    if after.public:
        defines[after.pkg] = sorted(after.public)
    digests = {"%s.%s:%s" % (after.pkg, after.module_of[f], f): digest(files[module_path(after.pkg, after.module_of[f])], f)
               for f in after.functions}
    absent_names = {}
    for name in moved:
        old = "%s.%s" % (before.pkg, before.module_of[name])
        still_called = any(after.module_of[c] == before.module_of[name] for c in after.callers(name))
        if before.module_of[name] != after.module_of[name] and before.module_of[name] in after.modules() and not still_called:
            absent_names.setdefault(old, []).append(name)
    return {
        "type": "python_imports", "name": "the program after the refactoring", "root": "", "names_resolve": True,
        "defines": {m: sorted(v) for m, v in sorted(defines.items())},
        "digests": digests,
        "absent_names": {m: sorted(v) for m, v in sorted(absent_names.items())},
        "absent": sorted("%s.%s" % (before.pkg, m) for m in removed_modules),
    }


def copy_program(program):
    clone = Program(program.pkg, program.d)
    for name in program.functions:
        clone.add(name, program.module_of[name], program.deps[name])
    clone.public, clone.main_calls, clone.relative = list(program.public), list(program.main_calls), set(program.relative)
    return clone


def contract_for(rules, parameters=None, labels=()):
    return {
        "deliverable": {"path": ".", "format": "python",
                        "schema": "the program's files in place: the package directory and main.py"},
        "rules": rules,
        "parameters": parameters or {},
        "labels": list(labels),
    }


# ---- the oracle's mover: plain AST-guided text edits, no rendering shortcut

def mover_solution(pkg, moves=(), plan=None):
    """The oracle (oracles/multi_module_refactor/mover.py): level 2 moves `moves`,
    (name, from module, to module) each; levels 3-5 apply the tickets of `plan`."""
    return python_oracle("multi_module_refactor", "mover", PACKAGE=pkg, MOVES=list(moves), PLAN=plan)


# ---- levels

def level0(rng, seed, params):
    d = params["domain"]
    program = random_program(rng, d, 3, 8, 0, 2)
    pkg = program.pkg
    spare = module_names(d, 8)[4:]
    variant = level0_variant(seed)
    # A module nothing imports: its one function is declared last, so nothing calls it.
    dead = module_names(d, 8)[3]
    program.add(next(n for n in function_names(rng, d, 60) if n not in program.functions), dead, [])
    before = copy_program(program)
    after = copy_program(program)
    if variant == 0:
        new = spare[0]
        for f in after.functions:
            if after.module_of[f] == dead:
                after.module_of[f] = new
        instruction = ("Nothing imports the module %s. Rename it to %s." % (module_path(pkg, dead), module_path(pkg, new)))
        solution = "mv %s %s" % (module_path(pkg, dead), module_path(pkg, new))
        removed = [dead]
    elif variant == 1:
        after.functions = [f for f in after.functions if after.module_of[f] != dead]
        instruction = "Nothing imports the module %s any more. Delete it." % module_path(pkg, dead)
        solution = "rm %s" % module_path(pkg, dead)
        removed = [dead]
    elif variant == 2:
        target = sorted({program.module_of[f] for f in program.main_calls})[0]
        new = spare[0]
        for f in after.functions:
            if after.module_of[f] == target:
                after.module_of[f] = new
        # The workspace is mid-rename: the module already has its new name, main.py not yet.
        before = copy_program(after)
        files = before.files()
        files["main.py"] = files["main.py"].replace("from %s.%s import" % (pkg, new), "from %s.%s import" % (pkg, target))
        instruction = ("The module %s was renamed to %s, but main.py still imports the old name. Fix the import in main.py."
                       % (module_path(pkg, target), module_path(pkg, new)))
        solution = "sed -i s/%s/%s/ main.py" % (target, new)
        check = end_state_check(after, after)
        contract = contract_for(["Only the import in main.py changes; every other file stays as it is."])
        return assemble(params, instruction, files, contract, [check], {}, solution, "python")
    else:
        for f in after.functions:
            if after.module_of[f] == dead:
                after.module_of[f] = "legacy." + dead
        instruction = "Nothing imports the module %s. Move it into the folder %s/legacy/." % (module_path(pkg, dead), pkg)
        solution = "mv %s %s/legacy/" % (module_path(pkg, dead), pkg)
        removed = [dead]
    files = before.files()
    files["%s/legacy/__init__.py" % pkg] = '"""Code kept for reference."""\n'
    check = end_state_check(before, after, removed)
    contract = contract_for(["Every other file stays as it is."])
    return assemble(params, instruction, files, contract, [check], {}, solution, "python")


def level1(rng, seed, params):
    d = params["domain"]
    program = random_program(rng, d, 4, 9, 0, 3)
    pkg = program.pkg
    importers = {}
    for f in program.functions:
        for dep in program.deps[f]:
            if program.module_of[dep] != program.module_of[f]:
                importers.setdefault(program.module_of[dep], set()).add(program.module_of[f])
    for f in program.main_calls:
        importers.setdefault(program.module_of[f], set()).add("main")
    old = max(sorted(importers), key=lambda m: len(importers[m]))
    new = module_names(d, 8)[4 + seed % 4]
    after = copy_program(program)
    for f in after.functions:
        if after.module_of[f] == old:
            after.module_of[f] = new
    instruction = (
        "Rename the module %s to %s, and update every import of it in the program (the %s package and main.py) "
        "so that every import still resolves. Follow CONTRACT.md." % (module_path(pkg, old), module_path(pkg, new), pkg))
    contract = contract_for([
        "The module keeps its code; only its name and the imports of it change.",
        "Every import of the program's own modules must resolve: the module exists and defines each imported name.",
    ])
    solution = (
        "mv %s %s\n"
        "grep -rl --include=*.py 'from %s.%s import' . | xargs sed -i 's/from %s\\.%s import/from %s.%s import/'\n"
        % (module_path(pkg, old), module_path(pkg, new), pkg, old, pkg, old, pkg, new))
    check = end_state_check(program, after, [old])
    return assemble(params, instruction, program.files(), contract, [check], {}, solution, "python")


MOVE_RULES = [
    "Every import of the program's own modules must resolve: the module exists and defines each imported name.",
    "A moved function's code stays exactly as it is (comments and blank lines aside); only its place changes.",
    "No re-export: after a move, the old module neither defines nor imports the moved function; every import "
    "of it names its new module.",
    "A moved function's new module imports what the function uses from elsewhere.",
]


def choose_moves(rng, program, count, destinations):
    """`count` (function, destination) pairs: functions whose callers in their
    own module move too, each to a module other than its own."""
    moves, moving = [], set()
    candidates = list(program.functions)
    rng.shuffle(candidates)
    # Functions that call others first: their new module must import what they use.
    candidates.sort(key=lambda name: not program.deps[name])
    for name in candidates:
        if len(moves) == count:
            break
        if not movable(program, name, moving | {name}):
            continue
        options = [m for m in destinations if m != program.module_of[name]]
        away = [m for m in options if all(program.module_of[dep] != m for dep in program.deps[name])]
        moves.append((name, rng.choice(away or options)))
        moving.add(name)
    return moves


def apply_moves(program, moves):
    after = copy_program(program)
    for name, dst in moves:
        after.module_of[name] = dst
    return after


def level2(rng, seed, params):
    d = params["domain"]
    program = random_program(rng, d, 4, 10, 0, 3)
    pkg = program.pkg
    new_module = module_names(d, 8)[4 + seed % 4]
    moves = choose_moves(rng, program, 2, program.modules() + [new_module])
    after = apply_moves(program, moves)
    listing = "\n".join("- `%s` from %s to %s" % (name, module_path(pkg, program.module_of[name]), module_path(pkg, dst))
                        for name, dst in moves)
    instruction = (
        "Refactor the program in this workspace (the %s package and main.py): move these functions, creating a "
        "module where it does not exist yet:\n\n%s\n\nFollow the rules in CONTRACT.md." % (pkg, listing))
    moving = [(n, "%s.%s" % (pkg, program.module_of[n]), "%s.%s" % (pkg, dst)) for n, dst in moves]
    check = end_state_check(program, after, moved=[n for n, _ in moves])
    return assemble(params, instruction, program.files(), contract_for(MOVE_RULES), [check], {},
                    mover_solution(pkg, moving), "python")


TICKET_RULES = [
    "plan.csv lists the tickets to apply; each ticket file names one function and the module it moves to.",
    "The package's __init__.py is its public API: it keeps exporting every name it exports now, from wherever "
    "the name ends up.",
    "A module left without any function after the moves is deleted.",
]


def emptying_moves(rng, program, destinations, extra):
    """Moves that empty one module (all its functions go elsewhere) plus
    `extra` more."""
    for victim in sorted(program.modules(), key=lambda m: rng.random()):
        own = [f for f in program.functions if program.module_of[f] == victim]
        outside_callers = [c for f in own for c in program.callers(f) if program.module_of[c] == victim and c not in own]
        if 1 <= len(own) <= 3 and not outside_callers:
            moves = [(f, rng.choice([m for m in destinations if m != victim])) for f in own]
            others = Program(program.pkg, program.d)
            for f in program.functions:
                others.add(f, program.module_of[f], program.deps[f])
            more = choose_moves(rng, others, extra + len(own), [m for m in destinations if m != victim])
            moves += [(n, m) for n, m in more if n not in own][:extra]
            return victim, moves
    raise RuntimeError("no module can be emptied")


def ticket_files(rng, pkg, tickets, style):
    """plan.csv and one ticket file per move; `style(module)` writes a module
    reference the way that ticket's author did."""
    plan_rows, files = [], {}
    for number, ticket in enumerate(tickets, start=1):
        ticket_id = "RF-%03d" % (number * 7 + rng.randint(0, 6))
        name = "refactor/tickets/%s.txt" % ticket_id.lower()
        plan_rows.append((ticket_id, name, ticket.get("step", number)))
        lines = ["ticket: %s" % ticket_id, "function: %s" % ticket["name"], "to: %s" % style(ticket["dst"])]
        if ticket.get("status"):
            lines.append("status: %s" % ticket["status"])
        files[name] = "\n".join(lines) + "\n"
    return plan_rows, files


def ticket_level(rng, seed, params, dirty, large):
    d = params["domain"]
    program = random_program(rng, d, 7 if large else 5, 26 if large else 12, 5 if large else 3, 4)
    pkg = program.pkg
    if large:
        program.relative = set(rng.sample(program.modules(), 3))
    destinations = program.modules() + [module_names(d, 8)[7]]
    victim, moves = emptying_moves(rng, program, destinations, 4 if large else 2)
    after = apply_moves(program, moves)
    tickets = [{"name": n, "dst": "%s.%s" % (pkg, m)} for n, m in moves]
    rules = MOVE_RULES + TICKET_RULES
    labels = []
    if dirty:
        staying = [f for f in program.functions if f not in dict(moves)]
        cancelled = rng.choice(staying)
        tickets.append({"name": cancelled, "dst": "%s.%s" % (pkg, rng.choice([m for m in destinations if m != program.module_of[cancelled]])),
                        "status": "cancelled"})
        tickets.append({"name": "%s_retired" % rng.choice(program.functions), "dst": "%s.%s" % (pkg, destinations[0])})
        stay = rng.choice([f for f in staying if f != cancelled])
        tickets.append({"name": stay, "dst": "%s.%s" % (pkg, program.module_of[stay])})
        rules += [
            "A ticket with `status: cancelled` is not applied.",
            "A ticket for a function the program does not have is ignored, and so is one that moves a function to "
            "the module it is already in.",
            "A ticket may write a module as a dotted name (`pkg.mod`) or as a path (`pkg/mod.py`); both mean the same module.",
        ]
        labels = ["cancelled"]
    chained = None
    if large:
        # One function moves twice; the plan's step column orders the tickets, the file order does not.
        candidates = [t for t in tickets if not t.get("status") and t["name"] in dict(moves)]
        chained = candidates[0]
        first_dst = rng.choice([m for m in destinations if "%s.%s" % (pkg, m) != chained["dst"]
                                and m != program.module_of[chained["name"]]])
        tickets.append({"name": chained["name"], "dst": "%s.%s" % (pkg, first_dst), "step": 0})
        rules += ["Tickets are applied in the order of plan.csv's `step` column, lowest first, not in the order "
                  "plan.csv lists them; a later ticket for the same function moves it again."]
    for number, ticket in enumerate(tickets, start=1):
        ticket.setdefault("step", 10 * number)
    rng.shuffle(tickets)
    if chained is not None:
        # The later step must come first in the file, so file order and step order disagree.
        tickets.sort(key=lambda t: (t["name"] != chained["name"], -t["step"]))

    def style(module):
        if not dirty or rng.random() < 0.5:
            return module
        return module.replace(".", "/") + ".py"

    plan_rows, files = ticket_files(rng, pkg, tickets, style)
    emptied = [victim] if victim not in after.modules() else []
    check = end_state_check(program, after, emptied, moved=[n for n, _ in moves])
    environment = program.files()
    environment.update(files)
    environment["refactor/plan.csv"] = csv_text(["ticket", "file", "step"], plan_rows)
    instruction = (
        "Apply the refactoring plan in refactor/plan.csv to the program in this workspace (the %s package and "
        "main.py). Each ticket it lists moves one function to another module. Follow the rules in CONTRACT.md "
        "exactly." % pkg)
    solution = mover_solution(pkg, plan="refactor/plan.csv")
    return assemble(params, instruction, environment, contract_for(rules, labels=labels), [check], {}, solution, "python")


LEVELS = (level0, level1, level2) + shaped_levels(ticket_level)
build = family(__name__, LEVELS)

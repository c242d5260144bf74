"""Oracle of multi_module_refactor levels 2-5: moves functions between the
package's modules with ast, bringing along the imports the moved code uses
and updating every import of a moved name, then drops imports nothing uses
any more. Level 2 moves MOVES; levels 3-5 apply the tickets of the plan file
PLAN in step order (cancelled ones skipped, a module emptied by a move
deleted). Runs in the workspace."""

import ast
import csv
import os

# ---- parameters (the generator writes the task's values here)
PACKAGE = 'pkg'
MOVES = []
PLAN = None
# ---- end of parameters


def path_of(module):
    return module.replace(".", "/") + ".py"


def read(path):
    with open(path) as handle:
        return handle.read()


def write(path, text):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as handle:
        handle.write(text)


def python_files():
    for root, dirs, files in os.walk("."):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.normpath(os.path.join(root, name))


def module_of_path(path):
    name = path[:-3].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def resolve(path, node):
    if not node.level:
        return node.module
    package = module_of_path(path)
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def top_names(tree):
    names = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            names[node.name] = None
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                names[alias.asname or alias.name] = node
    return names


def move(name, src, dst, delete_emptied):
    src_path, dst_path = path_of(src), path_of(dst)
    text = read(src_path)
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    lines = text.splitlines(keepends=True)
    block = "".join(lines[node.lineno - 1: node.end_lineno])
    rest = lines[: node.lineno - 1] + lines[node.end_lineno:]
    # What the moved code uses from its old module comes along as imports.
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    imports = []
    dst_text = read(dst_path) if os.path.exists(dst_path) else '"""%s."""\n' % dst.rpartition(".")[2]
    dst_defined = top_names(ast.parse(dst_text))
    for other, how in sorted(top_names(tree).items()):
        if other not in used or other == name or other in dst_defined:
            continue
        if isinstance(how, str):
            imports.append("import %s\n" % how)
        elif (src if how is None else resolve(src_path, how)) != dst:
            imports.append("from %s import %s\n" % (src if how is None else resolve(src_path, how), other))
    left = "".join(rest)
    if name in {n.id for n in ast.walk(ast.parse(left)) if isinstance(n, ast.Name)}:
        left = add_imports(left, ["from %s import %s\n" % (dst, name)])  # still called here
    write(src_path, left.rstrip("\n") + "\n")
    write(dst_path, add_imports(dst_text, imports).rstrip("\n") + "\n\n\n" + block)
    # Every import of the name from its old module now names the new one.
    for path in python_files():
        text = read(path)
        tree = ast.parse(text)
        lines = text.splitlines(keepends=True)
        changed = False
        for node in sorted((n for n in tree.body if isinstance(n, ast.ImportFrom)), key=lambda n: -n.lineno):
            if resolve(path, node) != src or not any(a.name == name for a in node.names):
                continue
            kept = [a for a in node.names if a.name != name]
            indent = lines[node.lineno - 1][: len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())]
            new = []
            if kept:
                prefix = "." * node.level + (node.module or "")
                new.append("%sfrom %s import %s\n" % (indent, prefix, ", ".join(
                    a.name + (" as " + a.asname if a.asname else "") for a in kept)))
            if module_of_path(path) != dst:
                new.append("%sfrom %s import %s\n" % (indent, dst if not node.level else dotted_relative(path, dst), name))
            lines[node.lineno - 1: node.end_lineno] = new
            changed = True
        if changed:
            write(path, "".join(lines))
    if delete_emptied:
        tree = ast.parse(read(src_path))
        if not any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) for n in tree.body):
            os.remove(src_path)


def add_imports(text, imports):
    """`text` with import lines added at the end of its header (docstring and imports)."""
    head, sep, body = text.partition("\n\n\n")
    if not sep:
        return text.rstrip("\n") + "\n" + "".join(imports)
    return head.rstrip("\n") + "\n" + "".join(imports) + sep + body


def tidy(package):
    """Drops imports of the package's own names that a module no longer uses
    (the package's __init__.py re-exports on purpose and is left alone)."""
    for path in python_files():
        if path.endswith("__init__.py"):
            continue
        text = read(path)
        tree = ast.parse(text)
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        lines = text.splitlines(keepends=True)
        for node in sorted((n for n in tree.body if isinstance(n, ast.ImportFrom)), key=lambda n: -n.lineno):
            if not (resolve(path, node) or "").startswith(package + "."):
                continue
            kept = [a for a in node.names if (a.asname or a.name) in used]
            if len(kept) == len(node.names):
                continue
            prefix = "." * node.level + (node.module or "")
            new = ["from %s import %s\n" % (prefix, ", ".join(a.name + (" as " + a.asname if a.asname else "") for a in kept))] if kept else []
            lines[node.lineno - 1: node.end_lineno] = new
        write(path, "".join(lines))


def dotted_relative(path, target):
    package = module_of_path(path)
    if not path.endswith("__init__.py"):
        package = package.rpartition(".")[0]
    if target.startswith(package + "."):
        return "." + target[len(package) + 1:]
    return target


def where_is(name):
    for path in python_files():
        if path == "main.py" or path.endswith("__init__.py") or path.startswith("refactor/"):
            continue
        if name in {n.name for n in ast.parse(read(path)).body if isinstance(n, ast.FunctionDef)}:
            return module_of_path(path)
    return None


plan = []
if PLAN:
    with open(PLAN, newline="") as handle:
        plan = sorted(csv.DictReader(handle), key=lambda row: int(row["step"]))
for row in plan:
    ticket = dict(line.split(": ", 1) for line in read(row["file"]).splitlines() if ": " in line)
    if ticket.get("status") == "cancelled":
        continue
    target = ticket["to"]
    if target.endswith(".py"):
        target = target[:-3].replace("/", ".")
    src = where_is(ticket["function"])
    if src is None or src == target:
        continue
    move(ticket["function"], src, target, True)
for name, src, dst in MOVES:
    move(name, src, dst, False)
tidy(PACKAGE)

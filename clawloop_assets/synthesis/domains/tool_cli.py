"""The command line of an executable domain's tools, copied into every
workspace next to tools.py. Stdlib only.

    python3 tools.py <tool> --param value ...   run one tool; prints its result as JSON
    python3 tools.py --schema                  every tool: description and parameters

A tool runs in one transaction on the workspace's database (DOMAIN_DB, by
default ./domain.db): committed when it returns, rolled back when it refuses.
A refusal (ToolError) prints {"error": ...} and exits 1; a wrong call
(unknown tool, missing or malformed parameter) exits 2; a tool that crashes
(a bug, not a business rule) prints {"crash": ...} and exits 3, so nobody
mistakes a broken tool for a refusal.
"""

import argparse
import inspect
import json
import os
import sqlite3
import sys


def _boolean(text):
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError("expected true or false, got %r" % text)


TYPES = {"str": str, "int": int, "float": float, "bool": _boolean}


class ToolError(Exception):
    """A business rule refused the call; the message says which and why."""


def tools_of(namespace):
    """The public top-level functions of a tools module, by name."""
    return {name: value for name, value in sorted(namespace.items())
            if inspect.isfunction(value) and not name.startswith("_") and value.__module__ == namespace.get("__name__")
            and name != "main"}


def parameters(function):
    """[(name, type name, required)] of a tool, without its `db` argument."""
    out = []
    for name, param in list(inspect.signature(function).parameters.items())[1:]:
        annotation = param.annotation
        type_name = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "str")
        out.append((name, type_name if type_name in TYPES else "str", param.default is inspect.Parameter.empty))
    return out


def schema(namespace):
    return {name: {"description": (inspect.getdoc(f) or "").splitlines()[0] if inspect.getdoc(f) else "",
                   "parameters": {p: {"type": t, "required": r} for p, t, r in parameters(f)}}
            for name, f in tools_of(namespace).items()}


def call(namespace, db_path, tool, arguments):
    """Run one tool on the database at db_path: its result, or ToolError."""
    function = tools_of(namespace)[tool]
    if not os.path.isfile(db_path):  # sqlite3 would create an empty one
        raise ToolError("no database at %s" % db_path)
    db = sqlite3.connect(db_path)
    try:
        db.execute("PRAGMA foreign_keys = ON")
        with db:  # one transaction: committed on return, rolled back on a refusal
            return function(db, **arguments)
    finally:
        db.close()


def main(namespace, argv=None):
    argv = sys.argv[1:] if argv is None else argv
    tools = tools_of(namespace)
    if argv[:1] == ["--schema"]:
        print(json.dumps(schema(namespace), indent=2, sort_keys=True))
        return
    if argv[:1] in (["-h"], ["--help"]):
        print("tools: %s\nrun: <tool> --param value ...; --schema lists every tool's parameters" % ", ".join(tools))
        return
    if not argv or argv[0] not in tools:
        print(json.dumps({"error": "unknown tool %r; tools: %s" % (argv[0] if argv else "", ", ".join(tools))}))
        sys.exit(2)
    parser = argparse.ArgumentParser(prog="tools.py " + argv[0], description=inspect.getdoc(tools[argv[0]]))
    for name, type_name, required in parameters(tools[argv[0]]):
        parser.add_argument("--" + name.replace("_", "-"), dest=name, type=TYPES[type_name], required=required)
    args = {k: v for k, v in vars(parser.parse_args(argv[1:])).items() if v is not None}
    try:
        result = call(namespace, os.environ.get("DOMAIN_DB", "domain.db"), argv[0], args)
    except ToolError as exc:
        print(json.dumps({"error": str(exc)}))
        sys.exit(1)
    except Exception as exc:  # a bug in the tool, rolled back like a refusal
        print(json.dumps({"crash": "%s: %s" % (type(exc).__name__, exc)}))
        sys.exit(3)
    print(json.dumps(result, sort_keys=True))

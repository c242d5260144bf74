"""Generator programs written by the synthesis model: the prompt (capability,
domain vocabulary, difficulty, guidance from the last diagnosis, and the
program's required interface), and the checks a reply must pass before it is
run. A reply that passes becomes a generator directory exactly like a
built-in family's; it then runs only in the sandbox, with the same time and
output limits and the same agent-free validation.

The built-in families stay the cold start and the laptop default: the
embedded 135M model cannot write a working generator.
"""

from __future__ import annotations

import ast
import json
import re
import tempfile
from pathlib import Path

from clawloop_assets.synthesis.candidates import GENERATOR_COMMON, GeneratorSpec, write_generator
from clawloop_assets.synthesis.catalogs import Capability, Domain

MAX_GENERATOR_BYTES = 64 << 10
_CODE_BLOCK = re.compile(r"```(?:python|py)[ \t]*\n(.*?)```", re.S)
# Modules a generator may import: the standard library's data tools and the shared module.
ALLOWED_IMPORTS = frozenset({
    "argparse", "collections", "csv", "datetime", "decimal", "fractions", "generator_common", "hashlib",
    "io", "itertools", "json", "math", "os", "random", "re", "statistics", "string", "sys", "textwrap",
})

INTERFACE = """\
Write one Python 3.11 program, standard library only, in a single ```python block.
It is run in a sandbox without network as
    python3 -I /generator/<name>.py --params /generator/params.json --seed N --out /out
and must, for a given seed, always write the same bytes (use random.Random(seed), never time or os.urandom).
Put its own directory on sys.path first (sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))),
then `from generator_common import run, assemble, ...` and end with `run(build)` under `if __name__ == "__main__":`.
build(seed, params) returns assemble(params, instruction, environment, contract, checks, key, solution, fmt), where
- instruction: the task for the agent (markdown); it must not contain any answer value;
- environment: {relative path: file text} of the initial workspace the agent sees;
- contract: {"rules": [...], "deliverable": ..., "parameters": {...}, "labels": [...]}: every hidden decision a
  correct solution needs (filters, rounding order, ties, tie-breaks, omitted empty groups, join keys), never an answer;
- checks: the verifier's checks, each {"type": "number"|"text"|"lines"|"csv_records"|"json_records"|"tree", ...},
  records located by business key ("key": [...columns]), never by row position;
- key: the answer values; solution: a bash script that solves the task from the workspace (the oracle);
- fmt: the deliverable format, e.g. "csv", "json", "number", "tree".
The shared module generator_common.py provides:
{helpers}"""


class GeneratorReplyError(ValueError):
    """A model reply that cannot become a generator; the message is the recorded reason."""


def shared_helpers() -> str:
    """The signatures and first docstring lines of generator_common's functions, for the prompt."""
    tree = ast.parse(GENERATOR_COMMON.read_text(encoding="utf-8"))
    lines = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            doc = (ast.get_docstring(node) or "").split("\n")[0]
            lines.append(f"  {node.name}({', '.join(a.arg for a in node.args.args)}): {doc}".rstrip(": "))
    return "\n".join(lines)


def generator_prompt(capability: Capability, domain: Domain, difficulty: int, guidance: str = "") -> list[dict[str, str]]:
    """The chat that asks the synthesis model for one generator program."""
    system = "You write task generators for training shell agents.\n" + INTERFACE.replace("{helpers}", shared_helpers())
    user = (
        f"Capability: {capability.id} ({capability.track} track): {capability.description}\n"
        f"Skills it exercises: {', '.join(capability.skills)}\n"
        f"Domain vocabulary (params['domain']): {json.dumps(domain.as_params())}\n"
        f"Difficulty level {difficulty} of -2 to 5: levels -2 and -1 ask for one basic shell command on one file "
        "(-2 says what to write or remove, -1 asks for something read from the file); from 0 up, higher levels "
        "spread the data over an index file and per-entity files, add distractor and dirty records, more hidden "
        "decisions and more data.\n"
    )
    if guidance:
        user += f"Weaknesses the last diagnosis found, to target: {guidance}\n"
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def extract_generator(reply: str) -> str:
    """The program in a reply, or GeneratorReplyError naming what is wrong.
    Only the reply's text is inspected here; running it is the sandbox's job."""
    blocks = _CODE_BLOCK.findall(reply or "")
    if not blocks:
        raise GeneratorReplyError("the reply holds no ```python block")
    code = blocks[0]
    if len(code.encode()) > MAX_GENERATOR_BYTES:
        raise GeneratorReplyError(f"the program is {len(code.encode())} bytes, over the {MAX_GENERATOR_BYTES}-byte limit")
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        raise GeneratorReplyError(f"the program does not parse: line {exc.lineno}: {exc.msg}") from None
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    outside = sorted(imported - ALLOWED_IMPORTS)
    if outside:
        raise GeneratorReplyError(f"the program imports {', '.join(outside)}, outside the allowed standard modules")
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    calls_run = any(isinstance(node, ast.Call) and getattr(node.func, "id", None) == "run" for node in ast.walk(tree))
    if "build" not in functions or not calls_run:
        raise GeneratorReplyError("the program must define build(seed, params) and call run(build)")
    return code


def write_model_generator(spec: GeneratorSpec, reply: str, directory: Path) -> Path:
    """A generator directory from a model reply, laid out like a built-in family's."""
    code = extract_generator(reply)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / spec.script_name
        script.write_text(code, encoding="utf-8")
        return write_generator(spec, directory, script=script)

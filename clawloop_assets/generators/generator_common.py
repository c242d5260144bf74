"""What every generator family shares: the command line, assembling a task,
writing it out as a bundle, the seeded random source, and a few helpers.

Stdlib-only. `write_generator` copies this file into each generator
directory next to the family script, which imports it (the sandbox runs
`python3 -I /generator/<family>.py --params P --seed N --out /out`, so the
family puts its own directory on sys.path first).
"""

import argparse
import json
import os
import random
from decimal import Decimal


def run(build):
    """Parses --params/--seed/--out and writes `build(seed, params)` to --out."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--params", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    with open(args.params, encoding="utf-8") as handle:
        params = json.load(handle)
    write_task(args.out, build(args.seed, params))


def build_level(levels, seed, params):
    """The task at params["difficulty"]: `levels[difficulty](rng, seed, params)`
    with the seeded random source of these params."""
    rng = new_rng(params, seed)
    level = params["difficulty"]
    for number, build in enumerate(levels):
        if level == number:
            return build(rng, seed, params)
    names = [str(number) for number in range(len(levels))]
    raise ValueError("difficulty must be %s or %s, got %r" % (", ".join(names[:-1]), names[-1], level))


def dump_json(value):
    return json.dumps(value, indent=2, sort_keys=True) + "\n"


def decimal_text(cents):
    return str(Decimal(cents).scaleb(-2))


def render_contract(contract):
    deliverable = contract["deliverable"]
    lines = ["# Answer contract", "", "Deliverable: `%s` (%s)." % (deliverable["path"], deliverable["schema"]), "", "Rules:"]
    lines += ["- " + rule for rule in contract["rules"]]
    return "\n".join(lines) + "\n"


def write_task(out, task):
    files = {
        "instruction.md": task["instruction"],
        "solution/solve.sh": task["solution"],
        "answer/answer.json": dump_json(task["answer"]),
        "meta.json": dump_json(task["meta"]),
    }
    for rel, text in task["environment"].items():
        files["environment/" + rel] = text
    for rel in sorted(files):
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(files[rel])


def assemble(params, instruction, environment, contract, checks, key, solution, fmt):
    environment = dict(environment)
    environment["CONTRACT.md"] = render_contract(contract)
    return {
        "instruction": instruction.strip() + "\n",
        "environment": environment,
        "solution": "#!/bin/bash\nset -euo pipefail\n" + solution.strip() + "\n",
        "answer": {"key": key, "checks": checks},
        "meta": {"track": params["track"], "format": fmt, "contract": contract},
    }


def new_rng(params, seed):
    # A string seed is hashed with SHA-512: stable across runs and machines.
    return random.Random("%s|%s|L%d|%d" % (params["capability"], params["domain"]["id"], params["difficulty"], seed))


def record_ids(rng, domain, count):
    return ["%s-%04d" % (domain["id_prefix"], n) for n in sorted(rng.sample(range(1, 10000), count))]


def cents_range(domain):
    low, high = domain["numeric_range"]
    return int(round(low * 100)), int(round(high * 100))


def csv_text(header, rows):
    return "\n".join([",".join(header)] + [",".join(str(v) for v in row) for row in rows]) + "\n"

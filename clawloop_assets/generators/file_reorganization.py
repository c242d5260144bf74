#!/usr/bin/env python3
"""Generator family `file_reorganization` (terminal track).

build(seed, params) -> task: a workspace of domain documents, an
instruction, the answer contract, the expected end state of the workspace
(paths and content hashes) computed from the generated files, and an oracle
solution. Stdlib-only, with generator_common.py beside it: it runs in the
sandbox as
`python3 -I /generator/file_reorganization.py --params P --seed N --out /out`.

Levels: 0 = one move/copy/delete/rename step; 1 = a rule applied to every
file (change an extension, sort into directories by extension); 2 =
`<extension>/<year>/<month>/` by a date in the name, undated and invalid
dates apart, junk deleted, nothing else left.
"""

import datetime
import hashlib
import os
import sys

# -I drops the script's directory from sys.path; it is our read-only /generator, so put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import assemble, build_level, run  # noqa: E402


def main():
    run(build)


# ---- the family

def document(rng, domain, name):
    # Every file gets distinct content, so a hash tells which file landed where.
    lines = ["%s %s" % (domain["entity"], name)]
    lines += ["%s-%04d %s %s" % (domain["id_prefix"], rng.randint(1, 9999), rng.choice(domain["group_values"]),
                                 rng.randint(1, 999)) for _ in range(rng.randint(2, 5))]
    return "\n".join(lines) + "\n"


def sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make_files(rng, domain, per_extension):
    """{name: content} with `count` files per extension, names `<stem>_<nn>.<ext>`."""
    files = {}
    for ext, count in per_extension.items():
        for stem in rng.sample(domain["file_stems"], min(count, len(domain["file_stems"]))):
            name = "%s_%02d.%s" % (stem, rng.randint(1, 99), ext)
            files[name] = document(rng, domain, name)
    return files


def tree_task(params, instruction, environment, moves, solution, rules, only_listed):
    """`moves` maps each original file to its final path, or None when it must be gone."""
    final = {}
    for original, content in environment.items():
        targets = moves.get(original, [original])
        for target in targets:
            final[target] = sha256(content)
    absent = sorted(p for p in environment if p not in final)
    final["CONTRACT.md"] = None  # filled in below, once the contract is rendered
    contract = {
        "deliverable": {"path": ".", "format": "tree", "schema": "the end state of the workspace"},
        "rules": rules + ["CONTRACT.md stays where it is, unchanged."]
        + (["When you are done the workspace holds no other files."] if only_listed else
           ["Other files you create are ignored."]),
        "parameters": {},
        "labels": [],
    }
    task = assemble(params, instruction, environment, contract, [], {}, solution, "tree")
    final["CONTRACT.md"] = sha256(task["environment"]["CONTRACT.md"])
    check = {"type": "tree", "name": "workspace end state", "files": dict(sorted(final.items())), "absent": absent,
             "no_other_files": only_listed}
    task["answer"] = {"key": {"files": sorted(final)}, "checks": [check]}
    return task


def level0(rng, seed, params):
    d = params["domain"]
    exts = list(d["file_extensions"])
    target_ext = rng.choice(exts)
    per_extension = {ext: rng.randint(2, 3) for ext in exts}
    variant = seed % 4
    if variant == 1:
        per_extension["tmp"] = rng.randint(2, 3)
    files = make_files(rng, d, per_extension)
    of_ext = sorted(n for n in files if n.endswith("." + target_ext))
    if variant == 0:
        folder = target_ext + "_files"
        instruction = "Move every .%s file into a directory named %s." % (target_ext, folder)
        moves = {n: [folder + "/" + n] for n in of_ext}
        solution = "mkdir -p %s && mv *.%s %s/" % (folder, target_ext, folder)
        rule = "Each .%s file keeps its name inside %s/; other files stay where they are." % (target_ext, folder)
    elif variant == 1:
        instruction = "Delete every .tmp file in the workspace."
        moves = {n: [] for n in files if n.endswith(".tmp")}
        solution = "rm -f *.tmp"
        rule = "Only the .tmp files go; every other file stays as it is."
    elif variant == 2:
        original = rng.choice(of_ext)
        renamed = original[: -len(target_ext)] + "md"
        instruction = "Rename %s to %s." % (original, renamed)
        moves = {original: [renamed]}
        solution = "mv %s %s" % (original, renamed)
        rule = "The content of the renamed file is unchanged; other files stay where they are."
    else:
        folder = "backup"
        instruction = "Copy every .%s file into a directory named backup." % target_ext
        moves = {n: [n, folder + "/" + n] for n in of_ext}
        solution = "mkdir -p backup && cp *.%s backup/" % target_ext
        rule = "The originals stay in place; the copies keep their names."
    return tree_task(params, instruction, files, moves, solution, [rule], only_listed=False)


def level1(rng, seed, params):
    d = params["domain"]
    exts = list(d["file_extensions"])
    files = make_files(rng, d, {ext: rng.randint(2, 4) for ext in exts})
    if seed % 2 == 0:
        old = rng.choice(exts)
        instruction = "Rename every .%s file in the workspace so that it ends in .md instead, keeping the rest of its name." % old
        moves = {n: [n[: -len(old)] + "md"] for n in files if n.endswith("." + old)}
        solution = 'for f in *.%s; do mv "$f" "${f%%.%s}.md"; done' % (old, old)
        rules = ["Only the extension changes; content and the rest of the name stay the same."]
    else:
        instruction = (
            "Move every file of the workspace except CONTRACT.md into a directory named after its extension "
            "(for example a .%s file goes into %s/)." % (exts[0], exts[0])
        )
        moves = {n: [n.rsplit(".", 1)[1] + "/" + n] for n in files}
        solution = 'for f in *.*; do [ "$f" = CONTRACT.md ] && continue; e="${f##*.}"; mkdir -p "$e"; mv "$f" "$e/"; done'
        rules = ["Files keep their names; the directory is the extension without the dot."]
    return tree_task(params, instruction, files, moves, solution, rules, only_listed=False)


def level2(rng, seed, params):
    d = params["domain"]
    exts = list(d["file_extensions"])
    files, moves = {}, {}
    start = datetime.date(2021, 1, 1)
    for _ in range(rng.randint(7, 10)):
        stem, ext = rng.choice(d["file_stems"]), rng.choice(exts)
        day = start + datetime.timedelta(days=rng.randint(0, 3 * 365))
        # Some extensions in upper case, the first file's always, so the
        # lower-case rule decides where at least one file goes.
        shown_ext = ext.upper() if rng.random() < 0.25 or not files else ext
        name = "%s_%s.%s" % (stem, day.isoformat(), shown_ext)
        if name in files:
            continue
        files[name] = document(rng, d, name)
        moves[name] = ["%s/%04d/%02d/%s" % (ext, day.year, day.month, name)]
    for stem in rng.sample(d["file_stems"], 2):
        ext = rng.choice(exts)
        name = "%s_notes.%s" % (stem, ext)
        files[name] = document(rng, d, name)
        moves[name] = ["%s/undated/%s" % (ext, name)]
    # A date that is not on the calendar counts as undated.
    bad = rng.choice(["2023-02-30", "2022-13-05", "2024-04-31", "2021-00-12"])
    ext = rng.choice(exts)
    name = "%s_%s.%s" % (rng.choice(d["file_stems"]), bad, ext)
    files[name] = document(rng, d, name)
    moves[name] = ["%s/undated/%s" % (ext, name)]
    for stem in rng.sample(d["file_stems"], rng.randint(1, 2)):
        name = "%s_draft.tmp" % stem
        files[name] = document(rng, d, name)
        moves[name] = []
    instruction = (
        "The workspace holds %s documents of several kinds. Reorganize them into directories by extension and by the "
        "date in their names, following the rules in CONTRACT.md exactly." % d["entity"]
    )
    rules = [
        "A file whose name contains a date YYYY-MM-DD goes to `<extension>/<YYYY>/<MM>/`, keeping its name.",
        "A file with no date in its name, or with a date that is not a real calendar date, goes to `<extension>/undated/`.",
        "`<extension>` is the file's extension in lower case, without the dot; the file name itself is not changed.",
        "Files ending in .tmp are deleted.",
    ]
    solution = (
        "python3 - <<'PY'\n"
        "import datetime, os, re\n"
        "for name in sorted(os.listdir('.')):\n"
        "    if name == 'CONTRACT.md' or not os.path.isfile(name):\n"
        "        continue\n"
        "    ext = name.rsplit('.', 1)[1].lower()\n"
        "    if ext == 'tmp':\n"
        "        os.remove(name)\n"
        "        continue\n"
        "    folder = os.path.join(ext, 'undated')\n"
        "    m = re.search(r'(\\d{4})-(\\d{2})-(\\d{2})', name)\n"
        "    if m:\n"
        "        try:\n"
        "            datetime.date(int(m.group(1)), int(m.group(2)), int(m.group(3)))\n"
        "            folder = os.path.join(ext, m.group(1), m.group(2))\n"
        "        except ValueError:\n"
        "            pass\n"
        "    os.makedirs(folder, exist_ok=True)\n"
        "    os.rename(name, os.path.join(folder, name))\n"
        "PY\n"
    )
    return tree_task(params, instruction, files, moves, solution, rules, only_listed=True)


def build(seed, params):
    return build_level((level0, level1, level2), seed, params)


if __name__ == "__main__":
    main()

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
dates apart, junk deleted, nothing else left; 3 = a manifest (the index)
names each inbox file's record id, a register (the reference table) gives
each record's group and dates, and files go to `<group>/<year>/`; 4 = the
same on dirty data (manifest rows for files that are gone, group names in
mixed case and spacing, two date formats, records with no group, junk); 5 =
well over a hundred files in several inbox folders, with name collisions
resolved by a stated rule.
"""

import datetime
import os
import sys

# -I drops the script's directory from sys.path; it is our read-only /generator, so put it back.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from generator_common import (  # noqa: E402
    CONTRACT_UNCHANGED,
    assemble,
    csv_text,
    family,
    level0_variant,
    python_oracle,
    record_ids,
    sha256,
    shaped_levels,
)

# ---- the family

def document(rng, domain, name):
    # Every file gets distinct content, so a hash tells which file landed where.
    lines = ["%s %s" % (domain["entity"], name)]
    lines += ["%s-%04d %s %s" % (domain["id_prefix"], rng.randint(1, 9999), rng.choice(domain["group_values"]),
                                 rng.randint(1, 999)) for _ in range(rng.randint(2, 5))]
    return "\n".join(lines) + "\n"


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
    final["CONTRACT.md"] = CONTRACT_UNCHANGED
    contract = {
        "deliverable": {"path": ".", "format": "tree", "schema": "the end state of the workspace"},
        "rules": rules + ["CONTRACT.md stays where it is, unchanged."]
        + (["When you are done the workspace holds no other files."] if only_listed else
           ["Other files you create are ignored."]),
        "parameters": {},
        "labels": [],
    }
    check = {"type": "tree", "name": "workspace end state", "files": dict(sorted(final.items())), "absent": absent,
             "no_other_files": only_listed}
    return assemble(params, instruction, environment, contract, [check], {"files": sorted(final)}, solution, "tree")


def level0(rng, seed, params):
    d = params["domain"]
    exts = list(d["file_extensions"])
    target_ext = rng.choice(exts)
    per_extension = {ext: rng.randint(2, 3) for ext in exts}
    variant = level0_variant(seed)
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
    solution = python_oracle("file_reorganization", "by_date")
    return tree_task(params, instruction, files, moves, solution, rules, only_listed=True)


def manifest_level(rng, seed, params, dirty, large):
    """Levels 3-5: where a file goes is two hops away from its name."""
    d = params["domain"]
    idf, gf = d["id_field"], d["group_field"]
    count = rng.randint(120, 150) if large else rng.randint(8, 12)
    ids = record_ids(rng, d, count + 4)
    ids, spare_ids = ids[:count], ids[count:]
    start = datetime.date(2021, 1, 1)
    register, files, moves, manifest = [], {}, {}, []
    folders = ["inbox/%s" % stem for stem in d["file_stems"]] if large else ["inbox"]
    used_names = set()
    for number, record_id in enumerate(ids):
        opened = start + datetime.timedelta(days=rng.randint(0, 3 * 365))
        # The first record closes in a later year than it opened, so which date counts decides its folder.
        closed = opened + datetime.timedelta(days=rng.randint(400, 500) if number == 0 else rng.randint(0, 300))
        group = rng.choice(d["group_values"])
        if dirty and number == 1:
            group = ""  # no group: the contract sends its file to `unassigned`
        shown_group = group
        if dirty and group and (number == 2 or rng.random() < 0.3):
            shown_group = rng.choice([group.upper(), group.capitalize(), " " + group, group + " "])
        shown_closed = closed.isoformat()
        if dirty and (number == 3 or rng.random() < 0.3):
            shown_closed = closed.strftime("%d/%m/%Y")
        register.append((record_id, shown_group, opened.isoformat(), shown_closed))
        while True:
            name = "%s_%02d.%s" % (rng.choice(d["file_stems"]), rng.randint(1, 99), rng.choice(d["file_extensions"]))
            if name not in used_names:
                break
        used_names.add(name)
        path = "%s/%s" % (rng.choice(folders), name)
        files[path] = document(rng, d, path)
        manifest.append((path, record_id))
        folder = group or "unassigned"
        moves[path] = ["%s/%04d/%s" % (folder, closed.year, name)]
    if large:
        # Name collisions: the same file name in two inbox folders, bound for one folder and year.
        for path, record_id in rng.sample(manifest, 3):
            twin_folder = rng.choice([f for f in folders if not path.startswith(f + "/")])
            name = path.rsplit("/", 1)[1]
            twin_id = spare_ids.pop()
            row = next(r for r in register if r[0] == record_id)
            register.append((twin_id,) + row[1:])
            twin = "%s/%s" % (twin_folder, name)
            files[twin] = document(rng, d, twin)
            manifest.append((twin, twin_id))
            first, second = sorted([(record_id, path), (twin_id, twin)])
            target = moves[path][0]
            stem, ext = name.rsplit(".", 1)
            moves[first[1]] = [target]
            moves[second[1]] = [target.rsplit("/", 1)[0] + "/%s_%s.%s" % (stem, second[0], ext)]
    for _ in range(rng.randint(1, 2)):
        # Files the manifest does not list stay where they are.
        name = "%s_unfiled.%s" % (rng.choice(d["file_stems"]), rng.choice(d["file_extensions"]))
        files["%s/%s" % (folders[0], name)] = document(rng, d, name)
    if dirty:
        for stem in rng.sample(d["file_stems"], 2):
            name = "%s/%s_draft.tmp" % (folders[-1], stem)
            files[name] = document(rng, d, name)
            moves[name] = []
        for record_id in spare_ids[:2]:
            # The manifest still lists files that are gone.
            manifest.append(("%s/%s_gone.%s" % (folders[0], rng.choice(d["file_stems"]), d["file_extensions"][0]), record_id))
    rng.shuffle(manifest)
    rng.shuffle(register)
    files["manifest.csv"] = csv_text(["file", idf], manifest)
    files["register.csv"] = csv_text([idf, gf, "opened", "closed"], register)
    instruction = (
        "The inbox holds %s documents. manifest.csv says which record each file belongs to and register.csv holds "
        "the records. File the documents by %s and year, following the rules in CONTRACT.md exactly."
        % (d["entity"], gf))
    rules = [
        "A file listed in manifest.csv moves to `<%s>/<YYYY>/`, keeping its name: `<%s>` is its record's %s in "
        "register.csv and `<YYYY>` the year of the record's `closed` date (not `opened`)." % (gf, gf, gf),
        "A file manifest.csv does not list stays where it is; manifest.csv and register.csv stay too.",
    ]
    if dirty:
        rules += [
            "`<%s>` is written in lower case with surrounding spaces removed; a record with no %s goes to "
            "`unassigned/<YYYY>/`." % (gf, gf),
            "Dates are written YYYY-MM-DD or DD/MM/YYYY.",
            "A manifest row whose file does not exist is ignored. Files ending in .tmp are deleted.",
        ]
    if large:
        rules.append("When several files would land on the same path, the one whose record id sorts first keeps "
                     "the name; each other one gets `_<record id>` added before its extension.")
    solution = python_oracle("file_reorganization", "manifest", KEY=idf, GROUP=gf)
    return tree_task(params, instruction, files, moves, solution, rules, only_listed=True)


LEVELS = (level0, level1, level2) + shaped_levels(manifest_level)
build = family(__name__, LEVELS)

"""How many Harbor-format tasks import and validate here: `python -m
benchmarks.harbor_import PATH [--oracle-timeout S] [--budget S]`.

Imports every task under PATH into a throwaway destination on the
bubblewrap backend (a task counts only when its oracle passes its own tests
here and its untouched workspace fails them) and prints the count, then the
rest grouped by reason: the first reason of each task, its file paths and
line numbers removed so that alike reasons group. Each oracle gets at most
`--oracle-timeout` seconds; once `--budget` seconds have gone, the tasks not
yet started are listed as not tried. The offline toolchain is built first if
it is missing (what `make setup` does).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from clawloop_assets.harbor.task_format import ImportResult, import_harbor_directory
from clawloop_assets.harbor.toolchain import ensure_toolchain
from resources.sandbox import BubblewrapSandbox


def reason_group(reason: str, root: Path) -> str:
    """A reason without the task's own paths and line numbers: the group it falls in."""
    text = reason.replace(str(root) + "/", "")
    text = re.sub(r"^[\w.-]+/", "", text)  # the task's directory
    text = re.sub(r"^([\w./-]+?)(:\d+)?( \(.*?\))?: ", lambda m: f"{m.group(1)}: ", text)
    text = re.sub(r"`[^`]*`", "`…`", text)
    text = re.sub(r"(?<=[\s(])'[^']*'", "'…'", text)
    text = re.sub(r"\(last output: .*", "", text)
    text = re.sub(r"\d+(\.\d+)? s\b", "N s", text)
    return text.strip()[:110]


def summarize(results: list[ImportResult], root: Path) -> str:
    imported = [r for r in results if r.runnable]
    lines = [f"{len(imported)} of {len(results)} tasks import and validate on bubblewrap "
             f"({100 * len(imported) / max(1, len(results)):.0f}%)", "", "| tasks | first reason |", "|---:|---|"]
    groups = Counter(reason_group(r.reasons[0], root) for r in results if not r.runnable)
    lines += [f"| {count} | {reason} |" for reason, count in groups.most_common()]
    lines += ["", "imported: " + ", ".join(r.task_id for r in imported)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a directory of Harbor tasks")
    parser.add_argument("--oracle-timeout", type=float, default=300.0, help="seconds per oracle (default 300)")
    parser.add_argument("--budget", type=float, default=3600.0, help="seconds for the whole import (default 3600)")
    args = parser.parse_args(argv)
    ensure_toolchain()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="clawloop-harbor-bench-") as dest:
        results, _ = import_harbor_directory(
            args.path, Path(dest), BubblewrapSandbox(), oracle_timeout_s=args.oracle_timeout,
            deadline=started + args.budget,
            log=lambda r: print(f"{time.monotonic() - started:6.0f}s {r.task_id}: "
                                f"{'imported' if r.runnable else r.reasons[0][:160]}", flush=True))
    print()
    print(summarize(results, args.path.resolve()), end="")
    print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()

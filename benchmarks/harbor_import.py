"""How many Harbor-format tasks import and validate here: `python -m
benchmarks.harbor_import PATH [--sandbox bubblewrap|docker] [--oracle-timeout S]
[--task-budget S] [--budget S] [--jobs N] [--cpu-shares N]`.

Imports every task under PATH into a throwaway destination on the chosen
backend (a task counts only when its oracle passes its own tests here and
its untouched workspace fails them; on Docker, in our sandbox or else in
the task's own image, built the Harbor way) and prints the count, then the
rest grouped by reason: the first reason of each task, its file paths, line
numbers and image tags removed so that alike reasons group. Each oracle
gets at most `--oracle-timeout` seconds and each task's validation in its
own image at most `--task-budget` (build, oracle and tests together); once
`--budget` seconds have gone, the tasks not yet started are listed as not
tried. `--jobs` tasks are imported at once. The offline toolchain is built
first if it is missing (what `make setup` does). Each task's image is
removed once it is judged (the destination is thrown away), unless
`--keep-images`.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from collections import Counter
from pathlib import Path

from clawloop_assets.harbor.docker_run import remove_task_image
from clawloop_assets.harbor.task_format import ImportResult, import_harbor_directory
from clawloop_assets.harbor.toolchain import ensure_toolchain
from resources.environment import read_environment
from resources.sandbox import BubblewrapSandbox, DockerSandbox

IMAGE_PREFIX = "in its own image: "


def reason_group(reason: str, root: Path) -> str:
    """A reason without the task's own paths, line numbers and image tags:
    the group it falls in. A reason from the task's own image keeps saying so."""
    if reason.startswith(IMAGE_PREFIX):
        rest = reason[len(IMAGE_PREFIX):]
        rest = re.sub(r"the image build failed: (?!it fetches).*", lambda m: "the image build failed: " + _build_kind(m.group(0)),
                      rest, flags=re.S)
        rest = re.sub(r"(cannot reach) \(.*", r"\1", rest, flags=re.S)
        rest = re.sub(r"the oracle's run does not pass: .*", "the oracle's run does not pass", rest, flags=re.S)
        rest = re.sub(r"fetches from .*?, which this machine's registry proxy does not reach.*",
                      "fetches from a host beyond the package registries", rest, flags=re.S)
        return "image: " + reason_group(rest, root)
    text = reason.replace(str(root) + "/", "")
    text = re.sub(r"^[\w.-]+/", "", text)  # the task's directory
    text = re.sub(r"^([\w./-]+?)(:\d+)?( \(.*?\))?: ", lambda m: f"{m.group(1)}: ", text)
    text = re.sub(r"`[^`]*`", "`…`", text)
    text = re.sub(r"(?<=[\s(])'[^']*'", "'…'", text)
    text = re.sub(r"\(last output: .*", "", text)
    text = re.sub(r"(PyPI has no wheel of) .*", r"\1 a requirement (pip download's ERROR)", text, flags=re.S)
    text = re.sub(r"(needs the network, which our sandbox does not have); .*", r"\1", text, flags=re.S)
    text = re.sub(r"\d+(\.\d+)? s\b", "N s", text)
    return text.strip()[:150]


def _build_kind(failure: str) -> str:
    """What kind of build failure, by the Dockerfile step that failed: the
    groups a table can show."""
    if "Unable to locate package" in failure or "has no installation candidate" in failure:
        return "an apt package Debian bookworm (our stand-in base) does not have"
    if "No matching distribution found" in failure or "Could not find a version" in failure:
        return "a pip requirement with no distribution for our base's Python 3.11"
    step = re.search(r"Step \d+/\d+ : (\w+)", failure)
    instruction = step.group(1).upper() if step else "RUN"
    if instruction in ("COPY", "ADD"):
        if "invalid from flag value" in failure:
            return f"{instruction} --from an image no registry here serves"
        if "file not found in build context" in failure:
            return f"a {instruction} source missing from the task's files"
    return f"a {instruction} step failed"


def summarize(results: list[ImportResult], root: Path, backend: str = "bubblewrap") -> str:
    validated = [r for r in results if r.validated]
    runnable = [r for r in results if r.runnable]
    images = [r for r in results if r.image is not None]
    lines = [f"{len(validated)} of {len(results)} tasks import and validate on {backend} "
             f"({100 * len(validated) / max(1, len(results)):.0f}%)"]
    if backend == "docker":
        lines += [f"  {len(runnable)} in our sandbox (the harness image: our agent runs them), "
                  f"{len(images)} only in their own image (the Harbor way; our agent runs them there: "
                  f"`clawloop eval --sandbox docker`), {sum(r.registries for r in images)} of them with the "
                  "package registries for the oracle (and our agent)"]
    lines += ["", "| tasks | first reason |", "|---:|---|"]
    groups = Counter(reason_group(r.reasons[0], root) for r in results if not r.validated)
    lines += [f"| {count} | {reason} |" for reason, count in groups.most_common()]
    lines += ["", "imported: " + ", ".join(r.task_id for r in runnable)]
    if images:
        lines += ["validated only in their own image: " + ", ".join(r.task_id for r in images)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, help="a directory of Harbor tasks")
    parser.add_argument("--oracle-timeout", type=float, default=300.0, help="seconds per oracle (default 300)")
    parser.add_argument("--budget", type=float, default=3600.0,
                        help="seconds after which no new task starts (default 3600)")
    parser.add_argument("--sandbox", choices=["bubblewrap", "docker"], default="bubblewrap",
                        help="the backend (default bubblewrap); docker also validates in each task's own image")
    parser.add_argument("--task-budget", type=float, default=900.0,
                        help="seconds per task's validation in its own image: build, oracle, tests (default 900)")
    parser.add_argument("--jobs", type=int, default=1, help="tasks imported at once (default 1)")
    parser.add_argument("--keep-images", action="store_true",
                        help="keep the images of the tasks that validate (default: removed once judged, the "
                             "destination being thrown away)")
    parser.add_argument("--cpu-shares", type=int, default=None,
                        help="docker --cpu-shares (default: $CLAWLOOP_DOCKER_CPU_SHARES, else Docker's)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.cpu_shares is not None and args.cpu_shares < 2:
        parser.error(f"--cpu-shares must be at least 2, got {args.cpu_shares}")
    ensure_toolchain()
    if args.sandbox == "docker":
        shares = args.cpu_shares if args.cpu_shares is not None else read_environment().docker_cpu_shares
        sandbox = DockerSandbox(cpu_shares=shares)
        sandbox.check_available()
    else:
        sandbox = BubblewrapSandbox()
    started = time.monotonic()

    def log(r: ImportResult) -> None:
        what = ("imported" if r.runnable else r.reasons[0] if not r.image else
                f"validated in its image {r.image}" + (" with the package registries" if r.registries else ""))
        print(f"{time.monotonic() - started:6.0f}s {r.task_id}: {what}", flush=True)
        if r.image is not None and not args.keep_images:
            remove_task_image(r.image)

    with tempfile.TemporaryDirectory(prefix="clawloop-harbor-bench-") as dest:
        results, _ = import_harbor_directory(
            args.path, Path(dest), sandbox, oracle_timeout_s=args.oracle_timeout, deadline=started + args.budget,
            task_budget_s=args.task_budget, jobs=args.jobs, log=log)
    print()
    print(summarize(results, args.path.resolve(), args.sandbox), end="")
    print(f"took {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()

"""What stands between a family's level -1 (its level-0 task with the
command shown) and level 0 (the task in words): the level-0 tasks of a
run's evaluation set, each given in several forms of help, run by one or
more policies. The measurements behind
docs/experiments/2026-12-03-between-the-command-and-the-words.md.

Not part of `make bench` (it reads a finished run's evaluation set):

    python -m benchmarks.rung_forms $CLAWLOOP_HOME base,round-0006 words,shown,tool,bound,blank
    python -m benchmarks.rung_forms $CLAWLOOP_HOME base,round-0004 words,shown,bound --level -2

At level -2 (the warm-up tasks, whose instruction ends with its command
shown) the forms apply to the instruction without its " Run: ...": "words"
is the warm-up task in words, "shown" the task as the loop gives it.

The forms (`FORMS`), each appended to the task's instruction as level -1
appends its command:
- words: the task as the family writes it (level 0);
- shown: " Run: <its oracle's command>" (level -1);
- tool: the tools the command uses, named, without their arguments;
- bound: the command shown with its last name taken from the instruction
  (a file, a value) replaced by OUT, and OUT's value given beside it;
- blank: the same name replaced by a blank to fill in from the instruction.
Checkpoints are as `clawloop eval --checkpoint` reads them ("base": the
policy's base model). Each line gives the passes by capability (at level -2
also by operation).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Sequence

from clawloop_assets.evaluation.task_dir import resolve_checkpoint
from clawloop_assets.harness.agent_loop import judged_reward, run_rollouts
from clawloop_assets.loop_config import LoopConfig
from clawloop_assets.synthesis.generators.generator_common import SHOWN_COMMAND_LEAD, in_words, shown_command, with_help
from clawloop_assets.task_bundle import TaskBundle, load_task_bundle
from resources.paths import WAREHOUSE_FILE
from resources.warehouse import DuckDBWarehouse

# A word of a command names something of the task when the instruction
# holds it verbatim and it is no option: file names, values, ids.
_MIN_NAME = 3


def oracle_command(bundle: Path) -> str:
    """The task's oracle command as level -1 shows it (generator_common.shown_command)."""
    path = bundle / "solution" / "solve.sh"
    try:
        return shown_command(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{path}: no generated solution of one short command ({exc})") from None


def tools_of(command: str) -> list[str]:
    """The programs a shell command runs, in order, each once; a domain
    tool's subcommand with its script (`python3 tools.py cancel_order`).
    Quoted text (an awk program's `||`) is no separator."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    names, words = [], []
    for token in [*lexer, ";"]:
        if token in ("|", "||", "&&", ";", "&"):
            if words:
                names.append(" ".join(words[:3]) if words[0] == "python3" and len(words) > 2 else words[0])
            words = []
        else:
            words.append(token)
    return list(dict.fromkeys(names))


def _last_name(command: str, instruction: str) -> tuple[list[str], int] | None:
    """The command split on whitespace (kept) and the index of its last word
    that the instruction names, or None if it names none."""
    words = re.split(r"(\s+)", command)
    for index in reversed(range(len(words))):
        bare = words[index].strip("'\"")
        if len(bare) >= _MIN_NAME and bare in instruction and not words[index].startswith("-"):
            return words, index
    return None


def _words(instruction: str, command: str) -> str:
    return instruction.strip() + "\n"


def _shown(instruction: str, command: str) -> str:
    return with_help(instruction, SHOWN_COMMAND_LEAD + command)


def _tool(instruction: str, command: str) -> str:
    return with_help(instruction, "Use " + " and ".join(tools_of(command)) + ".")


def _bound(instruction: str, command: str) -> str:
    found = _last_name(command, instruction)
    if found is None:
        return _shown(instruction, command)
    words, index = found
    name = words[index].strip("'\"")
    words[index] = "OUT"
    return with_help(instruction, SHOWN_COMMAND_LEAD + "".join(words) + " (OUT is " + name + ")")


def _blank(instruction: str, command: str) -> str:
    found = _last_name(command, instruction)
    if found is None:
        return _shown(instruction, command)
    words, index = found
    words[index] = "___"
    return with_help(instruction, "Fill in the blank and run: " + "".join(words))


# Form -> (instruction, oracle command) -> the instruction the agent gets.
FORMS: dict[str, Callable[[str, str], str]] = {
    "words": _words, "shown": _shown, "tool": _tool, "bound": _bound, "blank": _blank}


def changed_by(form: str, bundle: Path) -> bool:
    """Whether `form` gives the task something the command shown does not
    hide (bound and blank fall back to the command shown when the
    instruction names nothing the command uses)."""
    if form not in ("bound", "blank"):
        return True
    words, command = words_and_command(bundle)
    return _last_name(command, words) is not None


def words_and_command(bundle: Path) -> tuple[str, str]:
    """The bundle's task in words (in_words) and its oracle command."""
    command = oracle_command(bundle)
    return in_words((bundle / "instruction.md").read_text(encoding="utf-8"), command), command


def form_tasks(bundles: Sequence[Path], form: str, into: Path) -> list[TaskBundle]:
    """Copies of `bundles` under `into`, each with its instruction in `form`."""
    tasks = []
    for bundle in bundles:
        copy = into / bundle.name
        shutil.copytree(bundle, copy)
        (copy / "instruction.md").write_text(FORMS[form](*words_and_command(bundle)), encoding="utf-8")
        tasks.append(load_task_bundle(copy))
    return tasks


def measure(home: Path, checkpoints: Sequence[str], forms: Sequence[str], samples: int = 8,
            seed: int = 7, torch_threads: int = 2, level: int = 0) -> list[dict]:
    """Per (checkpoint, form): passes and scored rollouts in all and by
    capability, on the `level` tasks of `home`'s evaluation set at the
    loop's fixed temperature, and the same over the tasks the form changes
    (`changed`: for bound and blank, those whose command uses a name the
    instruction gives)."""
    from resources.embedded_policy import EmbeddedPolicyModel
    from resources.sandbox import BubblewrapSandbox

    unknown = [form for form in forms if form not in FORMS]
    if unknown:
        raise ValueError(f"unknown forms {unknown}; the forms are {sorted(FORMS)}")
    if level not in (-2, 0):
        raise ValueError(f"the forms apply to level 0 and the warm-up level -2, not {level}")
    bundles = sorted((home / "evaluation" / "own" / "tasks").glob(f"*.L{level}.*"))
    if not bundles:
        raise ValueError(f"{home}/evaluation/own/tasks: no level {level} task (has the run evaluated a round?)")
    # A warm-up task's operation (copy a file, ...); a level-0 task has none.
    operations = {bundle.name: json.loads((bundle / "meta.json").read_text(encoding="utf-8")).get("operation", "-")
                  for bundle in bundles}
    policy = EmbeddedPolicyModel(torch_threads=torch_threads)
    sandbox, settings = BubblewrapSandbox(), LoopConfig().agent_settings()
    results = []
    for spec in checkpoints:
        path = resolve_checkpoint(None if spec == "base" else spec, policy,
                                  lambda: DuckDBWarehouse(path=str(home / WAREHOUSE_FILE)))
        session = policy.load(path)
        try:
            for form in forms:
                with tempfile.TemporaryDirectory() as tmp:
                    tasks = form_tasks(bundles, form, Path(tmp) / "tasks")
                    changed = {task.task_id for task, bundle in zip(tasks, bundles) if changed_by(form, bundle)}
                    started = time.perf_counter()
                    rollouts = run_rollouts(session, sandbox, tasks, samples, settings, Path(tmp) / "work", seed)
                    by_capability: dict[str, list[int]] = defaultdict(lambda: [0, 0])
                    by_operation: dict[str, list[int]] = defaultdict(lambda: [0, 0])
                    in_changed = [0, 0]
                    for rollout in rollouts:
                        reward = judged_reward(rollout)
                        if reward is None:
                            continue
                        for counts in (by_capability[rollout.task.capability], by_operation[operations[rollout.task.root.name]]):
                            counts[0] += int(reward == 1)
                            counts[1] += 1
                        if rollout.task.task_id in changed:
                            in_changed[0] += int(reward == 1)
                            in_changed[1] += 1
                results.append({
                    "checkpoint": spec, "form": form, "seconds": time.perf_counter() - started,
                    "passes": sum(p for p, _ in by_capability.values()),
                    "scored": sum(n for _, n in by_capability.values()),
                    "changed": tuple(in_changed), "changed_tasks": len(changed),
                    "by_capability": {c: tuple(v) for c, v in sorted(by_capability.items())},
                    "by_operation": {o: tuple(v) for o, v in sorted(by_operation.items())},
                })
        finally:
            session.close()
    return results


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("home", type=Path, help="a run's CLAWLOOP_HOME")
    parser.add_argument("checkpoints", help="comma-separated: base, a round key, a checkpoint directory")
    parser.add_argument("forms", help="comma-separated, of " + ", ".join(FORMS))
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--torch-threads", type=int, default=2, help="1 beside other runs on the same cores")
    parser.add_argument("--level", type=int, default=0, choices=(-2, 0), help="the evaluation set's level")
    args = parser.parse_args(argv)
    for row in measure(args.home, args.checkpoints.split(","), args.forms.split(","), args.samples,
                       torch_threads=args.torch_threads, level=args.level):
        changed = "" if row["form"] not in ("bound", "blank") else \
            f"; on the {row['changed_tasks']} tasks it changes {row['changed'][0]}/{row['changed'][1]}"
        print(f"{row['checkpoint']} {row['form']}: {row['passes']}/{row['scored']}{changed} "
              f"({row['seconds']:.0f} s); " + " ".join(f"{c}:{p}/{n}" for c, (p, n) in row["by_capability"].items())
              + ("" if args.level == 0 else "; by operation " + " ".join(
                  f"{o}:{p}/{n}" for o, (p, n) in row["by_operation"].items())), flush=True)


if __name__ == "__main__":
    main()

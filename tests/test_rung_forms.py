"""benchmarks/rung_forms.py: the forms of help between a level-0 task in
words and its command shown, on real level-0 commands of the families."""

from pathlib import Path

import pytest
from family_tasks import CAPABILITIES, build_bundle

from benchmarks.rung_forms import FORMS, changed_by, form_tasks, in_words, oracle_command, tools_of, words_and_command
from clawloop_assets.synthesis.catalogs import load_domain_catalog
from clawloop_assets.synthesis.generators.generator_common import SOLUTION_HEADER
from resources.sandbox import BubblewrapSandbox

INSTRUCTION = ("Write the ids in loan_register.txt that are missing from insurer_schedule.txt to missing.txt, "
               "one per line. Both files are sorted.")
COMMAND = "comm -23 loan_register.txt insurer_schedule.txt > missing.txt"


def _bundle(root: Path, name: str, instruction: str, solution_lines: list[str]) -> Path:
    bundle = root / name
    (bundle / "solution").mkdir(parents=True)
    (bundle / "solution" / "solve.sh").write_text(SOLUTION_HEADER + "\n".join(solution_lines) + "\n")
    (bundle / "instruction.md").write_text(instruction + "\n")
    return bundle


def test_each_form_of_one_task():
    assert FORMS["words"](INSTRUCTION, COMMAND) == INSTRUCTION + "\n"
    assert FORMS["shown"](INSTRUCTION, COMMAND) == INSTRUCTION + " Run: " + COMMAND + "\n"
    assert FORMS["tool"](INSTRUCTION, COMMAND) == INSTRUCTION + " Use comm.\n"
    assert FORMS["bound"](INSTRUCTION, COMMAND).endswith(
        " Run: comm -23 loan_register.txt insurer_schedule.txt > OUT (OUT is missing.txt)\n")
    assert FORMS["blank"](INSTRUCTION, COMMAND).endswith(
        " Fill in the blank and run: comm -23 loan_register.txt insurer_schedule.txt > ___\n")


def test_tools_of_pipelines_and_domain_tools():
    assert tools_of("tr a-z A-Z < loans.txt | sort -u > unique.txt") == ["tr", "sort"]
    assert tools_of("mkdir -p log_files && mv *.log log_files/") == ["mkdir", "mv"]
    assert tools_of("awk 'NR==1||FNR>1' first.csv second.csv > all.csv") == ["awk"]
    assert tools_of('sqlite3 data.db "DELETE FROM firings WHERE void"; cut -d, -f3 slots.csv|sed 1d') == [
        "sqlite3", "cut", "sed"]
    assert tools_of("python3 tools.py cancel_order --order-id ORD-0012; python3 tools.py list_orders") == [
        "python3 tools.py cancel_order", "python3 tools.py list_orders"]


def test_a_command_naming_nothing_of_the_instruction_is_left_shown(tmp_path):
    # "rm -f *.tmp": the instruction says ".tmp file", never "*.tmp", so
    # there is nothing to bind or blank; the form is the command shown, and
    # the measurement counts the task apart.
    bundle = _bundle(tmp_path, "t", "Delete every .tmp file in the workspace.", ["rm -f *.tmp"])
    assert FORMS["blank"]("Delete every .tmp file in the workspace.", "rm -f *.tmp") == \
        FORMS["shown"]("Delete every .tmp file in the workspace.", "rm -f *.tmp")
    assert not changed_by("blank", bundle) and not changed_by("bound", bundle) and changed_by("tool", bundle)


def test_form_tasks_rewrite_copies_of_real_level_0_bundles(tmp_path):
    original = build_bundle(BubblewrapSandbox(), CAPABILITIES["ledger_reconciliation"], tmp_path / "built",
                            load_domain_catalog()[0], 0, 0)
    words = original.instruction
    command = oracle_command(original.root)
    [copy] = form_tasks([original.root], "bound", tmp_path / "out")
    assert copy.task_id == original.task_id and copy.root != original.root
    assert copy.instruction.startswith(words.strip()) and "(OUT is " in copy.instruction
    assert "OUT" not in command and original.instruction == words


def test_a_solution_not_generated_is_refused(tmp_path):
    bundle = tmp_path / "t"
    (bundle / "solution").mkdir(parents=True)
    (bundle / "solution" / "solve.sh").write_text("echo hi\n")
    with pytest.raises(ValueError, match="no generated solution"):
        oracle_command(bundle)


def test_a_warm_up_task_is_put_in_each_form_from_its_words(tmp_path):
    # A warm-up bundle's instruction already ends with its command shown:
    # each form starts from the words before it, so "shown" is the task as
    # the loop gives it and "words" the task without the command.
    original = build_bundle(BubblewrapSandbox(), CAPABILITIES["ledger_reconciliation"], tmp_path / "built",
                            load_domain_catalog()[0], -2, 0)
    command = oracle_command(original.root)
    assert original.instruction.rstrip().endswith(" Run: " + command)
    words, shown_command = words_and_command(original.root)
    assert shown_command == command
    assert command not in words and words.strip() and original.instruction.startswith(words.strip())
    shown, bare, blank = (form_tasks([original.root], form, tmp_path / form)[0] for form in ("shown", "words", "blank"))
    assert shown.instruction == original.instruction and bare.instruction == words
    assert blank.instruction.count("___") == 1 and changed_by("blank", original.root)


def test_a_level_0_task_is_its_own_words():
    assert in_words(INSTRUCTION + "\n", COMMAND) == INSTRUCTION + "\n"

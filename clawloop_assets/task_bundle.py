"""The task bundle: one task as a directory, close to the Harbor format.

```
task.toml          [task] id, capability, domain, difficulty, track, format,
                   generator_id, seed, round; [limits] max_turns, command_timeout_s
instruction.md     what the agent reads
meta.json          track, format and the answer contract as data (for the leakage audit)
environment/       the initial workspace s0, with CONTRACT.md (the answer contract)
solution/solve.sh  oracle solution, run with cwd=/workspace
tests/verify.py    the verifier; never visible to the agent
answer/answer.json the answer key and the check specification; never visible to the agent
```
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resources.schemas import MIN_LEVEL

TRACKS = ("analysis", "terminal")
FORMATS = ("number", "text", "lines", "csv", "json", "files", "report", "tree", "sqlite", "python")
REQUIRED_FILES = (
    "task.toml",
    "instruction.md",
    "meta.json",
    "environment/CONTRACT.md",
    "solution/solve.sh",
    "tests/verify.py",
    "answer/answer.json",
)
_TASK_FIELDS: dict[str, type | tuple[type, ...]] = {
    "id": str,
    "capability": str,
    "domain": str,
    "difficulty": int,
    "track": str,
    "format": str,
    "generator_id": str,
    "seed": int,
    "round": str,
}
_LIMIT_FIELDS: dict[str, type | tuple[type, ...]] = {"max_turns": int, "command_timeout_s": (int, float)}


class TaskBundleError(ValueError):
    """A bundle is malformed; the message names the file and the field."""


@dataclass(frozen=True)
class TaskBundle:
    root: Path
    task_id: str
    capability: str
    domain: str
    difficulty: int
    track: str  # "analysis" | "terminal"
    format: str  # the deliverable format, one of FORMATS
    generator_id: str
    seed: int
    round_key: str
    max_turns: int
    command_timeout_s: float
    contract: dict[str, Any]  # the answer contract as data, from meta.json
    # A string planted in the hidden files (answer key, tests/); seen in a
    # trajectory, it means the agent reached what it must never read.
    canary: str | None = None

    @property
    def instruction_path(self) -> Path:
        return self.root / "instruction.md"

    @property
    def instruction(self) -> str:
        return self.instruction_path.read_text(encoding="utf-8")

    @property
    def environment_dir(self) -> Path:
        return self.root / "environment"

    @property
    def contract_path(self) -> Path:
        return self.environment_dir / "CONTRACT.md"

    @property
    def solution_path(self) -> Path:
        return self.root / "solution" / "solve.sh"

    @property
    def tests_dir(self) -> Path:
        return self.root / "tests"

    @property
    def answer_dir(self) -> Path:
        return self.root / "answer"

    @property
    def answer_path(self) -> Path:
        return self.answer_dir / "answer.json"

    def answer(self) -> dict[str, Any]:
        """The answer key and check specification (validated by load_task_bundle)."""
        return json.loads(self.answer_path.read_text(encoding="utf-8"))


def write_task_toml(
    path: Path,
    *,
    task_id: str,
    capability: str,
    domain: str,
    difficulty: int,
    track: str,
    format: str,
    generator_id: str,
    seed: int,
    round_key: str,
    max_turns: int,
    command_timeout_s: float,
) -> None:
    """Writes task.toml by hand: the values are plain strings and numbers."""

    def string(value: str) -> str:
        # A JSON string of printable ASCII is a valid TOML basic string.
        if not value.isascii() or not value.isprintable():
            raise ValueError(f"task.toml values must be printable ASCII, got {value!r}")
        return json.dumps(value)

    lines = [
        "[task]",
        f"id = {string(task_id)}",
        f"capability = {string(capability)}",
        f"domain = {string(domain)}",
        f"difficulty = {int(difficulty)}",
        f"track = {string(track)}",
        f"format = {string(format)}",
        f"generator_id = {string(generator_id)}",
        f"seed = {int(seed)}",
        f"round = {string(round_key)}",
        "",
        "[limits]",
        f"max_turns = {int(max_turns)}",
        f"command_timeout_s = {float(command_timeout_s)!r}",
    ]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")


def _field(table: dict, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    if name not in table:
        raise TaskBundleError(f"{where}: missing field '{name}'")
    value = table[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TaskBundleError(f"{where}: field '{name}' must be {expected}, got {type(value).__name__}")
    return value


def _check_tree(root: Path) -> None:
    # Bundles are written by untrusted generators: the host reads them, so no
    # symlink or special file may hide in them.
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode):
                raise TaskBundleError(f"{path}: symlinks are not allowed in a task bundle")
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise TaskBundleError(f"{path}: only regular files and directories are allowed in a task bundle")


def warmup_operation(bundle_dir: str | Path | None) -> str | None:
    """The operation a warm-up task's meta.json names (generator_common's
    one_step_task writes it); None for a bundle since removed, or a task
    that names none (every task above the warm-up levels)."""
    meta = Path(bundle_dir) / "meta.json" if bundle_dir else None
    if meta is None or not meta.is_file():
        return None
    return json.loads(meta.read_text(encoding="utf-8")).get("operation")


def load_task_bundle(path: Path) -> TaskBundle:
    root = Path(path)
    if not root.is_dir():
        raise TaskBundleError(f"{root}: not a directory")
    _check_tree(root)
    for rel in REQUIRED_FILES:
        if not (root / rel).is_file():
            raise TaskBundleError(f"{root / rel}: missing file")

    toml_path = root / "task.toml"
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskBundleError(f"{toml_path}: not valid TOML ({exc})") from None
    for table_name in ("task", "limits"):
        if not isinstance(data.get(table_name), dict):
            raise TaskBundleError(f"{toml_path}: missing table [{table_name}]")
    task = {name: _field(data["task"], name, kind, f"{toml_path} [task]") for name, kind in _TASK_FIELDS.items()}
    limits = {name: _field(data["limits"], name, kind, f"{toml_path} [limits]") for name, kind in _LIMIT_FIELDS.items()}
    if task["track"] not in TRACKS:
        raise TaskBundleError(f"{toml_path} [task]: field 'track' must be one of {TRACKS}, got {task['track']!r}")
    if task["format"] not in FORMATS:
        raise TaskBundleError(f"{toml_path} [task]: field 'format' must be one of {FORMATS}, got {task['format']!r}")
    if not MIN_LEVEL <= task["difficulty"] <= 9:  # 6..9: imported (Harbor) tasks beyond our families' levels
        raise TaskBundleError(f"{toml_path} [task]: field 'difficulty' must be in {MIN_LEVEL}..9, got {task['difficulty']}")
    if limits["max_turns"] < 1 or limits["command_timeout_s"] <= 0:
        raise TaskBundleError(f"{toml_path} [limits]: fields 'max_turns' and 'command_timeout_s' must be positive")

    meta_path = root / "meta.json"
    meta = _json_object(meta_path)
    for name in ("track", "format"):
        if meta.get(name) != task[name]:
            raise TaskBundleError(f"{meta_path}: field '{name}' is {meta.get(name)!r}, task.toml says {task[name]!r}")
    contract = meta.get("contract")
    if not isinstance(contract, dict) or not isinstance(contract.get("rules"), list):
        raise TaskBundleError(f"{meta_path}: field 'contract' must be an object with a 'rules' list")

    answer_path = root / "answer" / "answer.json"
    answer = _json_object(answer_path)
    if "key" not in answer:
        raise TaskBundleError(f"{answer_path}: missing field 'key'")
    checks = answer.get("checks")
    if not isinstance(checks, list) or not checks or not all(isinstance(c, dict) and "type" in c for c in checks):
        raise TaskBundleError(f"{answer_path}: field 'checks' must be a non-empty list of objects with a 'type'")

    canary = answer.get("canary")
    if canary is not None and (not isinstance(canary, str) or len(canary) < 16):
        raise TaskBundleError(f"{answer_path}: field 'canary' must be a string of at least 16 characters")

    if not (root / "instruction.md").read_text(encoding="utf-8").strip():
        raise TaskBundleError(f"{root / 'instruction.md'}: empty instruction")
    return TaskBundle(
        root=root,
        task_id=task["id"],
        capability=task["capability"],
        domain=task["domain"],
        difficulty=task["difficulty"],
        track=task["track"],
        format=task["format"],
        generator_id=task["generator_id"],
        seed=task["seed"],
        round_key=task["round"],
        max_turns=limits["max_turns"],
        command_timeout_s=float(limits["command_timeout_s"]),
        contract=contract,
        canary=canary,
    )


def _json_object(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TaskBundleError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise TaskBundleError(f"{path}: must hold a JSON object")
    return data


def bundle_digest(root: Path) -> str:
    """sha256 over every path and file of a bundle (sorted), the manifest's content hash."""
    digest = hashlib.sha256()
    for path in sorted(Path(root).rglob("*")):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        digest.update(b"\n")
    return digest.hexdigest()

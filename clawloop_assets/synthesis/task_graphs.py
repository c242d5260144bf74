"""Abstract task graphs and the information-barrier audit of the domain-grounded route.

A task is synthesised in two stages. First an abstract task graph is sampled:
it has structure only -- knowledge states, the actions between them and the
abstract slots (``f1``, ``f2``, ...) those actions consume and produce -- and no
business content or tool names (every id, slot and condition is checked against
a fixed pattern, so nothing else can slip in). Then it is grounded in an
executable domain, which is not this module's business.

The model
---------
* A ``KnowledgeState`` is "what is known": ``facts`` lists the slots known on
  *every* path into it (the initial state's facts are the task's initial
  parameters). ``validate_task_graph`` re-derives them and rejects a mismatch.
* An ``Action`` needs all of its ``sources`` (AND) and leads to ``target``.
  Several actions into one state are alternatives (OR): the state is reached
  once any one of them is taken, so it knows only what every one of them
  guarantees.
* kinds: ``act`` (an ordinary call); ``branch`` (one of >= 2 alternatives out of
  a decision state, taken when its ``condition`` holds; all actions out of a
  decision state are branches); ``fail`` (a call the environment refuses; its
  target state knows the refusal); ``recover`` (removes the refusal's cause; it
  leaves the fail's target state); the retry is an ``act`` with
  ``retry_of`` = the fail's id, downstream of the recover, consuming at least
  what the fail consumed -- the same abstract call, now succeeding.
* The gold path for a choice of one branch per decision state is the
  topological order of the actions taken that breaks ties by declaration order
  (so it is deterministic and the sampler controls the step distances).

The four structural features (``graph_features`` finds them from the structure,
never from ``TaskGraph.features``; a feature counts only if it is present on
*every* gold path, i.e. for every combination of branch choices, so a grounded
task shows it whichever branch its data selects):

* long_range_dependency: on the gold path, a slot produced by the action at
  position i is first consumed again (no action between consuming it) by the
  action at position j with j - i >= 3. Initial parameters are not produced by
  an action and do not count.
* branching: the gold path takes a branch out of a decision state that has >= 2
  branch alternatives whose conditions read only slots known in that state
  (produced earlier or given as initial parameters).
* convergence: the gold path takes an action with >= 2 distinct source states,
  i.e. it needs facts from two independent sub-paths.
* error_recovery: the gold path takes a fail action F, later a recover action
  leaving F's target state, later the act with ``retry_of == F``.

Information barrier: the instruction is written apart from the gold trajectory.
``barrier_violations`` checks that it names no gold tool, gives no tool
sequence, contains no intermediate value and uses no step-ordering words.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Sequence

FEATURES = ("long_range_dependency", "branching", "convergence", "error_recovery")
ROLES = ("initial", "intermediate", "goal")
KINDS = ("act", "branch", "fail", "recover")

# Ids and slots are a fixed letter plus a number: the abstract graph can then
# carry no business word or tool name by construction.
_STATE_ID = re.compile(r"^s\d+$")
_ACTION_ID = re.compile(r"^a\d+$")
_SLOT = re.compile(r"^f\d+$")
# A branch condition compares a slot with a threshold, a category or another slot.
_CONDITION = re.compile(r"^f\d+ (==|!=|<=|>=|<|>) (threshold|'[A-Z]'|f\d+)$")


class TaskGraphError(ValueError):
    """A task graph is malformed; the message names the state, action or slot."""


@dataclass(frozen=True)
class KnowledgeState:
    state_id: str
    role: str  # "initial" | "intermediate" | "goal"
    facts: tuple[str, ...]  # slots known on every path into this state


@dataclass(frozen=True)
class Action:
    action_id: str
    sources: tuple[str, ...]  # all needed (2+ = convergence)
    target: str
    kind: str  # "act" | "branch" | "fail" | "recover"
    consumes: tuple[str, ...]
    produces: tuple[str, ...]
    condition: str | None = None  # branch only
    retry_of: str | None = None  # on the act that retries a fail: the fail's id


@dataclass(frozen=True)
class TaskGraph:
    states: tuple[KnowledgeState, ...]
    actions: tuple[Action, ...]
    features: frozenset[str]  # as recorded; validate_task_graph checks they are really there

    def gold_path(self, branch_choice: dict[str, int] | None = None) -> list[Action]:
        """The actions taken, in order, choosing alternative ``branch_choice[decision state]`` (default 0)."""
        alternatives = _alternatives(self)
        choice = dict(branch_choice or {})
        for state_id, index in choice.items():
            if state_id not in alternatives or not 0 <= index < len(alternatives[state_id]):
                raise TaskGraphError(f"branch choice {state_id}={index} names no branch alternative")
        chosen = {alts[choice.get(sid, 0)].action_id for sid, alts in alternatives.items()}
        reached = {s.state_id for s in self.states if s.role == "initial"}
        taken: list[Action] = []
        done: set[str] = set()
        while True:
            # Rescan from the start after every step: the earliest-declared ready action goes next.
            ready = next(
                (
                    a
                    for a in self.actions
                    if a.action_id not in done
                    and (a.kind != "branch" or a.action_id in chosen)
                    and all(s in reached for s in a.sources)
                ),
                None,
            )
            if ready is None:
                return taken
            taken.append(ready)
            done.add(ready.action_id)
            reached.add(ready.target)


def _alternatives(graph: TaskGraph) -> dict[str, list[Action]]:
    """Decision state -> its branch actions in declaration order."""
    out: dict[str, list[Action]] = {}
    for a in graph.actions:
        if a.kind == "branch":
            out.setdefault(a.sources[0], []).append(a)
    return out


def _all_choices(graph: TaskGraph) -> list[dict[str, int]]:
    alternatives = _alternatives(graph)
    keys = sorted(alternatives)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(range(len(alternatives[k])) for k in keys))]


def _condition_slots(condition: str) -> list[str]:
    return re.findall(r"f\d+", condition)


# ---------------------------------------------------------------------------
# features


def _has_long_range(path: list[Action]) -> bool:
    for i, action in enumerate(path):
        for slot in action.produces:
            j = next((j for j in range(i + 1, len(path)) if slot in path[j].consumes), None)
            if j is not None and j - i >= 3:
                return True
    return False


def _has_branching(graph: TaskGraph, path: list[Action]) -> bool:
    facts = {s.state_id: set(s.facts) for s in graph.states}
    alternatives = _alternatives(graph)
    for a in path:
        if a.kind != "branch" or len(alternatives.get(a.sources[0], ())) < 2:
            continue
        known = facts.get(a.sources[0], set())
        if all(set(_condition_slots(b.condition or "")) <= known for b in alternatives[a.sources[0]]):
            return True
    return False


def _has_recovery(path: list[Action]) -> bool:
    for i, fail in enumerate(path):
        if fail.kind != "fail":
            continue
        for j in range(i + 1, len(path)):
            if path[j].kind == "recover" and fail.target in path[j].sources:
                if any(a.kind == "act" and a.retry_of == fail.action_id for a in path[j + 1 :]):
                    return True
    return False


def graph_features(graph: TaskGraph) -> frozenset[str]:
    """The features present on every gold path (see the module docstring for the definitions)."""
    paths = [graph.gold_path(choice) for choice in _all_choices(graph)]
    checks = {
        "long_range_dependency": _has_long_range,
        "branching": lambda p: _has_branching(graph, p),
        "convergence": lambda p: any(len(set(a.sources)) >= 2 for a in p),
        "error_recovery": _has_recovery,
    }
    return frozenset(f for f in FEATURES if all(checks[f](p) for p in paths))


# ---------------------------------------------------------------------------
# validation


def _state_order(graph: TaskGraph) -> list[str]:
    """States in topological order; raises naming a cycle."""
    succ: dict[str, list[str]] = {s.state_id: [] for s in graph.states}
    for a in graph.actions:
        for s in a.sources:
            succ[s].append(a.target)
    order: list[str] = []
    colour: dict[str, int] = {}  # 1 = on the DFS stack, 2 = finished

    def visit(sid: str, stack: list[str]) -> None:
        colour[sid] = 1
        for nxt in succ[sid]:
            if colour.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                raise TaskGraphError(f"cycle {' -> '.join(cycle)}")
            if nxt not in colour:
                visit(nxt, stack + [nxt])
        colour[sid] = 2
        order.append(sid)

    for s in graph.states:
        if s.state_id not in colour:
            visit(s.state_id, [s.state_id])
    return order[::-1]


def _derive_facts(graph: TaskGraph, order: list[str]) -> dict[str, set[str]]:
    """Slots known on every path into each state: the intersection over its incoming alternatives."""
    roles = {s.state_id: s for s in graph.states}
    facts: dict[str, set[str]] = {}
    for sid in order:
        if roles[sid].role == "initial":
            facts[sid] = set(roles[sid].facts)
            continue
        incoming = [a for a in graph.actions if a.target == sid]
        options = [set().union(*(facts[s] for s in a.sources)) | set(a.produces) for a in incoming]
        facts[sid] = set.intersection(*options) if options else set()
    return facts


def _reachable(graph: TaskGraph, start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        sid = todo.pop()
        for a in graph.actions:
            if sid in a.sources and a.target not in seen:
                seen.add(a.target)
                todo.append(a.target)
    return seen


def _check_pattern(value: str, pattern: re.Pattern[str], what: str) -> None:
    if not isinstance(value, str) or not pattern.match(value):
        raise TaskGraphError(f"{what} {value!r} does not match {pattern.pattern} (abstract ids/slots only)")


def validate_task_graph(graph: TaskGraph) -> None:
    """Raise TaskGraphError with the first problem found; return None for a valid graph."""
    states: dict[str, KnowledgeState] = {}
    for s in graph.states:
        _check_pattern(s.state_id, _STATE_ID, "state id")
        if s.state_id in states:
            raise TaskGraphError(f"duplicate state id {s.state_id}")
        if s.role not in ROLES:
            raise TaskGraphError(f"state {s.state_id} has role {s.role!r}, not one of {ROLES}")
        for f in s.facts:
            _check_pattern(f, _SLOT, f"fact of state {s.state_id}")
        states[s.state_id] = s
    actions: dict[str, Action] = {}
    for a in graph.actions:
        _check_pattern(a.action_id, _ACTION_ID, "action id")
        if a.action_id in actions:
            raise TaskGraphError(f"duplicate action id {a.action_id}")
        if a.kind not in KINDS:
            raise TaskGraphError(f"action {a.action_id} has kind {a.kind!r}, not one of {KINDS}")
        if not a.sources or any(s not in states for s in (*a.sources, a.target)):
            raise TaskGraphError(f"action {a.action_id} names an unknown or no source/target state")
        for slot in (*a.consumes, *a.produces):
            _check_pattern(slot, _SLOT, f"slot of action {a.action_id}")
        if a.kind == "branch":
            if a.condition is None or not _CONDITION.match(a.condition):
                raise TaskGraphError(f"branch {a.action_id} condition {a.condition!r} does not match {_CONDITION.pattern}")
            if len(a.sources) != 1:
                raise TaskGraphError(f"branch {a.action_id} must leave exactly one decision state")
        elif a.condition is not None:
            raise TaskGraphError(f"{a.kind} action {a.action_id} has a condition; only branches do")
        if a.retry_of is not None and a.kind != "act":
            raise TaskGraphError(f"{a.kind} action {a.action_id} has retry_of; only the retrying act does")
        actions[a.action_id] = a
    if unknown := set(graph.features) - set(FEATURES):
        raise TaskGraphError(f"unknown features {sorted(unknown)}")

    for role in ("initial", "goal"):
        found = [s.state_id for s in graph.states if s.role == role]
        if len(found) != 1:
            raise TaskGraphError(f"need exactly one {role} state, found {found}")
    initial = next(s.state_id for s in graph.states if s.role == "initial")
    goal = next(s.state_id for s in graph.states if s.role == "goal")
    if any(a.target == initial for a in graph.actions):
        raise TaskGraphError(f"initial state {initial} has an incoming action")
    if any(goal in a.sources for a in graph.actions):
        raise TaskGraphError(f"goal state {goal} has an outgoing action")
    order = _state_order(graph)

    # Branches: >= 2 alternatives with distinct conditions, and nothing else leaves a decision state
    # (an unconditional action there would be taken whatever the condition says).
    for sid, alts in _alternatives(graph).items():
        if len(alts) < 2:
            raise TaskGraphError(f"decision state {sid} has a lone branch {alts[0].action_id} (needs >= 2 alternatives)")
        conditions = [a.condition for a in alts]
        if len(set(conditions)) != len(conditions):
            raise TaskGraphError(f"decision state {sid} repeats a branch condition: {conditions}")
        if mixed := [a.action_id for a in graph.actions if sid in a.sources and a.kind != "branch"]:
            raise TaskGraphError(f"decision state {sid} mixes branch and non-branch actions {mixed}")

    # Error recovery: fail -> recover out of the refusal state -> the retry downstream of the recovery.
    for a in graph.actions:
        if a.retry_of is not None and actions.get(a.retry_of, a).kind != "fail":
            raise TaskGraphError(f"act {a.action_id} retries {a.retry_of}, which is not a fail action")
        if a.kind == "recover" and not any(f.kind == "fail" and f.target in a.sources for f in graph.actions):
            raise TaskGraphError(f"recover action {a.action_id} does not leave the state of a fail action")
    for fail in (a for a in graph.actions if a.kind == "fail"):
        recovers = [r for r in graph.actions if r.kind == "recover" and fail.target in r.sources]
        if not recovers:
            raise TaskGraphError(f"fail action {fail.action_id} has no recover action out of its refusal state {fail.target}")
        after = set().union(*(_reachable(graph, r.target) for r in recovers))
        retries = [
            a
            for a in graph.actions
            if a.retry_of == fail.action_id and set(a.sources) & after and set(fail.consumes) <= set(a.consumes)
        ]
        if not retries:
            raise TaskGraphError(
                f"fail action {fail.action_id} is never retried after its recovery "
                f"(an act with retry_of={fail.action_id!r} downstream, consuming {list(fail.consumes)})"
            )

    facts = _derive_facts(graph, order)
    for a in graph.actions:
        known = set().union(*(facts[s] for s in a.sources))
        needed = list(a.consumes) + _condition_slots(a.condition or "")
        if missing := [slot for slot in needed if slot not in known]:
            raise TaskGraphError(
                f"action {a.action_id} consumes {missing} before they are produced on every path "
                f"(known at {list(a.sources)}: {sorted(known)})"
            )
    for s in graph.states:
        if set(s.facts) != facts[s.state_id]:
            raise TaskGraphError(
                f"state {s.state_id} declares facts {sorted(s.facts)}, but every path into it knows {sorted(facts[s.state_id])}"
            )

    taken: set[str] = set()
    for choice in _all_choices(graph):
        path = graph.gold_path(choice)
        if goal not in {a.target for a in path}:
            raise TaskGraphError(f"the gold path for branch choice {choice} never reaches the goal state {goal}")
        taken |= {a.action_id for a in path}
    if unused := [a.action_id for a in graph.actions if a.action_id not in taken]:
        raise TaskGraphError(f"actions {unused} are on no gold path")
    if missing := set(graph.features) - graph_features(graph):
        raise TaskGraphError(f"graph records features {sorted(missing)} it does not have structurally")


# ---------------------------------------------------------------------------
# sampling

# Gold-path steps of each building block; the sampler strings blocks along a trunk whose current
# slot each block consumes (distance 1), so only the deliberate long-range pair is ever >= 3 apart.
_STEPS = {"plain": 1, "branching": 1, "convergence": 3, "error_recovery": 3}


def sample_task_graph(rng: random.Random, features: Iterable[str], length: int = 4) -> TaskGraph:
    """A valid graph with (at least) the requested features and about ``length`` gold steps (more if the features need them)."""
    wanted = frozenset(features)
    if unknown := wanted - set(FEATURES):
        raise TaskGraphError(f"unknown features {sorted(unknown)}; known: {FEATURES}")
    long_range = "long_range_dependency" in wanted
    blocks = [f for f in FEATURES if f in wanted and f != "long_range_dependency"]
    fixed = sum(_STEPS[b] for b in blocks) + (2 if long_range else 0)
    blocks += ["plain"] * max(0, length - fixed, 0 if (blocks or long_range) else 1)
    if long_range:
        # Producer and consumer need >= 2 steps between them (distance >= 3).
        while sum(_STEPS[b] for b in blocks) < 2:
            blocks.append("plain")
    rng.shuffle(blocks)
    if long_range:
        spans = [
            (i, j)
            for i in range(len(blocks) + 1)
            for j in range(i, len(blocks) + 1)
            if sum(_STEPS[b] for b in blocks[i:j]) >= 2
        ]
        i, j = rng.choice(spans)
        blocks = blocks[:i] + ["lrd_from"] + blocks[i:j] + ["lrd_to"] + blocks[j:]

    slot_ids, state_ids, action_ids = itertools.count(1), itertools.count(1), itertools.count(1)
    new_slot = lambda: f"f{next(slot_ids)}"  # noqa: E731
    new_state = lambda: f"s{next(state_ids)}"  # noqa: E731
    initial = [new_slot() for _ in range(rng.randint(1, 2))]
    actions: list[Action] = []

    def act(sources, kind, consumes, produces, condition=None, retry_of=None, target=None) -> Action:
        action = Action(
            f"a{next(action_ids)}", tuple(sources), target or new_state(), kind,
            tuple(dict.fromkeys(consumes)), tuple(produces), condition, retry_of,
        )
        actions.append(action)
        return action

    current, state, side = initial[0], "s0", None
    for block in blocks:
        if block in ("plain", "lrd_from", "lrd_to"):
            out = new_slot()
            consumes, produces = [current], [out]
            if block == "lrd_from":
                side = new_slot()
                produces.append(side)
            elif block == "lrd_to":
                consumes.append(side)
            state = act([state], "act", consumes, produces).target
        elif block == "branching":
            out, target = new_slot(), new_state()
            for condition in _sample_conditions(rng, current, initial):
                act([state], "branch", _condition_slots(condition), [out], condition=condition, target=target)
            state = target
        elif block == "convergence":
            left, right, out = new_slot(), new_slot(), new_slot()
            a = act([state], "act", [current], [left])
            b = act([state], "act", [rng.choice(initial + [current])], [right])
            state = act([a.target, b.target], "act", [left, right], [out]).target
        else:  # error_recovery: the refusal is read by the recovery; the retry needs the fix
            refusal, fix, out = new_slot(), new_slot(), new_slot()
            fail = act([state], "fail", [current], [refusal])
            recover = act([fail.target], "recover", [refusal], [fix])
            state = act([recover.target], "act", [current, fix], [out], retry_of=fail.action_id).target
        current = out

    state_list = ["s0"] + [f"s{n}" for n in range(1, next(state_ids))]
    draft = TaskGraph(
        tuple(KnowledgeState(s, "initial" if s == "s0" else "goal" if s == state else "intermediate", tuple(initial))
              for s in state_list),
        tuple(actions),
        frozenset(),
    )
    facts = _derive_facts(draft, _state_order(draft))
    graph = replace(
        draft,
        states=tuple(replace(s, facts=tuple(sorted(facts[s.state_id], key=lambda f: int(f[1:])))) for s in draft.states),
    )
    graph = replace(graph, features=graph_features(graph))
    validate_task_graph(graph)
    if not wanted <= graph.features:  # a sampler bug, not bad input
        raise AssertionError(f"sampled graph lacks {sorted(wanted - graph.features)}")
    return graph


def _sample_conditions(rng: random.Random, slot: str, initial: list[str]) -> list[str]:
    """Distinct, mutually exclusive and exhaustive conditions over ``slot``."""
    other = rng.choice(initial)
    options = [
        [f"{slot} >= threshold", f"{slot} < threshold"],
        [f"{slot} == 'A'", f"{slot} != 'A'"],
        [f"{slot} == 'A'", f"{slot} == 'B'", f"{slot} == 'C'"],  # a three-valued category
    ]
    if other != slot:
        options.append([f"{slot} >= {other}", f"{slot} < {other}"])
    return rng.choice(options)


# ---------------------------------------------------------------------------
# storage


def to_dict(graph: TaskGraph) -> dict[str, Any]:
    return {
        "states": [{"state_id": s.state_id, "role": s.role, "facts": list(s.facts)} for s in graph.states],
        "actions": [
            {
                "action_id": a.action_id,
                "sources": list(a.sources),
                "target": a.target,
                "kind": a.kind,
                "consumes": list(a.consumes),
                "produces": list(a.produces),
                "condition": a.condition,
                "retry_of": a.retry_of,
            }
            for a in graph.actions
        ],
        "features": sorted(graph.features),
    }


def from_dict(d: dict[str, Any]) -> TaskGraph:
    """The inverse of to_dict. Does not validate: call validate_task_graph on stored graphs you did not write."""
    return TaskGraph(
        states=tuple(KnowledgeState(s["state_id"], s["role"], tuple(s["facts"])) for s in d["states"]),
        actions=tuple(
            Action(
                a["action_id"], tuple(a["sources"]), a["target"], a["kind"], tuple(a["consumes"]),
                tuple(a["produces"]), a.get("condition"), a.get("retry_of"),
            )
            for a in d["actions"]
        ),
        features=frozenset(d.get("features", ())),
    )


# ---------------------------------------------------------------------------
# information barrier


class BarrierViolation(ValueError):
    """The instruction leaks the gold trajectory; the message lists every reason."""


@dataclass(frozen=True)
class GoldStep:
    tool: str
    arguments: dict[str, object]
    result: dict[str, object] | None
    refused: bool = False


# Words that sequence the agent's steps. Deliberately few: each is one an instruction has no other
# reason to use when it states only the starting parameters and the goal. "then" also catches
# spelled-out branch rules ("if ..., then ..."). Left out on purpose: "before"/"after"/"if"/"when",
# which legitimately describe the goal or its deadline ("before Friday").
_ORDER_WORDS = re.compile(r"\b(first|then|after that|next|finally|step\s*\d+)\b", re.IGNORECASE)
_NUMERIC = re.compile(r"^-?\d+(\.\d+)?$")


def _leaves(value: object, label: str) -> Iterator[tuple[str, object]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, f"{label}.{k}" if label else str(k))
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            yield from _leaves(v, label)
    else:
        yield label, value


def _key(value: object) -> tuple[str, object] | None:
    """Normalised identity of a value, or None when it is too trivial to count as a leak."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return ("num", float(value)) if sum(c.isdigit() for c in str(value)) >= 2 else None
    text = str(value).strip()
    if _NUMERIC.match(text):
        return ("num", float(text)) if sum(c.isdigit() for c in text) >= 2 else None
    return ("str", text.casefold()) if len(text) >= 3 else None


def _value_pattern(value: object) -> re.Pattern[str]:
    key = _key(value)
    if key is not None and key[0] == "num":
        number = float(key[1])
        forms = {str(value).strip(), f"{number:.2f}"}
        if number.is_integer():
            forms.add(str(int(number)))
        # Whole numbers only: "12" must not hit "2012", "12.5" or "1,120".
        alts = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
        return re.compile(rf"(?<!\d)(?<!\d[.,])(?:{alts})(?!\d|[.,]\d)")
    words = r"\s+".join(re.escape(w) for w in str(value).strip().split())
    return re.compile(rf"(?<![A-Za-z0-9_])(?:{words})(?![A-Za-z0-9_])", re.IGNORECASE)


def _tool_pattern(tool: str) -> re.Pattern[str]:
    # reserve_stock also as "reserve stock", "reserve-stock", "Reserve  Stock".
    name = r"[\s_-]+".join(re.escape(p) for p in re.split(r"[_\s-]+", tool) if p)
    return re.compile(rf"(?<![A-Za-z0-9])(?:{name})(?![A-Za-z0-9])", re.IGNORECASE)


def barrier_violations(
    instruction: str,
    gold: Sequence[GoldStep],
    initial_parameters: dict[str, object],
    goal_values: dict[str, object] | None = None,
) -> list[str]:
    """Why ``instruction`` leaks the gold trajectory (empty list = it passes)."""
    reasons: list[str] = []

    found: dict[str, int] = {}  # tool -> first position in the instruction
    for tool in dict.fromkeys(step.tool for step in gold):
        if m := _tool_pattern(tool).search(instruction):
            found[tool] = m.start()
            reasons.append(f"names gold tool {tool!r} as {m.group(0)!r}")
    if len(found) >= 2:
        reasons.append(f"gives the tool sequence {' -> '.join(sorted(found, key=found.get))}")

    # Values the instruction may state: blank them out first, so an allowed "ORD-1001" cannot
    # make an intermediate 1001 look leaked.
    allowed = [v for _, v in _leaves({"i": initial_parameters, "g": goal_values or {}}, "")]
    allowed_keys = {_key(v) for v in allowed} - {None}
    masked = instruction
    for value in allowed:
        if _key(value) is not None:
            masked = _value_pattern(value).sub(lambda m: "\0" * len(m.group(0)), masked)
    seen: set[tuple[str, object]] = set()
    for n, step in enumerate(gold, 1):
        for part, payload in (("argument", step.arguments), ("result", step.result or {})):
            for label, value in _leaves(payload, ""):
                key = _key(value)
                if key is None or key in allowed_keys or key in seen:
                    continue
                if _value_pattern(value).search(masked):
                    seen.add(key)
                    reasons.append(f"contains intermediate value {value!r} ({part} {label!r} of gold step {n}, {step.tool})")

    for word in dict.fromkeys(m.group(0).lower() for m in _ORDER_WORDS.finditer(instruction)):
        reasons.append(f"states procedure/order with {word!r}")
    return reasons


def check_barrier(
    instruction: str,
    gold: Sequence[GoldStep],
    initial_parameters: dict[str, object],
    goal_values: dict[str, object] | None = None,
) -> None:
    """Raise BarrierViolation listing every reason ``barrier_violations`` finds."""
    if reasons := barrier_violations(instruction, gold, initial_parameters, goal_values):
        raise BarrierViolation("information barrier violated: " + "; ".join(reasons))

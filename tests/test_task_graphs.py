"""Abstract task graphs (sampling, structural features, validation, storage) and the
information-barrier audit of the domain-grounded synthesis route."""

from __future__ import annotations

import json
import random

import pytest

from clawloop_assets.synthesis.task_graphs import (
    FEATURES,
    Action,
    BarrierViolation,
    GoldStep,
    KnowledgeState,
    TaskGraph,
    TaskGraphError,
    barrier_violations,
    check_barrier,
    from_dict,
    graph_features,
    sample_task_graph,
    to_dict,
    validate_task_graph,
)

SEEDS = range(12)


@pytest.mark.parametrize("feature", FEATURES)
def test_single_feature_is_detected_exactly(feature):
    for seed in SEEDS:
        graph = sample_task_graph(random.Random(seed), [feature])
        validate_task_graph(graph)
        assert graph_features(graph) == {feature}, (seed, to_dict(graph))
        assert graph.features == {feature}


def test_no_features_and_all_features():
    for seed in SEEDS:
        plain = sample_task_graph(random.Random(seed), [], length=5)
        validate_task_graph(plain)
        assert graph_features(plain) == frozenset()
        assert len(plain.gold_path()) == 5
        every = sample_task_graph(random.Random(seed), FEATURES)
        validate_task_graph(every)
        assert graph_features(every) >= set(FEATURES)


@pytest.mark.parametrize("pair", [("branching", "error_recovery"), ("long_range_dependency", "convergence")])
def test_feature_pairs(pair):
    for seed in SEEDS:
        assert graph_features(sample_task_graph(random.Random(seed), pair, length=6)) >= set(pair)


def test_sampling_is_deterministic_and_round_trips():
    for seed in SEEDS:
        a = sample_task_graph(random.Random(seed), ["branching", "long_range_dependency"], length=6)
        b = sample_task_graph(random.Random(seed), ["branching", "long_range_dependency"], length=6)
        assert to_dict(a) == to_dict(b)
        restored = from_dict(json.loads(json.dumps(to_dict(a))))
        assert restored == a
        validate_task_graph(restored)
    assert to_dict(sample_task_graph(random.Random(0), FEATURES)) != to_dict(sample_task_graph(random.Random(1), FEATURES))


def test_unknown_feature_is_rejected():
    with pytest.raises(TaskGraphError, match="unknown features"):
        sample_task_graph(random.Random(0), ["teleportation"])


# --- hand-built graphs ------------------------------------------------------


def S(sid, role, *facts):
    return KnowledgeState(sid, role, facts)


def A(aid, sources, target, kind="act", consumes=(), produces=(), condition=None, retry_of=None):
    return Action(aid, tuple(sources), target, kind, tuple(consumes), tuple(produces), condition, retry_of)


def G(states, actions, features=()):
    return TaskGraph(tuple(states), tuple(actions), frozenset(features))


def branching_graph():
    return G(
        [S("s0", "initial", "f1"), S("s1", "intermediate", "f1", "f2"), S("s2", "goal", "f1", "f2", "f3")],
        [
            A("a1", ["s0"], "s1", consumes=["f1"], produces=["f2"]),
            A("a2", ["s1"], "s2", "branch", ["f2"], ["f3"], condition="f2 >= threshold"),
            A("a3", ["s1"], "s2", "branch", ["f2"], ["f3"], condition="f2 < threshold"),
        ],
        ["branching"],
    )


def test_hand_built_branching_graph_and_gold_path_choice():
    graph = branching_graph()
    validate_task_graph(graph)
    assert graph_features(graph) == {"branching"}
    assert [a.action_id for a in graph.gold_path()] == ["a1", "a2"]
    assert [a.action_id for a in graph.gold_path({"s1": 1})] == ["a1", "a3"]
    with pytest.raises(TaskGraphError, match="names no branch alternative"):
        graph.gold_path({"s1": 2})


def test_cycle_is_rejected():
    graph = G(
        [S("s0", "initial", "f1"), S("s1", "intermediate", "f1"), S("s2", "intermediate", "f1"), S("s3", "goal", "f1")],
        [A("a1", ["s0"], "s1"), A("a2", ["s1"], "s2"), A("a3", ["s2"], "s1"), A("a4", ["s2"], "s3")],
    )
    with pytest.raises(TaskGraphError, match="cycle s1 -> s2 -> s1"):
        validate_task_graph(graph)


def test_consumed_before_produced_is_rejected():
    graph = G(
        [S("s0", "initial", "f1"), S("s1", "intermediate", "f1", "f2"), S("s2", "goal", "f1", "f2", "f4")],
        [A("a1", ["s0"], "s1", consumes=["f1"], produces=["f2"]), A("a2", ["s1"], "s2", consumes=["f3"], produces=["f4"])],
    )
    with pytest.raises(TaskGraphError, match=r"a2 consumes \['f3'\] before"):
        validate_task_graph(graph)


def test_slot_produced_on_only_one_branch_is_not_known_after_the_join():
    graph = branching_graph()
    a2 = graph.actions[1]
    broken = G(
        [*graph.states[:2], S("s2", "intermediate", "f1", "f2"), S("s3", "goal", "f1", "f2", "f4")],
        [graph.actions[0], A("a2", ["s1"], "s2", "branch", ["f2"], ["f3"], condition=a2.condition),
         A("a3", ["s1"], "s2", "branch", ["f2"], [], condition="f2 < threshold"),
         A("a4", ["s2"], "s3", consumes=["f3"], produces=["f4"])],
    )
    with pytest.raises(TaskGraphError, match=r"a4 consumes \['f3'\] before they are produced on every path"):
        validate_task_graph(broken)


def test_lone_branch_is_rejected():
    graph = branching_graph()
    lone = G(graph.states, graph.actions[:2])
    with pytest.raises(TaskGraphError, match="lone branch a2"):
        validate_task_graph(lone)


def test_repeated_condition_is_rejected():
    graph = branching_graph()
    same = G(graph.states, [*graph.actions[:2], A("a3", ["s1"], "s2", "branch", ["f2"], ["f3"], "f2 >= threshold")])
    with pytest.raises(TaskGraphError, match="repeats a branch condition"):
        validate_task_graph(same)


def test_fail_without_recover_is_rejected():
    graph = G(
        [S("s0", "initial", "f1"), S("s1", "intermediate", "f1", "f2"), S("s2", "goal", "f1", "f2", "f3")],
        [A("a1", ["s0"], "s1", "fail", ["f1"], ["f2"]), A("a2", ["s1"], "s2", consumes=["f1"], produces=["f3"])],
    )
    with pytest.raises(TaskGraphError, match="fail action a1 has no recover action"):
        validate_task_graph(graph)


def test_fail_recovered_but_never_retried_is_rejected():
    graph = G(
        [S("s0", "initial", "f1"), S("s1", "intermediate", "f1", "f2"), S("s2", "intermediate", "f1", "f2", "f3"),
         S("s3", "goal", "f1", "f2", "f3", "f4")],
        [A("a1", ["s0"], "s1", "fail", ["f1"], ["f2"]), A("a2", ["s1"], "s2", "recover", ["f2"], ["f3"]),
         A("a3", ["s2"], "s3", consumes=["f3"], produces=["f4"])],
    )
    with pytest.raises(TaskGraphError, match="a1 is never retried"):
        validate_task_graph(graph)
    retried = G(graph.states, [*graph.actions[:2], A("a3", ["s2"], "s3", consumes=["f1", "f3"], produces=["f4"], retry_of="a1")],
                ["error_recovery"])
    validate_task_graph(retried)
    assert graph_features(retried) == {"error_recovery"}


def test_business_words_are_rejected():
    graph = branching_graph()
    named = G(graph.states, [A("reserve_stock", ["s0"], "s1", consumes=["f1"], produces=["f2"]), *graph.actions[1:]])
    with pytest.raises(TaskGraphError, match="action id 'reserve_stock'"):
        validate_task_graph(named)
    slot = G(graph.states, [A("a1", ["s0"], "s1", consumes=["f1"], produces=["order_total"]), *graph.actions[1:]])
    with pytest.raises(TaskGraphError, match="order_total"):
        validate_task_graph(slot)
    condition = G(graph.states, [*graph.actions[:2], A("a3", ["s1"], "s2", "branch", ["f2"], ["f3"], "f2 == 'gold customer'")])
    with pytest.raises(TaskGraphError, match="condition"):
        validate_task_graph(condition)


def test_recorded_feature_must_be_present():
    graph = branching_graph()
    with pytest.raises(TaskGraphError, match="convergence"):
        validate_task_graph(G(graph.states, graph.actions, ["branching", "convergence"]))


# --- information barrier ------------------------------------------------------

GOLD = [
    GoldStep("get_order", {"order_id": "ORD-1001"}, {"sku": "SKU-777", "quantity": 12, "customer_id": "C-4821"}),
    GoldStep("reserve_stock", {"order_id": "ORD-1001", "sku": "SKU-777", "quantity": 12}, None, refused=True),
    GoldStep("restock_item", {"sku": "SKU-777", "quantity": 40}, {"remaining": 52}),
    GoldStep("reserve_stock", {"order_id": "ORD-1001", "sku": "SKU-777", "quantity": 12}, {"reservation_id": "RSV-3090"}),
    GoldStep("confirm_order", {"order_id": "ORD-1001"}, {"status": "confirmed"}),
]
INITIAL = {"order_id": "ORD-1001"}
GOAL = {"status": "confirmed"}
CLEAN = "Order ORD-1001 is waiting. Make sure it ends up confirmed, with its items set aside for the customer."


def test_clean_instruction_passes():
    assert barrier_violations(CLEAN, GOLD, INITIAL, GOAL) == []
    check_barrier(CLEAN, GOLD, INITIAL, GOAL)


def test_tool_name_leak_including_spaced_spelling():
    reasons = barrier_violations(CLEAN + " Use reserve_stock.", GOLD, INITIAL, GOAL)
    assert any("reserve_stock" in r for r in reasons)
    for spelling in ("Reserve stock for it.", "reserve-stock it.", "RESERVE  STOCK"):
        reasons = barrier_violations(f"{CLEAN} {spelling}", GOLD, INITIAL, GOAL)
        assert any("names gold tool 'reserve_stock'" in r for r in reasons), spelling
    # Whole words only: "reserve stockpiles" is not the tool.
    assert barrier_violations(CLEAN + " Do not reserve stockpiles.", GOLD, INITIAL, GOAL) == []


def test_tool_sequence_leak():
    reasons = barrier_violations("Confirm order ORD-1001 once you can reserve stock.", GOLD, INITIAL, GOAL)
    assert "gives the tool sequence confirm_order -> reserve_stock" in reasons


def test_intermediate_value_leak():
    reasons = barrier_violations(CLEAN + " It needs SKU-777.", GOLD, INITIAL, GOAL)
    assert reasons == ["contains intermediate value 'SKU-777' (result 'sku' of gold step 1, get_order)"]
    reasons = barrier_violations(CLEAN + " Expect 52 units left.", GOLD, INITIAL, GOAL)
    assert any("intermediate value 52" in r for r in reasons)


def test_numbers_match_as_whole_numbers():
    assert barrier_violations(CLEAN + " The shop opened in 2012; 1.12 and 120 are unrelated.", GOLD, INITIAL, GOAL) == []
    assert barrier_violations(CLEAN + " Quantity: 12.", GOLD, INITIAL, GOAL) != []
    # An allowed value containing digits does not make its digits an intermediate value.
    gold = [GoldStep("lookup", {"code": "ORD-1001"}, {"line": 1001})]
    assert barrier_violations("Handle ORD-1001.", gold, {"code": "ORD-1001"}) == []
    assert barrier_violations("Handle ORD-1001, line 1001.", gold, {"code": "ORD-1001"}) != []


def test_trivial_values_are_ignored():
    gold = [GoldStep("lookup", {"flag": True, "n": 7, "tag": "ok"}, None)]
    assert barrier_violations("Set the flag for 7 ok items.", gold, {}) == []


def test_order_words():
    reasons = barrier_violations(CLEAN + " First look it up, then fix it. Step 3: done.", GOLD, INITIAL, GOAL)
    assert reasons == [
        "states procedure/order with 'first'",
        "states procedure/order with 'then'",
        "states procedure/order with 'step 3'",
    ]


def test_check_barrier_raises_with_all_reasons():
    with pytest.raises(BarrierViolation) as err:
        check_barrier("Then call get_order and restock item SKU-777.", GOLD, INITIAL, GOAL)
    message = str(err.value)
    for part in ("get_order", "restock_item", "SKU-777", "'then'", "tool sequence"):
        assert part in message

import ast
import json
import shutil
import sqlite3
import subprocess
import sys

import pytest

from clawloop_assets.synthesis.domain_graph import (
    AFFINITY_WEIGHTS,
    DomainGraph,
    DomainGraphError,
    Param,
    Skill,
    ToolNode,
    affinity,
    apply_overrides,
    cluster_skills,
    extract_graph,
    graph_rows,
    load_overrides,
    materialize_skill,
    skill_rows,
    sql_tables,
)
from clawloop_assets.synthesis.executable_domains import TOOL_CLI

# A small inventory domain written for these tests (not one of the built-in domains).
INVENTORY = '''"""A small inventory domain: products, stock, orders."""

from tool_cli import ToolError

_LEVEL = "SELECT quantity FROM stock WHERE sku = ?"


def _stock_level(db, sku):
    row = db.execute(_LEVEL, (sku,)).fetchone()
    if row is None:
        raise ToolError("unknown sku %s" % sku)
    return row[0]


def add_product(db, sku: str, name: str, price: float) -> dict:
    """Register a product with no stock."""
    db.execute("INSERT INTO products (sku, name, price) VALUES (?, ?, ?)", (sku, name, price))
    db.execute("INSERT OR REPLACE INTO stock (sku, quantity) VALUES (?, 0)", (sku,))
    return {"sku": sku, "name": name}


def receive_stock(db, sku: str, quantity: int) -> dict:
    """Add received units to a product's stock."""
    level = _stock_level(db, sku)
    db.execute("UPDATE stock SET quantity = quantity + ? WHERE sku = ?", (quantity, sku))
    return {"sku": sku, "quantity": level + quantity}


def stock_report(db, min_quantity: int = 0) -> dict:
    """Every product with at least min_quantity units in stock."""
    rows = db.execute("SELECT p.sku, p.name, s.quantity FROM products p "
                      "JOIN stock s ON s.sku = p.sku WHERE s.quantity >= ? ORDER BY p.sku", (min_quantity,))
    return {"items": [{"sku": r[0], "name": r[1], "quantity": r[2]} for r in rows]}


def create_order(db, customer: str, rush: bool = False) -> dict:
    """Open an order for a customer."""
    cursor = db.execute("INSERT INTO orders (customer, rush, status) VALUES (?, ?, 'open')", (customer, rush))
    return {"order_id": cursor.lastrowid, "status": "open", "rush": rush}


def add_order_line(db, order_id: int, sku: str, quantity: int) -> dict:
    """Reserve stock for an order line."""
    if _stock_level(db, sku) < quantity:
        raise ToolError(f"not enough units from {sku} for this line")
    db.execute("UPDATE stock SET quantity = quantity - ? WHERE sku = ?", (quantity, sku))
    db.execute("INSERT INTO order_lines (order_id, sku, quantity) VALUES (?, ?, ?)", (order_id, sku, quantity))
    result = {"order_id": order_id}
    result["line_count"] = db.execute("SELECT COUNT(*) FROM order_lines WHERE order_id = ?", (order_id,)).fetchone()[0]
    return result


def cancel_order(db, order_id: int) -> dict:
    """Cancel an order and put its reserved units back in stock."""
    lines = db.execute("SELECT sku, quantity FROM order_lines WHERE order_id = ?", (order_id,)).fetchall()
    for sku, quantity in lines:
        db.execute("UPDATE stock SET quantity = quantity + ? WHERE sku = ?", (quantity, sku))
    db.execute("DELETE FROM order_lines WHERE order_id = ?", (order_id,))
    db.execute("UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (order_id,))
    return {"order_id": order_id, "status": "cancelled"}


if __name__ == "__main__":
    from tool_cli import main
    main(globals())
'''

SCHEMA = """
CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT, price REAL);
CREATE TABLE stock (sku TEXT PRIMARY KEY REFERENCES products(sku), quantity INTEGER NOT NULL);
CREATE TABLE orders (order_id INTEGER PRIMARY KEY, customer TEXT, rush INTEGER, status TEXT);
CREATE TABLE order_lines (order_id INTEGER REFERENCES orders(order_id), sku TEXT, quantity INTEGER);
INSERT INTO products VALUES ('A-1', 'anvil', 9.5);
INSERT INTO stock VALUES ('A-1', 5);
"""

EXPECTED = {  # name: (params, returns, reads, writes, refuses)
    "add_product": ((Param("sku", "str", True), Param("name", "str", True), Param("price", "float", True)),
                    ("name", "sku"), (), ("products", "stock"), False),
    # reads `stock` through the private helper and the module-level SQL constant it uses; refuses through it too
    "receive_stock": ((Param("sku", "str", True), Param("quantity", "int", True)),
                      ("quantity", "sku"), ("stock",), ("stock",), True),
    "stock_report": ((Param("min_quantity", "int", False),), ("items", "name", "quantity", "sku"),
                     ("products", "stock"), (), False),
    "create_order": ((Param("customer", "str", True), Param("rush", "bool", False)),
                     ("order_id", "rush", "status"), (), ("orders",), False),
    "add_order_line": ((Param("order_id", "int", True), Param("sku", "str", True), Param("quantity", "int", True)),
                       ("line_count", "order_id"), ("order_lines", "stock"), ("order_lines", "stock"), True),
    "cancel_order": ((Param("order_id", "int", True),), ("order_id", "status"), ("order_lines",),
                     ("order_lines", "orders", "stock"), False),
}


def inventory():
    return extract_graph("inventory", INVENTORY)


def test_graph_is_extracted_without_executing_the_module(tmp_path):
    sentinel = tmp_path / "executed"
    poisoned = INVENTORY.replace("from tool_cli import ToolError\n", "from tool_cli import ToolError\n"
                                 f"open({str(sentinel)!r}, 'w').close()\nraise SystemExit('tools.py was run')\n", 1)
    graph = extract_graph("inventory", poisoned)
    assert not sentinel.exists()
    assert [t.name for t in graph.tools] == list(EXPECTED)  # source order; helpers and `main` are not tools
    for name, (params, returns, reads, writes, refuses) in EXPECTED.items():
        assert graph.tool(name) == ToolNode(name, graph.tool(name).description, params, returns, reads, writes, refuses)
    assert graph.tool("add_product").description == "Register a product with no stock."
    assert graph.producers("order_id") == ["create_order", "add_order_line", "cancel_order"]
    assert graph.consumers("order_id") == ["add_order_line", "cancel_order"]
    assert ("writes", "cancel_order", "orders") in graph.edges()
    assert ("consumes", "stock_report", "min_quantity") in graph.edges()
    rows = graph_rows(graph)
    assert len(rows) == len(graph.edges())
    assert {"domain_id": "inventory", "kind": "reads", "tool": "stock_report", "node": "products"} in rows
    with pytest.raises(DomainGraphError, match="no tool 'nope'"):
        graph.tool("nope")


@pytest.mark.parametrize("sql, reads, writes", [
    ("INSERT INTO t (a) SELECT a FROM u", {"u"}, {"t"}),
    ("DELETE FROM t WHERE id IN (SELECT id FROM u)", {"u"}, {"t"}),
    ("SELECT * FROM a x, b y LEFT JOIN c ON c.id = x.id", {"a", "b", "c"}, set()),
    ("INSERT INTO t VALUES (?) ON CONFLICT(k) DO UPDATE SET v = 1", set(), {"t"}),
    ("WITH recent AS (SELECT * FROM Orders) SELECT * FROM recent", {"orders"}, set()),
    ("SELECT value FROM json_each(?)", set(), set()),
    ("replace into \"stock\" values (?)", set(), {"stock"}),
])
def test_sql_tables(sql, reads, writes):
    assert sql_tables(sql) == (reads, writes)


@pytest.mark.parametrize("source, where", [
    ("def broken(db:\n    pass\n", "tools.py:1: syntax error"),
    ("def ok(db, a: str):\n    return {}\n\n\ndef bad(conn, a: str):\n    return {}\n", "tools.py:5: tool 'bad'"),
    ("def nothing():\n    return {}\n", "tools.py:1: tool 'nothing'"),
    ("def f(db,\n      items: list):\n    return {}\n", "tools.py:2: tool 'f': parameter 'items' is annotated with list"),
    ("def f(db, n):\n    return {}\n", "tools.py:1: tool 'f': parameter 'n' is annotated with no annotation"),
    ("def f(db, *rest: str):\n    return {}\n", "tools.py:1: tool 'f'"),
])
def test_malformed_tools_are_rejected_with_file_tool_and_line(source, where):
    with pytest.raises(DomainGraphError) as info:
        extract_graph("d", source)
    assert str(info.value).startswith(where)


def tool(name, params=(), returns=(), tables=()):
    return ToolNode(name, "", tuple(Param(p, "str", True) for p in params), tuple(sorted(returns)),
                    tuple(sorted(tables)), (), False)


TWO_GROUPS = DomainGraph("helpdesk", (
    tool("open_ticket", ["title"], ["ticket_id"], ["tickets"]),
    tool("assign_ticket", ["ticket_id", "agent"], ["ticket_id", "agent"], ["tickets"]),
    tool("close_ticket", ["ticket_id"], ["ticket_id", "status"], ["tickets"]),
    tool("add_invoice", ["amount"], ["invoice_id"], ["invoices"]),
    tool("pay_invoice", ["invoice_id", "amount"], ["invoice_id", "paid"], ["invoices"]),
))


def test_affinity_weights_fields_tables_and_flows():
    aff = affinity(TWO_GROUPS)
    w = AFFINITY_WEIGHTS
    # ticket_id flows from open_ticket into close_ticket (counted once, as a flow), and both touch tickets
    assert aff[("open_ticket", "close_ticket")] == aff[("close_ticket", "open_ticket")] \
        == w["producer_consumer"] + w["shared_table"]
    # amount: a shared parameter; invoice_id flows; one shared table
    assert aff[("add_invoice", "pay_invoice")] == w["shared_field"] + w["producer_consumer"] + w["shared_table"]
    assert not any({a, b} & {"add_invoice", "pay_invoice"} and {a, b} & {"open_ticket"} for a, b in aff)


def test_two_unrelated_groups_become_two_skills_deterministically():
    skills = cluster_skills(TWO_GROUPS)
    assert [(s.skill_id, s.tools) for s in skills] == [
        ("invoice", ("add_invoice", "pay_invoice")),
        ("ticket", ("assign_ticket", "close_ticket", "open_ticket")),
    ]
    assert "add_invoice + pay_invoice" in skills[0].reason and "flow invoice_id" in skills[0].reason
    reordered = DomainGraph("helpdesk", tuple(reversed(TWO_GROUPS.tools)))
    assert cluster_skills(reordered) == skills == cluster_skills(TWO_GROUPS)


def test_producer_consumer_chain_is_one_skill():
    chain = DomainGraph("chain", (tool("step_a", ["x"], ["y"]), tool("step_b", ["y"], ["z"]),
                                  tool("step_c", ["z"], ["w"])))
    assert [s.tools for s in cluster_skills(chain)] == [("step_a", "step_b", "step_c")]


def test_max_tools_is_respected():
    flat = DomainGraph("flat", tuple(tool(f"t{i}_thing", ["key"], [], ["things"]) for i in range(6)))
    for max_tools in (1, 2, 4, 6):
        skills = cluster_skills(flat, max_tools=max_tools)
        assert max(len(s.tools) for s in skills) <= max_tools
        assert sorted(t for s in skills for t in s.tools) == sorted(t.name for t in flat.tools)
        assert len({s.skill_id for s in skills}) == len(skills)
    assert len(cluster_skills(flat, max_tools=6)) == 1
    assert cluster_skills(flat, threshold=2.0)[0].reason.startswith("t0_thing stands alone")


def test_overrides_move_tools_and_record_the_reason(tmp_path):
    skills = cluster_skills(TWO_GROUPS)
    overrides = [{"skill_id": "escalation", "tools": ["close_ticket"], "reason": "closing needs a supervisor"}]
    (tmp_path / "skills_override.json").write_text(json.dumps(overrides))
    assert load_overrides(tmp_path) == overrides and load_overrides(tmp_path / "elsewhere") == []
    moved, decisions = apply_overrides(skills, load_overrides(tmp_path), TWO_GROUPS)
    assert [(s.skill_id, s.tools) for s in moved] == [
        ("invoice", ("add_invoice", "pay_invoice")), ("ticket", ("assign_ticket", "open_ticket")),
        ("escalation", ("close_ticket",))]
    by_id = {d["skill_id"]: d for d in decisions}
    assert by_id["invoice"]["decision"] == "accepted_prior" and by_id["invoice"]["reason"] == skills[0].reason
    assert by_id["escalation"]["decision"] == "overridden" and by_id["escalation"]["reason"] == "closing needs a supervisor"
    assert by_id["ticket"]["decision"] == "overridden"
    assert by_id["ticket"]["reason"] == "close_ticket moved to escalation: closing needs a supervisor"
    assert skill_rows(moved, decisions)[2] == {"domain_id": "helpdesk", "skill_id": "escalation",
                                               "tools": ["close_ticket"], "decision": "overridden",
                                               "reason": "closing needs a supervisor"}
    # moving every tool of a skill away removes it
    merged, _ = apply_overrides(skills, [{"skill_id": "ticket", "tools": ["add_invoice", "pay_invoice"],
                                          "reason": "one desk handles both"}], TWO_GROUPS)
    assert [s.skill_id for s in merged] == ["ticket"] and len(merged[0].tools) == 5


@pytest.mark.parametrize("override, message", [
    ({"skill_id": "x", "tools": ["close_ticket"], "reason": "  "}, "non-empty reason"),
    ({"skill_id": "x", "tools": ["close_ticket"]}, "non-empty reason"),
    ({"skill_id": "x", "tools": ["close_tikcet"], "reason": "typo"}, "unknown tools close_tikcet"),
    ({"skill_id": "x", "tools": [], "reason": "empty"}, "non-empty list"),
    ({"skill_id": "json", "tools": ["close_ticket"], "reason": "shadows the stdlib"}, "not a module name"),
])
def test_bad_overrides_are_rejected(override, message):
    with pytest.raises(DomainGraphError, match=message):
        apply_overrides(cluster_skills(TWO_GROUPS), [override], TWO_GROUPS)


def test_bad_override_file_is_rejected(tmp_path):
    (tmp_path / "skills_override.json").write_text("{not json")
    with pytest.raises(DomainGraphError, match="skills_override.json: not valid JSON"):
        load_overrides(tmp_path)


ORDER_SKILL = Skill("order", ("add_order_line", "cancel_order", "create_order"), "orders and their lines")


def test_skill_script_and_capability_spec_come_from_code(tmp_path):
    graph = inventory()
    artifact = materialize_skill(graph, ORDER_SKILL, INVENTORY, tmp_path)
    script = artifact.script_path.read_text()
    tree = ast.parse(script)
    public = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    skill_tools = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                       and ast.unparse(n.targets[0]) == "SKILL_TOOLS")
    assert sorted(public) == sorted(ast.literal_eval(skill_tools)) == sorted(ORDER_SKILL.tools)
    spec = artifact.capability_spec
    assert spec["skill_id"] == "order" and set(spec["tools"]) == set(ORDER_SKILL.tools)
    for name in ORDER_SKILL.tools:
        params, returns, reads, writes, refuses = EXPECTED[name]
        assert spec["tools"][name] == {"description": graph.tool(name).description,
                                       "params": {p.name: {"type": p.type, "required": p.required} for p in params},
                                       "returns": list(returns), "reads": list(reads), "writes": list(writes),
                                       "refuses": refuses}
    assert spec["consumes"] == ["customer", "order_id", "quantity", "rush", "sku"]
    assert spec["produces"] == ["line_count", "order_id", "rush", "status"]
    assert spec["reads"] == ["order_lines", "stock"] and spec["writes"] == ["order_lines", "orders", "stock"]
    # the tables and fields are those of the wrapped tools: without resolving `_tools.x` the script shows none
    bare = extract_graph("inventory", script, "order.py")
    assert all(not t.reads and not t.writes and not t.returns for t in bare.tools)
    doc = artifact.doc_path.read_text()
    assert "## `add_order_line`" in doc and "`--order-id` (int, required)" in doc
    assert "not enough units from {sku} for this line" in doc and "unknown sku %s" in doc
    assert "receive_stock" not in doc


def run(workspace, *argv):
    return subprocess.run([sys.executable, *argv], cwd=workspace, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "DOMAIN_DB": str(workspace / "domain.db")})


def test_skill_script_runs_its_tools_and_only_those(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "tools.py").write_text(INVENTORY)
    shutil.copy(TOOL_CLI, workspace / "tool_cli.py")
    with sqlite3.connect(workspace / "domain.db") as db:
        db.executescript(SCHEMA)
    materialize_skill(inventory(), ORDER_SKILL, INVENTORY, workspace)

    created = run(workspace, "order.py", "create_order", "--customer", "acme")
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout) == {"order_id": 1, "status": "open", "rush": False}  # the tool's own default
    line = run(workspace, "order.py", "add_order_line", "--order-id", "1", "--sku", "A-1", "--quantity", "2")
    assert line.returncode == 0 and json.loads(line.stdout) == {"order_id": 1, "line_count": 1}
    refused = run(workspace, "order.py", "add_order_line", "--order-id", "1", "--sku", "A-1", "--quantity", "9")
    assert refused.returncode == 1 and "not enough units" in json.loads(refused.stdout)["error"]
    outside = run(workspace, "order.py", "receive_stock", "--sku", "A-1", "--quantity", "1")
    assert outside.returncode == 2 and "unknown tool" in outside.stdout
    schema = run(workspace, "order.py", "--schema")
    assert sorted(json.loads(schema.stdout)) == sorted(ORDER_SKILL.tools)
    with sqlite3.connect(workspace / "domain.db") as db:
        assert db.execute("SELECT quantity FROM stock").fetchone() == (3,)  # 5 - 2: the refused line changed nothing
    assert not (workspace / "__pycache__").exists()


def test_reserved_or_unknown_skills_cannot_be_materialized(tmp_path):
    with pytest.raises(DomainGraphError, match="not a module name"):
        materialize_skill(inventory(), Skill("tools", ("create_order",), "r"), INVENTORY, tmp_path)
    with pytest.raises(DomainGraphError, match="no tool 'ship_order'"):
        materialize_skill(inventory(), Skill("order", ("ship_order",), "r"), INVENTORY, tmp_path)

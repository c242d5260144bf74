"""The built-in executable domains: each loads, seeds deterministically, and its
tools keep the conventions the graph extraction reads (by AST) and run through
the real command line: reads, writes that land in the database, refusals that
leave it untouched."""

import ast
import importlib.util
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys

import pytest

from clawloop_assets.synthesis import executable_domains
from clawloop_assets.synthesis.executable_domains import TOOL_CLI, DomainError, load_domain, load_domains, scan_domains

BUILTIN = ("database_administration", "order_management", "warehouse_load_planning")


@pytest.fixture(autouse=True)
def no_user_domains(tmp_path, monkeypatch):
    """Only the built-in domains, whatever the machine's ~/.clawloop holds."""
    monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / "home"))


def domain(domain_id):
    return next(d for d in load_domains() if d.id == domain_id)


def seeded_db(path, domain_id, seed, size=1):
    d = domain(domain_id)
    spec = importlib.util.spec_from_file_location("seed_%s_%d" % (domain_id, seed), d.path("seed.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    db = sqlite3.connect(path)
    db.execute("PRAGMA foreign_keys = ON")
    db.executescript(d.path("schema.sql").read_text())
    module.populate(db, random.Random(seed), size)
    db.commit()
    return db


def dump(db):
    return "\n".join(db.iterdump())


# --- loading ------------------------------------------------------------------------------------------------


def test_builtin_domains_load():
    domains = load_domains()
    assert [d.id for d in domains] == sorted(d.id for d in domains)
    assert set(BUILTIN) <= {d.id for d in domains}
    for d in domains:
        assert d.title and d.description and d.business_keys and "def " in d.tools_source


def copy_domain(tmp_path, name="order_management", as_name=None):
    target = tmp_path / (as_name or name)
    shutil.copytree(executable_domains.BUILTIN_DOMAINS_DIR / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_missing_file_is_named(tmp_path):
    root = copy_domain(tmp_path)
    (root / "tools.py").unlink()
    with pytest.raises(DomainError, match="missing tools.py"):
        load_domain(root)


def test_bad_json_is_named(tmp_path):
    root = copy_domain(tmp_path)
    (root / "domain.json").write_text('{"id": "order_management",')
    with pytest.raises(DomainError, match=r"domain\.json: not valid JSON"):
        load_domain(root)


def test_id_must_match_directory(tmp_path):
    root = copy_domain(tmp_path, as_name="orders_v2")
    with pytest.raises(DomainError, match=r"domain\.json: field 'id'.*'orders_v2'"):
        load_domain(root)


def user_domain(home, as_name, source="order_management"):
    """A copy of a built-in domain under the user's root, renamed."""
    root = copy_domain(home / "domains", source, as_name=as_name)
    meta = json.loads((root / "domain.json").read_text())
    (root / "domain.json").write_text(json.dumps({**meta, "id": as_name}))
    return root


def test_user_domains_are_read_and_may_not_reuse_a_builtin_id(tmp_path):
    home = tmp_path / "home"
    root = user_domain(home, "my_orders")
    assert "my_orders" in {d.id for d in load_domains()}
    (root / "tools.py").unlink()
    domains, rejected = scan_domains()
    assert "my_orders" not in {d.id for d in domains} and set(BUILTIN) <= {d.id for d in domains}
    assert [(r.root, r.reason) for r in rejected] == [(root, f"{root}: missing tools.py")]
    shutil.rmtree(root)
    copy_domain(home / "domains")
    domains, rejected = scan_domains()
    assert [d.root for d in domains if d.id == "order_management"] == [
        executable_domains.BUILTIN_DOMAINS_DIR / "order_management"]
    assert len(rejected) == 1 and "already defined" in rejected[0].reason


def _replace(name, text):
    return lambda root: (root / name).write_text(text)


# Each damage to a user domain: the file its rejection starts with, and what it says.
MALFORMED = {
    "missing seed.py": (lambda root: (root / "seed.py").unlink(), "", "missing seed.py"),
    "missing domain.json": (lambda root: (root / "domain.json").unlink(), "", "missing domain.json"),
    "seed.py not Python": (_replace("seed.py", "def populate(db, rng, size)\n"), "seed.py", "not valid Python"),
    "seed.py without populate": (_replace("seed.py", "def fill(db, rng, size):\n    pass\n"), "seed.py",
                                 "defines no populate"),
    "schema.sql not SQL": (_replace("schema.sql", "CREATE TABLE orders (;\n"), "schema.sql", "does not build in SQLite"),
    "a business key without its table": (
        _replace("schema.sql", "CREATE TABLE customers (customer_id TEXT PRIMARY KEY);\n"),
        "domain.json", "names tables schema.sql does not create"),
    "tools.py not Python": (_replace("tools.py", "def reserve(db, sku: str) -> dict\n"), "tools.py", "syntax error"),
    "tools.py not UTF-8": (lambda root: (root / "tools.py").write_bytes(b"\xff\xfe def x"), "tools.py",
                           "cannot be read"),
    "tools.py without tools": (_replace("tools.py", "def _helper(db):\n    return 1\n"), "tools.py", "defines no tool"),
    "a tool without db": (_replace("tools.py", 'def lookup(order_id: str) -> dict:\n    """Look."""\n    return {}\n'),
                          "tools.py", "the first parameter must be `db`"),
    "a bad skills override": (_replace("skills_override.json", '[{"skill_id": "x"}'), "skills_override.json",
                              "not valid JSON"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_user_domain_is_rejected_alone_naming_its_file(tmp_path, case):
    damage, file, reason = MALFORMED[case]
    home = tmp_path / "home"
    good = user_domain(home, "parcel_lockers")
    bad = user_domain(home, "broken_shop")
    damage(bad)
    domains, rejected = scan_domains()
    assert {"parcel_lockers", *BUILTIN} == {d.id for d in domains}
    assert [r.root for r in rejected] == [bad]
    assert rejected[0].reason.startswith(str(bad / file) if file else str(bad)), rejected[0].reason
    assert reason in rejected[0].reason, rejected[0].reason
    assert [d.id for d in load_domains()] == [d.id for d in domains]
    assert good.is_dir() and bad.is_dir()  # nothing removed


def test_a_malformed_builtin_domain_still_raises(tmp_path, monkeypatch):
    """A built-in domain is the code's own: broken, it is a bug to fix, not a domain to skip."""
    builtin = tmp_path / "builtin"
    root = copy_domain(builtin)
    (root / "seed.py").unlink()
    monkeypatch.setattr(executable_domains, "BUILTIN_DOMAINS_DIR", builtin)
    with pytest.raises(DomainError, match="missing seed.py"):
        scan_domains()


# --- schema and seed ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("domain_id", BUILTIN)
def test_seed_is_deterministic_and_fills_every_table(tmp_path, domain_id):
    first = seeded_db(tmp_path / "a.db", domain_id, seed=7)
    again = seeded_db(tmp_path / "b.db", domain_id, seed=7)
    other = seeded_db(tmp_path / "c.db", domain_id, seed=8)
    assert dump(first) == dump(again)
    assert dump(first) != dump(other)

    keys = domain(domain_id).business_keys
    tables = {r[0] for r in first.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == set(keys) and 4 <= len(tables) <= 7
    assert first.execute("PRAGMA foreign_key_check").fetchall() == []
    for table, key in keys.items():
        rows, distinct, text = first.execute(
            f"SELECT COUNT(*), COUNT(DISTINCT {key}), SUM(typeof({key}) = 'text') FROM {table}").fetchone()
        assert rows > 0, table
        assert distinct == rows == text, f"{table}.{key} must be a unique readable string"


@pytest.mark.parametrize("domain_id", BUILTIN)
def test_seed_scales_with_size(tmp_path, domain_id):
    small = seeded_db(tmp_path / "s.db", domain_id, seed=1, size=1)
    large = seeded_db(tmp_path / "l.db", domain_id, seed=1, size=3)
    for table in domain(domain_id).business_keys:
        count = f"SELECT COUNT(*) FROM {table}"
        assert large.execute(count).fetchone()[0] >= small.execute(count).fetchone()[0]
    main = max(domain(domain_id).business_keys, key=lambda t: small.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0])
    assert 10 <= small.execute(f"SELECT COUNT(*) FROM {main}").fetchone()[0] <= 60


# --- tool conventions (what the graph extraction reads) -----------------------------------------------------


def is_sql_literal(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


@pytest.mark.parametrize("domain_id", BUILTIN)
def test_tools_follow_the_conventions(domain_id):
    source = domain(domain_id).tools_source
    tree = ast.parse(source)
    assert "from tool_cli import ToolError" in source
    assert source.rstrip().endswith('if __name__ == "__main__":\n    from tool_cli import main\n    main(globals())')
    tools = [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    assert 8 <= len(tools) <= 12
    refusing = 0
    for tool in tools:
        args = tool.args.args
        assert args[0].arg == "db", tool.name
        for arg in args[1:]:
            assert isinstance(arg.annotation, ast.Name) and arg.annotation.id in ("str", "int", "float", "bool"), \
                (tool.name, arg.arg)
        docstring = ast.get_docstring(tool)
        assert docstring and "\n" not in docstring, tool.name
        returns = [n for n in ast.walk(tool) if isinstance(n, ast.Return)]
        assert returns and all(isinstance(r.value, ast.Dict) for r in returns), tool.name
        for call in ast.walk(tool):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "execute":
                assert is_sql_literal(call.args[0]), (tool.name, ast.unparse(call))
        refusing += any(isinstance(n, ast.Raise) for n in ast.walk(tool))
    assert refusing >= 2
    # Helpers hold no SQL: every table a tool touches is visible in its own body.
    helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")]
    assert not any("execute" in ast.unparse(h) for h in helpers)


# --- the command line ---------------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path, request):
    domain_id = request.param
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(domain(domain_id).path("tools.py"), work / "tools.py")
    shutil.copy(TOOL_CLI, work / "tool_cli.py")
    seeded_db(work / "domain.db", domain_id, seed=11).close()
    return work


def cli(work, tool, **params):
    argv = [sys.executable, "tools.py", tool]
    for name, value in params.items():
        argv += ["--" + name.replace("_", "-"), str(value)]
    env = {k: v for k, v in os.environ.items() if k != "DOMAIN_DB"}
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert proc.stderr == "", proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def query(work, sql, *params):
    with sqlite3.connect(work / "domain.db") as db:
        return db.execute(sql, params).fetchall()


def refused(work, tool, match, **params):
    """The tool refuses (exit 1, {"error": ...}) and the database is unchanged."""
    before = dump(sqlite3.connect(work / "domain.db"))
    rc, out = cli(work, tool, **params)
    assert rc == 1 and set(out) == {"error"} and match in out["error"], out
    assert dump(sqlite3.connect(work / "domain.db")) == before


@pytest.mark.parametrize("workspace", BUILTIN, indirect=True)
def test_schema_lists_every_tool(workspace):
    rc, schema = cli(workspace, "--schema")
    tree = ast.parse((workspace / "tools.py").read_text())
    tools = {n.name for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")}
    assert rc == 0 and set(schema) == tools
    for entry in schema.values():
        assert entry["description"]
        assert "db" not in entry["parameters"]


@pytest.mark.parametrize("workspace", ["order_management"], indirect=True)
def test_order_management_cli(workspace):
    rc, out = cli(workspace, "list_orders", status="placed")
    assert rc == 0 and out["order_ids"] == [r[0] for r in query(workspace, "SELECT order_id FROM orders "
                                                                          "WHERE status = 'placed' ORDER BY 1")]

    rc, out = cli(workspace, "create_order", customer_id="CUS-0001")
    assert rc == 0 and query(workspace, "SELECT customer_id, status FROM orders WHERE order_id = ?",
                             out["order_id"]) == [("CUS-0001", "draft")]
    order_id = out["order_id"]

    # Asking for more than is free is refused; a restock fixes it.
    sku, free, reserved = query(workspace, "SELECT sku, on_hand - reserved, reserved FROM stock "
                                           "ORDER BY on_hand - reserved, sku")[0]
    refused(workspace, "add_order_line", "not enough stock", order_id=order_id, sku=sku, quantity=free + 5)
    assert cli(workspace, "restock", sku=sku, quantity=5)[0] == 0
    rc, out = cli(workspace, "add_order_line", order_id=order_id, sku=sku, quantity=free + 5)
    assert rc == 0 and out["available"] == 0
    assert query(workspace, "SELECT on_hand - reserved FROM stock WHERE sku = ?", sku) == [(0,)]

    # The payment status decides: an unpaid placed order is refused shipment.
    assert cli(workspace, "place_order", order_id=order_id)[0] == 0
    rc, out = cli(workspace, "get_order", order_id=order_id)
    assert out["payment_status"] == "unpaid"
    refused(workspace, "ship_order", "only a paid order ships", order_id=order_id)
    assert cli(workspace, "record_payment", order_id=order_id, amount_cents=out["balance_cents"])[1]["status"] == "paid"
    rc, out = cli(workspace, "ship_order", order_id=order_id, carrier="dhl")
    assert rc == 0 and query(workspace, "SELECT status FROM orders WHERE order_id = ?", order_id) == [("shipped",)]
    assert query(workspace, "SELECT on_hand, reserved FROM stock WHERE sku = ?", sku) == [(reserved, reserved)]


@pytest.mark.parametrize("workspace", ["warehouse_load_planning"], indirect=True)
def test_warehouse_load_planning_cli(workspace):
    rc, out = cli(workspace, "find_free_docks")
    free = [r[0] for r in query(workspace, "SELECT dock_id FROM docks WHERE in_service = 1 AND dock_id NOT IN "
                                           "(SELECT dock_id FROM load_plans WHERE status = 'open') ORDER BY 1")]
    assert rc == 0 and out["dock_ids"] == free and len(free) >= 2

    # The lightest staged pallet, a truck able to carry it, and a free dock.
    pallet_id, destination, weight, hazmat = query(
        workspace, "SELECT pallet_id, destination, weight_kg, hazmat FROM pallets WHERE status = 'staged' "
                   "ORDER BY weight_kg, pallet_id")[0]
    truck_id = cli(workspace, "find_available_trucks", min_kg=weight, hazmat=bool(hazmat))[1]["truck_ids"][0]
    rc, out = cli(workspace, "open_load_plan", truck_id=truck_id, dock_id=free[0], destination=destination)
    assert rc == 0 and query(workspace, "SELECT status FROM trucks WHERE truck_id = ?", truck_id) == [("loading",)]
    plan_id = out["plan_id"]
    refused(workspace, "open_load_plan", "is loading, not available", truck_id=truck_id, dock_id=free[1],
            destination=destination)
    other = cli(workspace, "find_available_trucks")[1]["truck_ids"][0]
    refused(workspace, "open_load_plan", "busy with open plan " + plan_id, truck_id=other, dock_id=free[0],
            destination=destination)

    rc, out = cli(workspace, "assign_pallet", plan_id=plan_id, pallet_id=pallet_id)
    assert rc == 0 and out["load_kg"] == weight
    assert query(workspace, "SELECT plan_id FROM assignments WHERE pallet_id = ?", pallet_id) == [(plan_id,)]

    # Utilization decides: under half full the dispatch is refused unless a partial load is allowed.
    status = cli(workspace, "plan_status", plan_id=plan_id)[1]
    if status["utilization_pct"] < 50:
        refused(workspace, "dispatch_plan", "add pallets or allow a partial load", plan_id=plan_id)
    rc, out = cli(workspace, "dispatch_plan", plan_id=plan_id, allow_partial=True)
    assert rc == 0 and query(workspace, "SELECT status FROM pallets WHERE pallet_id = ?", pallet_id) == [("shipped",)]
    refused(workspace, "open_load_plan", "departed", truck_id=truck_id, dock_id=free[0], destination=destination)


@pytest.mark.parametrize("workspace", ["warehouse_load_planning"], indirect=True)
def test_warehouse_over_capacity_is_fixed_by_splitting(workspace):
    # Build the situation: a plan whose truck has 100 kg left, and a 300 kg pallet for it.
    truck_id, max_kg = query(workspace, "SELECT truck_id, max_kg FROM trucks WHERE status = 'available' "
                                        "AND hazmat_certified = 0 ORDER BY truck_id")[0]
    dock_id = cli(workspace, "find_free_docks")[1]["dock_ids"][0]
    with sqlite3.connect(workspace / "domain.db") as db:
        db.execute("INSERT INTO pallets VALUES ('PAL-9000', 'Testville', ?, 0, 'staged')", (max_kg - 100,))
        db.execute("INSERT INTO pallets VALUES ('PAL-9001', 'Testville', 300, 0, 'staged')")
    plan_id = cli(workspace, "open_load_plan", truck_id=truck_id, dock_id=dock_id, destination="Testville")[1]["plan_id"]
    assert cli(workspace, "assign_pallet", plan_id=plan_id, pallet_id="PAL-9000")[0] == 0
    refused(workspace, "assign_pallet", "over capacity", plan_id=plan_id, pallet_id="PAL-9001")
    rc, out = cli(workspace, "split_pallet", pallet_id="PAL-9001", weight_kg=200)
    assert rc == 0 and out["weight_kg"] == 100 and out["new_pallet_id"] == "PAL-9002"
    rc, out = cli(workspace, "assign_pallet", plan_id=plan_id, pallet_id="PAL-9001")
    assert rc == 0 and out["remaining_kg"] == 0


@pytest.mark.parametrize("workspace", ["database_administration"], indirect=True)
def test_database_administration_cli(workspace):
    # A database without a completed backup: dropping it is refused until one is taken.
    database_id, instance_id = query(
        workspace, "SELECT database_id, instance_id FROM databases d WHERE status = 'online' AND NOT EXISTS "
                   "(SELECT 1 FROM backups b WHERE b.database_id = d.database_id AND b.status = 'completed') "
                   "ORDER BY database_id")[0]
    rc, out = cli(workspace, "database_info", database_id=database_id)
    assert rc == 0 and out["has_backup"] is False and out["instance_id"] == instance_id
    refused(workspace, "drop_database", "no completed backup", database_id=database_id)

    with sqlite3.connect(workspace / "domain.db") as db:  # room for the backup, whatever the seed left
        db.execute("UPDATE instances SET backup_quota_gb = backup_quota_gb + 1000 WHERE instance_id = ?",
                   (instance_id,))
    rc, out = cli(workspace, "take_backup", database_id=database_id)
    assert rc == 0 and query(workspace, "SELECT database_id, status FROM backups WHERE backup_id = ?",
                             out["backup_id"]) == [(database_id, "completed")]
    rc, out = cli(workspace, "drop_database", database_id=database_id)
    assert rc == 0 and query(workspace, "SELECT status FROM databases WHERE database_id = ?",
                             database_id) == [("dropped",)]

    # A locked user gets no grant until unlocked; a second identical grant is refused.
    user_id, username = query(workspace, "SELECT user_id, username FROM users WHERE status = 'locked' ORDER BY 1")[0]
    assert cli(workspace, "find_user", username=username)[1]["user_id"] == user_id
    target = query(workspace, "SELECT database_id FROM databases WHERE status = 'online' ORDER BY 1")[0][0]
    cli(workspace, "revoke_role", user_id=user_id, role="auditor", database_id=target)  # whether or not held
    refused(workspace, "grant_role", "locked", user_id=user_id, role="auditor", database_id=target)
    assert cli(workspace, "unlock_user", user_id=user_id)[1]["was_locked"] is True
    rc, out = cli(workspace, "grant_role", user_id=user_id, role="auditor", database_id=target)
    assert rc == 0 and query(workspace, "SELECT user_id, role, database_id FROM grants WHERE grant_id = ?",
                             out["grant_id"]) == [(user_id, "auditor", target)]
    refused(workspace, "grant_role", "already has role", user_id=user_id, role="auditor", database_id=target)


@pytest.mark.parametrize("workspace", ["database_administration"], indirect=True)
def test_a_wrong_call_exits_2(workspace):
    proc = subprocess.run([sys.executable, "tools.py", "no_such_tool"], cwd=workspace, capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown tool" in json.loads(proc.stdout)["error"]
    proc = subprocess.run([sys.executable, "tools.py", "take_backup"], cwd=workspace, capture_output=True, text=True)
    assert proc.returncode == 2

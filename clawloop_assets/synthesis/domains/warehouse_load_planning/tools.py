"""Warehouse load planning tools. A load plan puts one available truck at one
free dock for one destination; staged pallets for that destination are
assigned to it within the truck's weight and pallet limits (hazmat only on a
certified truck), and the plan is dispatched once the truck is worth sending."""

from tool_cli import ToolError

MIN_DISPATCH_PCT = 50  # a truck leaves at least half full by weight unless a partial load is allowed


def _next_id(prefix, last):
    """The id after `last` (PLN-0041 -> PLN-0042), or the first one."""
    return "%s-%04d" % (prefix, int(last.split("-")[1]) + 1 if last else 1)


def _found(row, what):
    if row is None:
        raise ToolError("no %s" % what)
    return row


def find_staged_pallets(db, destination: str = "") -> dict:
    """List the staged (unplanned) pallets, optionally only those for one destination."""
    rows = db.execute("SELECT pallet_id, weight_kg FROM pallets WHERE status = 'staged' "
                      "AND (? = '' OR destination = ?) ORDER BY pallet_id", (destination, destination)).fetchall()
    return {"pallet_ids": [r[0] for r in rows], "staged_count": len(rows), "total_kg": sum(r[1] for r in rows)}


def pallet_info(db, pallet_id: str) -> dict:
    """Show a pallet: destination, weight, hazmat flag, status and the plan it is on."""
    destination, weight_kg, hazmat, status = _found(db.execute(
        "SELECT destination, weight_kg, hazmat, status FROM pallets WHERE pallet_id = ?", (pallet_id,)).fetchone(),
        "pallet " + pallet_id)
    plan = db.execute("SELECT plan_id FROM assignments WHERE pallet_id = ?", (pallet_id,)).fetchone()
    return {"pallet_id": pallet_id, "destination": destination, "weight_kg": weight_kg, "hazmat": bool(hazmat),
            "status": status, "plan_id": plan[0] if plan else ""}


def find_available_trucks(db, min_kg: int = 0, hazmat: bool = False) -> dict:
    """List available trucks carrying at least min_kg (hazmat-certified if hazmat), smallest first: the best fit."""
    rows = db.execute("SELECT truck_id FROM trucks WHERE status = 'available' AND max_kg >= ? "
                      "AND (hazmat_certified = 1 OR ? = 0) ORDER BY max_kg, truck_id", (min_kg, int(hazmat))).fetchall()
    return {"truck_ids": [r[0] for r in rows], "truck_id": rows[0][0] if rows else "", "truck_count": len(rows)}


def find_free_docks(db) -> dict:
    """List the docks in service with no open load plan; dock_id is the first of them."""
    rows = db.execute("SELECT dock_id FROM docks WHERE in_service = 1 AND dock_id NOT IN "
                      "(SELECT dock_id FROM load_plans WHERE status = 'open') ORDER BY dock_id").fetchall()
    return {"dock_ids": [r[0] for r in rows], "dock_id": rows[0][0] if rows else "", "dock_count": len(rows)}


def open_load_plan(db, truck_id: str, dock_id: str, destination: str) -> dict:
    """Open a load plan: an available truck at a free dock, loading for one destination."""
    status, max_kg, max_pallets = _found(db.execute(
        "SELECT status, max_kg, max_pallets FROM trucks WHERE truck_id = ?", (truck_id,)).fetchone(),
        "truck " + truck_id)
    if status != "available":
        raise ToolError("truck %s is %s, not available; pick another truck%s"
                        % (truck_id, status, " or return it first" if status == "departed" else ""))
    in_service = _found(db.execute("SELECT in_service FROM docks WHERE dock_id = ?", (dock_id,)).fetchone(),
                        "dock " + dock_id)[0]
    if not in_service:
        raise ToolError("dock %s is out of service" % dock_id)
    busy = db.execute("SELECT plan_id FROM load_plans WHERE dock_id = ? AND status = 'open'", (dock_id,)).fetchone()
    if busy:
        raise ToolError("dock %s is busy with open plan %s" % (dock_id, busy[0]))
    plan_id = _next_id("PLN", db.execute("SELECT MAX(plan_id) FROM load_plans").fetchone()[0])
    db.execute("INSERT INTO load_plans VALUES (?, ?, ?, ?, 'open')", (plan_id, truck_id, dock_id, destination))
    db.execute("UPDATE trucks SET status = 'loading' WHERE truck_id = ?", (truck_id,))
    return {"plan_id": plan_id, "truck_id": truck_id, "dock_id": dock_id, "destination": destination,
            "max_kg": max_kg, "max_pallets": max_pallets}


def plan_status(db, plan_id: str) -> dict:
    """Show a load plan: its pallets, load against the truck's limits, and utilization."""
    truck_id, dock_id, destination, status, max_kg, max_pallets = _found(db.execute(
        "SELECT p.truck_id, p.dock_id, p.destination, p.status, t.max_kg, t.max_pallets FROM load_plans p "
        "JOIN trucks t ON t.truck_id = p.truck_id WHERE p.plan_id = ?", (plan_id,)).fetchone(), "load plan " + plan_id)
    rows = db.execute("SELECT a.pallet_id, p.weight_kg FROM assignments a JOIN pallets p ON p.pallet_id = a.pallet_id "
                      "WHERE a.plan_id = ? ORDER BY a.pallet_id", (plan_id,)).fetchall()
    load_kg = sum(r[1] for r in rows)
    return {"plan_id": plan_id, "truck_id": truck_id, "dock_id": dock_id, "destination": destination,
            "status": status, "pallet_ids": [r[0] for r in rows], "pallet_count": len(rows), "load_kg": load_kg,
            "max_kg": max_kg, "max_pallets": max_pallets, "remaining_kg": max_kg - load_kg,
            "utilization_pct": load_kg * 100 // max_kg}


def assign_pallet(db, plan_id: str, pallet_id: str) -> dict:
    """Put a staged pallet on an open load plan, within the truck's weight and pallet limits."""
    truck_id, destination, status, max_kg, max_pallets, certified = _found(db.execute(
        "SELECT p.truck_id, p.destination, p.status, t.max_kg, t.max_pallets, t.hazmat_certified FROM load_plans p "
        "JOIN trucks t ON t.truck_id = p.truck_id WHERE p.plan_id = ?", (plan_id,)).fetchone(), "load plan " + plan_id)
    if status != "open":
        raise ToolError("load plan %s is %s; pallets go on open plans only" % (plan_id, status))
    pallet_destination, weight_kg, hazmat, pallet_status = _found(db.execute(
        "SELECT destination, weight_kg, hazmat, status FROM pallets WHERE pallet_id = ?", (pallet_id,)).fetchone(),
        "pallet " + pallet_id)
    if pallet_status != "staged":
        raise ToolError("pallet %s is %s, not staged" % (pallet_id, pallet_status))
    if pallet_destination != destination:
        raise ToolError("pallet %s goes to %s, plan %s to %s" % (pallet_id, pallet_destination, plan_id, destination))
    if hazmat and not certified:
        raise ToolError("pallet %s is hazmat and truck %s is not hazmat-certified" % (pallet_id, truck_id))
    load_kg, count = db.execute("SELECT COALESCE(SUM(p.weight_kg), 0), COUNT(*) FROM assignments a "
                                "JOIN pallets p ON p.pallet_id = a.pallet_id WHERE a.plan_id = ?",
                                (plan_id,)).fetchone()
    if count + 1 > max_pallets:
        raise ToolError("truck %s takes %d pallets and plan %s already has %d" % (truck_id, max_pallets, plan_id, count))
    if load_kg + weight_kg > max_kg:
        raise ToolError("truck %s over capacity: %d kg loaded + %d kg > %d kg; split the pallet or use another plan"
                        % (truck_id, load_kg, weight_kg, max_kg))
    assignment_id = _next_id("ASG", db.execute("SELECT MAX(assignment_id) FROM assignments").fetchone()[0])
    db.execute("INSERT INTO assignments VALUES (?, ?, ?)", (assignment_id, plan_id, pallet_id))
    db.execute("UPDATE pallets SET status = 'planned' WHERE pallet_id = ?", (pallet_id,))
    return {"assignment_id": assignment_id, "plan_id": plan_id, "pallet_id": pallet_id, "load_kg": load_kg + weight_kg,
            "remaining_kg": max_kg - load_kg - weight_kg, "pallet_count": count + 1}


def unassign_pallet(db, plan_id: str, pallet_id: str) -> dict:
    """Take a pallet off an open load plan; it is staged again."""
    row = db.execute("SELECT p.status FROM assignments a JOIN load_plans p ON p.plan_id = a.plan_id "
                     "WHERE a.plan_id = ? AND a.pallet_id = ?", (plan_id, pallet_id)).fetchone()
    if row is None:
        raise ToolError("pallet %s is not on load plan %s" % (pallet_id, plan_id))
    if row[0] != "open":
        raise ToolError("load plan %s is %s; its pallets can no longer change" % (plan_id, row[0]))
    db.execute("DELETE FROM assignments WHERE plan_id = ? AND pallet_id = ?", (plan_id, pallet_id))
    db.execute("UPDATE pallets SET status = 'staged' WHERE pallet_id = ?", (pallet_id,))
    load_kg = db.execute("SELECT COALESCE(SUM(p.weight_kg), 0) FROM assignments a "
                         "JOIN pallets p ON p.pallet_id = a.pallet_id WHERE a.plan_id = ?", (plan_id,)).fetchone()[0]
    return {"plan_id": plan_id, "pallet_id": pallet_id, "load_kg": load_kg}


def split_pallet(db, pallet_id: str, weight_kg: int) -> dict:
    """Split weight_kg off a staged pallet onto a new pallet for the same destination."""
    destination, total_kg, hazmat, status = _found(db.execute(
        "SELECT destination, weight_kg, hazmat, status FROM pallets WHERE pallet_id = ?", (pallet_id,)).fetchone(),
        "pallet " + pallet_id)
    if status != "staged":
        raise ToolError("pallet %s is %s; only a staged pallet can be split" % (pallet_id, status))
    if not 0 < weight_kg < total_kg:
        raise ToolError("can split 1 to %d kg off pallet %s (%d kg), not %d" % (total_kg - 1, pallet_id, total_kg,
                                                                                 weight_kg))
    new_pallet_id = _next_id("PAL", db.execute("SELECT MAX(pallet_id) FROM pallets").fetchone()[0])
    db.execute("INSERT INTO pallets VALUES (?, ?, ?, ?, 'staged')", (new_pallet_id, destination, weight_kg, hazmat))
    db.execute("UPDATE pallets SET weight_kg = weight_kg - ? WHERE pallet_id = ?", (weight_kg, pallet_id))
    return {"pallet_id": pallet_id, "weight_kg": total_kg - weight_kg, "new_pallet_id": new_pallet_id,
            "new_weight_kg": weight_kg}


def dispatch_plan(db, plan_id: str, allow_partial: bool = False) -> dict:
    """Dispatch an open plan: the truck departs, its pallets ship, the dock frees up."""
    truck_id, status, max_kg = _found(db.execute(
        "SELECT p.truck_id, p.status, t.max_kg FROM load_plans p JOIN trucks t ON t.truck_id = p.truck_id "
        "WHERE p.plan_id = ?", (plan_id,)).fetchone(), "load plan " + plan_id)
    if status != "open":
        raise ToolError("load plan %s is already %s" % (plan_id, status))
    load_kg, count = db.execute("SELECT COALESCE(SUM(p.weight_kg), 0), COUNT(*) FROM assignments a "
                                "JOIN pallets p ON p.pallet_id = a.pallet_id WHERE a.plan_id = ?",
                                (plan_id,)).fetchone()
    if not count:
        raise ToolError("load plan %s has no pallets" % plan_id)
    if load_kg * 100 < MIN_DISPATCH_PCT * max_kg and not allow_partial:
        raise ToolError("truck %s is only %d%% loaded (%d of %d kg); add pallets or allow a partial load"
                        % (truck_id, load_kg * 100 // max_kg, load_kg, max_kg))
    db.execute("UPDATE pallets SET status = 'shipped' WHERE pallet_id IN "
               "(SELECT pallet_id FROM assignments WHERE plan_id = ?)", (plan_id,))
    db.execute("UPDATE load_plans SET status = 'dispatched' WHERE plan_id = ?", (plan_id,))
    db.execute("UPDATE trucks SET status = 'departed' WHERE truck_id = ?", (truck_id,))
    return {"plan_id": plan_id, "status": "dispatched", "truck_id": truck_id, "load_kg": load_kg,
            "pallet_count": count}


def return_truck(db, truck_id: str) -> dict:
    """Check a departed truck back in: it is available for a new plan."""
    status = _found(db.execute("SELECT status FROM trucks WHERE truck_id = ?", (truck_id,)).fetchone(),
                    "truck " + truck_id)[0]
    if status != "departed":
        raise ToolError("truck %s is %s; only a departed truck can be returned" % (truck_id, status))
    db.execute("UPDATE trucks SET status = 'available' WHERE truck_id = ?", (truck_id,))
    return {"truck_id": truck_id, "status": "available"}


if __name__ == "__main__":
    from tool_cli import main
    main(globals())

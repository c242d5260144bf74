"""Database administration tools over a simulated fleet. Databases live within
their instance's storage quota, backups within its backup quota; a database is
dropped only once it has a completed backup, and the last good backup of a
database still online is never deleted. Locked users get no new grants."""

import datetime

from tool_cli import ToolError


def _next_id(prefix, last):
    """The id after `last` (BKP-0041 -> BKP-0042), or the first one."""
    return "%s-%04d" % (prefix, int(last.split("-")[1]) + 1 if last else 1)


def _found(row, what):
    if row is None:
        raise ToolError("no %s" % what)
    return row


def instance_usage(db, instance_id: str) -> dict:
    """Show an instance's storage and backup usage against its quotas, and what it holds."""
    host, engine, status, storage_quota_gb, backup_quota_gb = _found(db.execute(
        "SELECT host, engine, status, storage_quota_gb, backup_quota_gb FROM instances WHERE instance_id = ?",
        (instance_id,)).fetchone(), "instance " + instance_id)
    databases = db.execute("SELECT database_id, size_gb FROM databases WHERE instance_id = ? AND status = 'online' "
                           "ORDER BY database_id", (instance_id,)).fetchall()
    backups = db.execute("SELECT b.backup_id, b.size_gb FROM backups b JOIN databases d ON d.database_id = b.database_id "
                         "WHERE d.instance_id = ? AND b.status = 'completed' ORDER BY b.backup_id",
                         (instance_id,)).fetchall()
    storage_used_gb, backup_used_gb = sum(r[1] for r in databases), sum(r[1] for r in backups)
    return {"instance_id": instance_id, "host": host, "engine": engine, "status": status,
            "database_ids": [r[0] for r in databases], "storage_used_gb": storage_used_gb,
            "storage_quota_gb": storage_quota_gb, "storage_free_gb": storage_quota_gb - storage_used_gb,
            "backup_ids": [r[0] for r in backups], "backup_used_gb": backup_used_gb,
            "backup_quota_gb": backup_quota_gb, "backup_free_gb": backup_quota_gb - backup_used_gb}


def list_databases(db, instance_id: str = "", name: str = "") -> dict:
    """List online databases, optionally on one instance and/or whose name contains the text."""
    rows = db.execute("SELECT database_id FROM databases WHERE status = 'online' AND (? = '' OR instance_id = ?) "
                      "AND name LIKE ? ORDER BY database_id", (instance_id, instance_id, "%" + name + "%")).fetchall()
    return {"database_ids": [r[0] for r in rows], "database_count": len(rows)}


def database_info(db, database_id: str) -> dict:
    """Show a database: instance, size, status, whether it has a completed backup, who holds grants."""
    instance_id, name, size_gb, status = _found(db.execute(
        "SELECT instance_id, name, size_gb, status FROM databases WHERE database_id = ?", (database_id,)).fetchone(),
        "database " + database_id)
    latest = db.execute("SELECT MAX(backup_id) FROM backups WHERE database_id = ? AND status = 'completed'",
                        (database_id,)).fetchone()[0]
    users = db.execute("SELECT DISTINCT user_id FROM grants WHERE database_id = ? ORDER BY user_id",
                       (database_id,)).fetchall()
    return {"database_id": database_id, "instance_id": instance_id, "name": name, "size_gb": size_gb,
            "status": status, "has_backup": latest is not None, "latest_backup_id": latest or "",
            "user_ids": [r[0] for r in users]}


def find_user(db, username: str) -> dict:
    """Look a user up by username: id, status and the roles held on which databases."""
    user_id, status = _found(db.execute("SELECT user_id, status FROM users WHERE username = ?",
                                        (username,)).fetchone(), "user named %r" % username)
    rows = db.execute("SELECT role, database_id FROM grants WHERE user_id = ? ORDER BY database_id, role",
                      (user_id,)).fetchall()
    return {"user_id": user_id, "username": username, "status": status,
            "grants": [{"role": role, "database_id": database_id} for role, database_id in rows]}


def create_database(db, instance_id: str, name: str, size_gb: int = 1) -> dict:
    """Create a database on a running instance, within its storage quota."""
    if size_gb <= 0:
        raise ToolError("size_gb must be positive, got %d" % size_gb)
    status, quota = _found(db.execute("SELECT status, storage_quota_gb FROM instances WHERE instance_id = ?",
                                      (instance_id,)).fetchone(), "instance " + instance_id)
    if status != "running":
        raise ToolError("instance %s is %s; databases are created on a running instance" % (instance_id, status))
    taken = db.execute("SELECT database_id FROM databases WHERE instance_id = ? AND name = ? AND status = 'online'",
                       (instance_id, name)).fetchone()
    if taken:
        raise ToolError("instance %s already has a database named %r (%s)" % (instance_id, name, taken[0]))
    used = db.execute("SELECT COALESCE(SUM(size_gb), 0) FROM databases WHERE instance_id = ? AND status = 'online'",
                      (instance_id,)).fetchone()[0]
    if used + size_gb > quota:
        raise ToolError("storage quota of instance %s exceeded: %d GB free of %d, %d GB needed; "
                        "drop a database there or use another instance" % (instance_id, quota - used, quota, size_gb))
    database_id = _next_id("DBS", db.execute("SELECT MAX(database_id) FROM databases").fetchone()[0])
    db.execute("INSERT INTO databases VALUES (?, ?, ?, ?, 'online')", (database_id, instance_id, name, size_gb))
    return {"database_id": database_id, "instance_id": instance_id, "name": name, "size_gb": size_gb}


def take_backup(db, database_id: str) -> dict:
    """Take a completed backup of an online database, within its instance's backup quota."""
    instance_id, size_gb, status = _found(db.execute(
        "SELECT instance_id, size_gb, status FROM databases WHERE database_id = ?", (database_id,)).fetchone(),
        "database " + database_id)
    if status != "online":
        raise ToolError("database %s is %s; only an online database can be backed up" % (database_id, status))
    quota = db.execute("SELECT backup_quota_gb FROM instances WHERE instance_id = ?", (instance_id,)).fetchone()[0]
    used = db.execute("SELECT COALESCE(SUM(b.size_gb), 0) FROM backups b JOIN databases d "
                      "ON d.database_id = b.database_id WHERE d.instance_id = ? AND b.status = 'completed'",
                      (instance_id,)).fetchone()[0]
    if used + size_gb > quota:
        raise ToolError("backup quota of instance %s exceeded: %d GB free of %d, %d GB needed; delete an old backup"
                        % (instance_id, quota - used, quota, size_gb))
    backup_id = _next_id("BKP", db.execute("SELECT MAX(backup_id) FROM backups").fetchone()[0])
    db.execute("INSERT INTO backups VALUES (?, ?, ?, 'completed')", (backup_id, database_id, size_gb))
    return {"backup_id": backup_id, "database_id": database_id, "size_gb": size_gb,
            "backup_free_gb": quota - used - size_gb}


def delete_backup(db, backup_id: str) -> dict:
    """Delete a backup to free backup quota; never the last good backup of an online database."""
    database_id, backup_status, database_status, instance_id = _found(db.execute(
        "SELECT b.database_id, b.status, d.status, d.instance_id FROM backups b "
        "JOIN databases d ON d.database_id = b.database_id WHERE b.backup_id = ?", (backup_id,)).fetchone(),
        "backup " + backup_id)
    others = db.execute("SELECT COUNT(*) FROM backups WHERE database_id = ? AND status = 'completed' AND backup_id != ?",
                        (database_id, backup_id)).fetchone()[0]
    if backup_status == "completed" and database_status == "online" and not others:
        raise ToolError("backup %s is the last completed backup of online database %s; take a newer one first"
                        % (backup_id, database_id))
    db.execute("DELETE FROM backups WHERE backup_id = ?", (backup_id,))
    quota, used = db.execute("SELECT i.backup_quota_gb, COALESCE(SUM(b.size_gb), 0) FROM instances i "
                             "LEFT JOIN databases d ON d.instance_id = i.instance_id "
                             "LEFT JOIN backups b ON b.database_id = d.database_id AND b.status = 'completed' "
                             "WHERE i.instance_id = ?", (instance_id,)).fetchone()
    return {"backup_id": backup_id, "database_id": database_id, "instance_id": instance_id,
            "backup_free_gb": quota - used}


def drop_database(db, database_id: str) -> dict:
    """Drop an online database that has a completed backup; its grants are revoked."""
    status = _found(db.execute("SELECT status FROM databases WHERE database_id = ?", (database_id,)).fetchone(),
                    "database " + database_id)[0]
    if status != "online":
        raise ToolError("database %s is already %s" % (database_id, status))
    if not db.execute("SELECT 1 FROM backups WHERE database_id = ? AND status = 'completed'",
                      (database_id,)).fetchone():
        raise ToolError("database %s has no completed backup; take a backup before dropping it" % database_id)
    revoked = db.execute("DELETE FROM grants WHERE database_id = ?", (database_id,)).rowcount
    db.execute("UPDATE databases SET status = 'dropped' WHERE database_id = ?", (database_id,))
    return {"database_id": database_id, "status": "dropped", "revoked_grants": revoked}


def unlock_user(db, user_id: str) -> dict:
    """Unlock a locked user account (no change if it is active)."""
    status = _found(db.execute("SELECT status FROM users WHERE user_id = ?", (user_id,)).fetchone(),
                    "user " + user_id)[0]
    db.execute("UPDATE users SET status = 'active' WHERE user_id = ?", (user_id,))
    return {"user_id": user_id, "status": "active", "was_locked": status == "locked"}


def grant_role(db, user_id: str, role: str, database_id: str) -> dict:
    """Grant an active user a role on an online database."""
    status = _found(db.execute("SELECT status FROM users WHERE user_id = ?", (user_id,)).fetchone(),
                    "user " + user_id)[0]
    if status != "active":
        raise ToolError("user %s is %s; unlock the account before granting roles" % (user_id, status))
    if not db.execute("SELECT 1 FROM roles WHERE role = ?", (role,)).fetchone():
        roles = [r[0] for r in db.execute("SELECT role FROM roles ORDER BY role").fetchall()]
        raise ToolError("no role %r; roles: %s" % (role, ", ".join(roles)))
    database_status = _found(db.execute("SELECT status FROM databases WHERE database_id = ?",
                                        (database_id,)).fetchone(), "database " + database_id)[0]
    if database_status != "online":
        raise ToolError("database %s is %s" % (database_id, database_status))
    held = db.execute("SELECT grant_id FROM grants WHERE user_id = ? AND role = ? AND database_id = ?",
                      (user_id, role, database_id)).fetchone()
    if held:
        raise ToolError("user %s already has role %s on %s (%s)" % (user_id, role, database_id, held[0]))
    grant_id = _next_id("GRT", db.execute("SELECT MAX(grant_id) FROM grants").fetchone()[0])
    db.execute("INSERT INTO grants VALUES (?, ?, ?, ?)", (grant_id, user_id, role, database_id))
    return {"grant_id": grant_id, "user_id": user_id, "role": role, "database_id": database_id}


def revoke_role(db, user_id: str, role: str, database_id: str) -> dict:
    """Revoke a role a user holds on a database."""
    held = db.execute("SELECT grant_id FROM grants WHERE user_id = ? AND role = ? AND database_id = ?",
                      (user_id, role, database_id)).fetchone()
    if held is None:
        raise ToolError("user %s does not hold role %s on %s" % (user_id, role, database_id))
    db.execute("DELETE FROM grants WHERE grant_id = ?", (held[0],))
    return {"grant_id": held[0], "user_id": user_id, "role": role, "database_id": database_id, "revoked": True}


def schedule_maintenance(db, instance_id: str, day: str, start_hour: int, hours: int) -> dict:
    """Book a maintenance window on an instance (day YYYY-MM-DD), not overlapping another."""
    try:
        valid = datetime.date.fromisoformat(day).isoformat() == day  # exactly YYYY-MM-DD
    except ValueError:
        valid = False
    if not valid:
        raise ToolError("day must be a date like 2024-07-15, got %r" % day)
    if not (0 <= start_hour <= 23 and 1 <= hours <= 24 - start_hour):
        raise ToolError("a window starts at hour 0-23 and ends by hour 24; got start %d for %d hours"
                        % (start_hour, hours))
    _found(db.execute("SELECT 1 FROM instances WHERE instance_id = ?", (instance_id,)).fetchone(),
           "instance " + instance_id)
    clash = db.execute("SELECT window_id, start_hour, end_hour FROM maintenance_windows WHERE instance_id = ? "
                       "AND day = ? AND start_hour < ? AND end_hour > ?",
                       (instance_id, day, start_hour + hours, start_hour)).fetchone()
    if clash:
        raise ToolError("overlaps maintenance window %s (%02d:00-%02d:00) on %s" % (clash[0], clash[1], clash[2], day))
    window_id = _next_id("MNW", db.execute("SELECT MAX(window_id) FROM maintenance_windows").fetchone()[0])
    db.execute("INSERT INTO maintenance_windows VALUES (?, ?, ?, ?, ?)",
               (window_id, instance_id, day, start_hour, start_hour + hours))
    return {"window_id": window_id, "instance_id": instance_id, "day": day, "start_hour": start_hour,
            "end_hour": start_hour + hours}


if __name__ == "__main__":
    from tool_cli import main
    main(globals())

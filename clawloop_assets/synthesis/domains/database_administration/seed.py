"""Background data for database administration: a fleet of instances, their
databases and backups (some quotas nearly full, some databases never backed
up), users with role grants, and maintenance windows already booked."""

APPS = ["billing", "orders", "auth", "analytics", "inventory", "crm", "search", "payments", "audit", "reports"]
ENVS = ["prod", "staging", "dev"]
FIRST = ["alice", "bruno", "carmen", "deepak", "emma", "felix", "grace", "hugo", "ines", "jonas", "kira", "liam"]
ROLES = [("reader", "read", "read all tables"), ("auditor", "read", "read tables and the audit log"),
         ("writer", "write", "read and write rows"), ("migrator", "write", "change the schema"),
         ("owner", "admin", "everything, including grants")]
# How a database's backups look: none, only a failed attempt, or good ones.
BACKUP_STATES = ["none", "failed", "completed", "completed", "completed"]


def _distinct(rng, pool, n):
    """n distinct names: the pool shuffled, numbered once it runs out."""
    pool = list(pool)
    rng.shuffle(pool)
    return [pool[i % len(pool)] + ("" if i < len(pool) else "_%d" % (i // len(pool) + 1)) for i in range(n)]


def populate(db, rng, size):
    n_instances = 4 * size
    instance_ids = ["INS-%04d" % i for i in range(1, n_instances + 1)]
    engines = {i: rng.choice(["postgres", "postgres", "mysql"]) for i in instance_ids}
    stopped = set(rng.sample(instance_ids[1:], n_instances // 4))  # the first always runs

    # Databases: about one in ten already dropped (those were backed up first).
    names = _distinct(rng, ["%s_%s" % (a, e) for a in APPS for e in ENVS], 14 * size)
    databases = []  # (database_id, instance_id, name, size_gb, status, backup state)
    states = BACKUP_STATES + [rng.choice(BACKUP_STATES) for _ in range(len(names) - len(BACKUP_STATES))]
    rng.shuffle(states)
    for i, (name, state) in enumerate(zip(names, states), 1):
        dropped = state == "completed" and rng.random() < 0.2
        databases.append(("DBS-%04d" % i, rng.choice(instance_ids), name, rng.randint(1, 40),
                          "dropped" if dropped else "online", state))

    backups = []
    for database_id, _, _, size_gb, _, state in databases:
        if state == "failed":
            backups.append((database_id, size_gb, "failed"))
        elif state == "completed":
            for _ in range(rng.randint(1, 2)):
                backups.append((database_id, max(1, size_gb - rng.randint(0, 3)), "completed"))

    # Quotas: what is used plus some headroom, tight on some instances so a refusal is reachable.
    for n, instance_id in enumerate(instance_ids, 1):
        ids = {d[0] for d in databases if d[1] == instance_id}
        used = sum(d[3] for d in databases if d[1] == instance_id and d[4] == "online")
        backed = sum(b[1] for b in backups if b[0] in ids and b[2] == "completed")
        db.execute("INSERT INTO instances VALUES (?, ?, ?, ?, ?, ?)",
                   (instance_id, "%s-%02d.fleet.internal" % ("pg" if engines[instance_id] == "postgres" else "my", n),
                    engines[instance_id], "stopped" if instance_id in stopped else "running",
                    used + rng.choice([2, 5, 20, 60]), backed + rng.choice([1, 3, 30, 80])))
    for database in databases:
        db.execute("INSERT INTO databases VALUES (?, ?, ?, ?, ?)", database[:5])
    for i, backup in enumerate(backups, 1):
        db.execute("INSERT INTO backups VALUES (?, ?, ?, ?)", ("BKP-%04d" % i,) + backup)

    usernames = _distinct(rng, ["%s.%s" % (f, c) for f in FIRST for c in "abcdefgh"], 15 * size)
    locked = set(rng.sample(range(len(usernames)), max(1, len(usernames) // 7)))
    for i, username in enumerate(usernames):
        db.execute("INSERT INTO users VALUES (?, ?, ?)",
                   ("USR-%04d" % (i + 1), username, "locked" if i in locked else "active"))
    for role in ROLES:
        db.execute("INSERT INTO roles VALUES (?, ?, ?)", role)

    online = [d[0] for d in databases if d[4] == "online"]
    combos = [(u, r[0], d) for u in range(1, len(usernames) + 1) for r in ROLES for d in online]
    for i, (user, role, database_id) in enumerate(sorted(rng.sample(combos, min(len(combos), 20 * size))), 1):
        db.execute("INSERT INTO grants VALUES (?, ?, ?, ?)", ("GRT-%04d" % i, "USR-%04d" % user, role, database_id))

    # Windows on distinct (instance, day) pairs, so none overlap.
    slots = [(i, day) for i in instance_ids for day in range(1, 29)]
    for i, (instance_id, day) in enumerate(sorted(rng.sample(slots, 5 * size)), 1):
        start = rng.randint(0, 20)
        db.execute("INSERT INTO maintenance_windows VALUES (?, ?, ?, ?, ?)",
                   ("MNW-%04d" % i, instance_id, "2024-07-%02d" % day, start, start + rng.randint(1, 4)))

"""Background data for load planning: a fleet of trucks, the docks, staged
pallets for a handful of destinations, and some load plans already open or
dispatched, each within its truck's limits."""

DESTINATIONS = ["Lyon", "Turin", "Munich", "Zurich"]
# kind: (max_kg, max_pallets); vans fill up after a few pallets, so capacity refusals are reachable.
KINDS = {"van": (1500, 4), "rigid": (4000, 10), "semi": (9000, 20)}


def populate(db, rng, size):
    trucks = []
    for i in range(1, 10 * size + 1):
        kind = rng.choice(["van", "van", "rigid", "rigid", "semi"])
        max_kg, max_pallets = KINDS[kind]
        status = "maintenance" if rng.random() < 0.15 else "available"
        truck = ["TRK-%04d" % i, "WL-%03d-%s" % (i, "ABCDEFGH"[rng.randrange(8)]), kind, max_kg, max_pallets,
                 int(rng.random() < 0.3), status]
        trucks.append(truck)

    docks = [("DCK-%04d" % i, rng.choice(["north", "south", "east"]), int(rng.random() >= 0.15))
             for i in range(1, 6 * size + 1)]
    for dock in docks:
        db.execute("INSERT INTO docks VALUES (?, ?, ?)", dock)

    pallets = []
    for i in range(1, 24 * size + 1):
        pallets.append(["PAL-%04d" % i, rng.choice(DESTINATIONS), rng.randint(15, 110) * 10,
                        int(rng.random() < 0.15), "staged"])

    # Some plans: open ones hold a free dock and a loading truck; dispatched ones have left.
    plans, assignments = [], []
    free_docks = [d[0] for d in docks if d[2]]
    for n in range(1, 4 * size + 1):
        idle = [t for t in trucks if t[6] == "available"]
        if not idle:
            break
        truck = rng.choice(idle)
        is_open = n % 2 == 1 and bool(free_docks)
        dock_id = free_docks.pop(rng.randrange(len(free_docks))) if is_open else rng.choice(docks)[0]
        destination = rng.choice(sorted({p[1] for p in pallets if p[4] == "staged"}))
        truck[6] = "loading" if is_open else "departed"
        plan_id = "PLN-%04d" % n
        plans.append((plan_id, truck[0], dock_id, destination, "open" if is_open else "dispatched"))
        load = count = 0
        target = min(truck[4], rng.randint(1, 4))
        for pallet in pallets:  # fill in order, within the truck's limits, up to a few pallets
            fits = load + pallet[2] <= truck[3] and count < target
            if pallet[4] == "staged" and pallet[1] == destination and fits and (truck[5] or not pallet[3]):
                pallet[4] = "planned" if is_open else "shipped"
                load, count = load + pallet[2], count + 1
                assignments.append(("ASG-%04d" % (len(assignments) + 1), plan_id, pallet[0]))

    for truck in trucks:
        db.execute("INSERT INTO trucks VALUES (?, ?, ?, ?, ?, ?, ?)", truck)
    for pallet in pallets:
        db.execute("INSERT INTO pallets VALUES (?, ?, ?, ?, ?)", pallet)
    for plan in plans:
        db.execute("INSERT INTO load_plans VALUES (?, ?, ?, ?, ?)", plan)
    for assignment in assignments:
        db.execute("INSERT INTO assignments VALUES (?, ?, ?)", assignment)

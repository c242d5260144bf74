"""Background data for order management: customers, a catalogue with stock,
and orders in every status, consistent with the tools' rules (reservations
match open lines, paid orders are fully paid, shipped ones have a shipment)."""

FIRST = ["Ana", "Ben", "Chloe", "Dmitri", "Elif", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kofi", "Lea"]
LAST = ["Ruiz", "Okafor", "Novak", "Berg", "Tanaka", "Moreau", "Silva", "Weber", "Kowal", "Haddad", "Lund", "Price"]
CITIES = ["Lisbon", "Ghent", "Leeds", "Graz", "Porto", "Bergen"]
ADJECTIVES = ["Steel", "Oak", "Copper", "Linen", "Glass", "Cork", "Wool", "Brass"]
NOUNS = ["Kettle", "Lamp", "Stool", "Shelf", "Mug", "Tray", "Clock", "Basket", "Vase", "Rug"]
# Weighted so that every branch of the tools has data to act on.
STATUSES = ["draft"] * 2 + ["placed"] * 4 + ["on_hold"] + ["paid"] * 4 + ["shipped"] * 6 + ["cancelled"] * 2
OPEN = ("draft", "placed", "on_hold", "paid")  # statuses whose lines hold a reservation


def _distinct(rng, pool, n):
    """n distinct names: the pool shuffled, numbered once it runs out."""
    pool = list(pool)
    rng.shuffle(pool)
    return [pool[i % len(pool)] + ("" if i < len(pool) else " %d" % (i // len(pool) + 1)) for i in range(n)]


def populate(db, rng, size):
    names = _distinct(rng, ["%s %s" % (f, last) for f in FIRST for last in LAST], 12 * size)
    for i, name in enumerate(names, 1):
        email = "%s%d@example.com" % (name.lower().replace(" ", "."), i)
        db.execute("INSERT INTO customers VALUES (?, ?, ?, ?)", ("CUS-%04d" % i, name, email, rng.choice(CITIES)))

    products = _distinct(rng, ["%s %s" % (a, n) for a in ADJECTIVES for n in NOUNS], 15 * size)
    prices = {}
    for i, name in enumerate(products, 1):
        sku = "SKU-%04d" % i
        prices[sku] = rng.randint(4, 120) * 50
        db.execute("INSERT INTO products VALUES (?, ?, ?)", (sku, name, prices[sku]))

    reserved = dict.fromkeys(prices, 0)
    line_no = payment_no = shipment_no = 0
    n_orders = 20 * size
    statuses = sorted(set(STATUSES)) + [rng.choice(STATUSES) for _ in range(n_orders - 6)]  # each status at least once
    rng.shuffle(statuses)
    for i, status in enumerate(statuses, 1):
        order_id = "ORD-%04d" % i
        reason = "payment overdue" if status == "on_hold" else None
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?)",
                   (order_id, "CUS-%04d" % rng.randint(1, len(names)), status, reason))
        total = 0
        for sku in sorted(rng.sample(sorted(prices), rng.randint(1, 3))):
            line_no += 1
            quantity = rng.randint(1, 5)
            total += quantity * prices[sku]
            if status in OPEN:
                reserved[sku] += quantity
            db.execute("INSERT INTO order_lines VALUES (?, ?, ?, ?, ?)",
                       ("LIN-%04d" % line_no, order_id, sku, quantity, prices[sku]))
        # Paid and shipped orders are paid in full (sometimes in two parts); some placed ones in part.
        if status in ("paid", "shipped"):
            parts = [total] if rng.random() < 0.6 else [total // 2, total - total // 2]
        elif status == "placed" and rng.random() < 0.4:
            parts = [total // 2]
        else:
            parts = []
        for amount in parts:
            payment_no += 1
            db.execute("INSERT INTO payments VALUES (?, ?, ?, ?)",
                       ("PAY-%04d" % payment_no, order_id, amount, rng.choice(["card", "bank_transfer", "voucher"])))
        if status == "shipped":
            shipment_no += 1
            carrier = rng.choice(["ups", "dhl", "postal"])
            db.execute("INSERT INTO shipments VALUES (?, ?, ?, ?)",
                       ("SHP-%04d" % shipment_no, order_id, carrier, "%s-%s" % (carrier.upper(), order_id)))

    # A fifth of the catalogue has (almost) nothing free, so a large line is refused.
    scarce = rng.sample(sorted(prices), len(prices) // 5)
    for sku in sorted(prices):
        free = rng.randint(0, 2) if sku in scarce else rng.randint(5, 60)
        db.execute("INSERT INTO stock VALUES (?, ?, ?, ?)", (sku, reserved[sku] + free, reserved[sku], rng.randint(5, 15)))

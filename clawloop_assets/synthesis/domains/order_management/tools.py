"""Order management tools. An order goes draft -> placed -> paid -> shipped;
an unpaid placed order can be put on hold, and an order nobody has paid for
can be cancelled. Adding a line reserves stock; shipping takes it off the shelf."""

from tool_cli import ToolError

CARRIERS = ("ups", "dhl", "postal")
METHODS = ("card", "bank_transfer", "voucher")


def _next_id(prefix, last):
    """The id after `last` (ORD-0041 -> ORD-0042), or the first one."""
    return "%s-%04d" % (prefix, int(last.split("-")[1]) + 1 if last else 1)


def _found(row, what):
    if row is None:
        raise ToolError("no %s" % what)
    return row


def _payment_status(total, paid):
    return "paid" if total and paid >= total else ("partial" if paid else "unpaid")


def find_customer(db, name: str) -> dict:
    """Find the one customer whose name contains the given text (case-insensitive)."""
    rows = db.execute("SELECT customer_id, name, email, city FROM customers WHERE name LIKE ? ORDER BY customer_id",
                      ("%" + name + "%",)).fetchall()
    if not rows:
        raise ToolError("no customer whose name contains %r" % name)
    if len(rows) > 1:
        raise ToolError("%d customers match %r (%s); give more of the name"
                        % (len(rows), name, ", ".join(r[1] for r in rows)))
    customer_id, full_name, email, city = rows[0]
    return {"customer_id": customer_id, "name": full_name, "email": email, "city": city}


def list_orders(db, customer_id: str = "", status: str = "") -> dict:
    """List order ids, optionally only one customer's and/or only one status."""
    rows = db.execute("SELECT order_id FROM orders WHERE (? = '' OR customer_id = ?) AND (? = '' OR status = ?) "
                      "ORDER BY order_id", (customer_id, customer_id, status, status)).fetchall()
    return {"order_ids": [r[0] for r in rows], "order_count": len(rows)}


def get_order(db, order_id: str) -> dict:
    """Show an order: its status, total, what has been paid and its payment status."""
    customer_id, status, reason = _found(db.execute(
        "SELECT customer_id, status, hold_reason FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
        "order " + order_id)
    total, skus = db.execute("SELECT COALESCE(SUM(quantity * unit_price_cents), 0), COUNT(*) FROM order_lines "
                             "WHERE order_id = ?", (order_id,)).fetchone()
    paid = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM payments WHERE order_id = ?", (order_id,)).fetchone()[0]
    return {"order_id": order_id, "customer_id": customer_id, "status": status, "hold_reason": reason,
            "line_count": skus, "total_cents": total, "paid_cents": paid, "balance_cents": total - paid,
            "payment_status": _payment_status(total, paid)}


def check_stock(db, sku: str) -> dict:
    """Show a product's stock: on hand, reserved by open orders, and available to order."""
    product_name, on_hand, reserved, reorder_level = _found(db.execute(
        "SELECT p.name, s.on_hand, s.reserved, s.reorder_level FROM products p JOIN stock s ON s.sku = p.sku "
        "WHERE p.sku = ?", (sku,)).fetchone(), "product " + sku)
    return {"sku": sku, "product_name": product_name, "on_hand": on_hand, "reserved": reserved, "available": on_hand - reserved,
            "below_reorder_level": on_hand - reserved < reorder_level}


def create_order(db, customer_id: str) -> dict:
    """Open a new draft order for a customer."""
    _found(db.execute("SELECT 1 FROM customers WHERE customer_id = ?", (customer_id,)).fetchone(),
           "customer " + customer_id)
    order_id = _next_id("ORD", db.execute("SELECT MAX(order_id) FROM orders").fetchone()[0])
    db.execute("INSERT INTO orders (order_id, customer_id, status) VALUES (?, ?, 'draft')", (order_id, customer_id))
    return {"order_id": order_id, "customer_id": customer_id, "status": "draft"}


def add_order_line(db, order_id: str, sku: str, quantity: int) -> dict:
    """Add a quantity of a product to a draft order, reserving the stock."""
    if quantity <= 0:
        raise ToolError("quantity must be positive, got %d" % quantity)
    status = _found(db.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
                    "order " + order_id)[0]
    if status != "draft":
        raise ToolError("order %s is %s; lines can only be added to a draft order" % (order_id, status))
    price, on_hand, reserved = _found(db.execute(
        "SELECT p.unit_price_cents, s.on_hand, s.reserved FROM products p JOIN stock s ON s.sku = p.sku "
        "WHERE p.sku = ?", (sku,)).fetchone(), "product " + sku)
    if quantity > on_hand - reserved:
        raise ToolError("not enough stock of %s: %d available, %d requested; restock it or order less"
                        % (sku, on_hand - reserved, quantity))
    db.execute("UPDATE stock SET reserved = reserved + ? WHERE sku = ?", (quantity, sku))
    line = db.execute("SELECT line_id FROM order_lines WHERE order_id = ? AND sku = ?", (order_id, sku)).fetchone()
    if line:  # the same product again: one line with the summed quantity
        line_id = line[0]
        db.execute("UPDATE order_lines SET quantity = quantity + ? WHERE line_id = ?", (quantity, line_id))
    else:
        line_id = _next_id("LIN", db.execute("SELECT MAX(line_id) FROM order_lines").fetchone()[0])
        db.execute("INSERT INTO order_lines VALUES (?, ?, ?, ?, ?)", (line_id, order_id, sku, quantity, price))
    return {"line_id": line_id, "order_id": order_id, "sku": sku, "quantity": quantity,
            "available": on_hand - reserved - quantity}


def restock(db, sku: str, quantity: int) -> dict:
    """Receive a delivery of a product: adds to its stock on hand."""
    if quantity <= 0:
        raise ToolError("quantity must be positive, got %d" % quantity)
    on_hand, reserved = _found(db.execute("SELECT on_hand, reserved FROM stock WHERE sku = ?", (sku,)).fetchone(),
                               "product " + sku)
    db.execute("UPDATE stock SET on_hand = on_hand + ? WHERE sku = ?", (quantity, sku))
    return {"sku": sku, "on_hand": on_hand + quantity, "available": on_hand + quantity - reserved}


def place_order(db, order_id: str) -> dict:
    """Place a draft order: it is now waiting for payment."""
    status = _found(db.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
                    "order " + order_id)[0]
    if status != "draft":
        raise ToolError("order %s is %s; only a draft order can be placed" % (order_id, status))
    total, lines = db.execute("SELECT COALESCE(SUM(quantity * unit_price_cents), 0), COUNT(*) FROM order_lines "
                              "WHERE order_id = ?", (order_id,)).fetchone()
    if not lines:
        raise ToolError("order %s has no lines; add at least one before placing it" % order_id)
    db.execute("UPDATE orders SET status = 'placed' WHERE order_id = ?", (order_id,))
    return {"order_id": order_id, "status": "placed", "total_cents": total}


def record_payment(db, order_id: str, amount_cents: int, method: str = "card") -> dict:
    """Record a payment against a placed or held order; paid in full, it becomes paid."""
    if method not in METHODS:
        raise ToolError("unknown payment method %r; one of %s" % (method, ", ".join(METHODS)))
    if amount_cents <= 0:
        raise ToolError("amount must be positive, got %d" % amount_cents)
    status = _found(db.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
                    "order " + order_id)[0]
    if status not in ("placed", "on_hold"):
        raise ToolError("order %s is %s; payments are taken on placed or held orders" % (order_id, status))
    total = db.execute("SELECT COALESCE(SUM(quantity * unit_price_cents), 0) FROM order_lines WHERE order_id = ?",
                       (order_id,)).fetchone()[0]
    paid = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM payments WHERE order_id = ?", (order_id,)).fetchone()[0]
    if amount_cents > total - paid:
        raise ToolError("payment of %d cents would overpay order %s: balance is %d cents"
                        % (amount_cents, order_id, total - paid))
    payment_id = _next_id("PAY", db.execute("SELECT MAX(payment_id) FROM payments").fetchone()[0])
    db.execute("INSERT INTO payments VALUES (?, ?, ?, ?)", (payment_id, order_id, amount_cents, method))
    paid += amount_cents
    if paid >= total:  # fully paid releases a hold
        status = "paid"
        db.execute("UPDATE orders SET status = 'paid', hold_reason = NULL WHERE order_id = ?", (order_id,))
    return {"payment_id": payment_id, "order_id": order_id, "paid_cents": paid, "balance_cents": total - paid,
            "payment_status": _payment_status(total, paid), "status": status}


def hold_order(db, order_id: str, reason: str) -> dict:
    """Put a placed, not fully paid order on hold, with the reason."""
    status = _found(db.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
                    "order " + order_id)[0]
    if status != "placed":
        raise ToolError("order %s is %s; only a placed order awaiting payment can be held" % (order_id, status))
    db.execute("UPDATE orders SET status = 'on_hold', hold_reason = ? WHERE order_id = ?", (reason, order_id))
    return {"order_id": order_id, "status": "on_hold", "reason": reason}


def ship_order(db, order_id: str, carrier: str = "ups") -> dict:
    """Ship a fully paid order: creates the shipment and takes its stock off the shelf."""
    if carrier not in CARRIERS:
        raise ToolError("unknown carrier %r; one of %s" % (carrier, ", ".join(CARRIERS)))
    status = _found(db.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
                    "order " + order_id)[0]
    if status != "paid":
        total = db.execute("SELECT COALESCE(SUM(quantity * unit_price_cents), 0) FROM order_lines "
                           "WHERE order_id = ?", (order_id,)).fetchone()[0]
        paid = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM payments WHERE order_id = ?",
                          (order_id,)).fetchone()[0]
        raise ToolError("order %s is %s (%d of %d cents paid); only a paid order ships"
                        % (order_id, status, paid, total))
    for sku, quantity in db.execute("SELECT sku, quantity FROM order_lines WHERE order_id = ?", (order_id,)).fetchall():
        db.execute("UPDATE stock SET on_hand = on_hand - ?, reserved = reserved - ? WHERE sku = ?",
                   (quantity, quantity, sku))
    shipment_id = _next_id("SHP", db.execute("SELECT MAX(shipment_id) FROM shipments").fetchone()[0])
    tracking_code = "%s-%s" % (carrier.upper(), order_id)
    db.execute("INSERT INTO shipments VALUES (?, ?, ?, ?)", (shipment_id, order_id, carrier, tracking_code))
    db.execute("UPDATE orders SET status = 'shipped' WHERE order_id = ?", (order_id,))
    return {"shipment_id": shipment_id, "order_id": order_id, "tracking_code": tracking_code, "status": "shipped"}


def cancel_order(db, order_id: str) -> dict:
    """Cancel an order nobody has paid anything for, releasing its reserved stock."""
    status = _found(db.execute("SELECT status FROM orders WHERE order_id = ?", (order_id,)).fetchone(),
                    "order " + order_id)[0]
    if status in ("shipped", "cancelled"):
        raise ToolError("order %s is already %s" % (order_id, status))
    paid = db.execute("SELECT COALESCE(SUM(amount_cents), 0) FROM payments WHERE order_id = ?", (order_id,)).fetchone()[0]
    if paid:
        raise ToolError("order %s has %d cents of payments; an order with payments cannot be cancelled" % (order_id, paid))
    released = 0
    for sku, quantity in db.execute("SELECT sku, quantity FROM order_lines WHERE order_id = ?", (order_id,)).fetchall():
        db.execute("UPDATE stock SET reserved = reserved - ? WHERE sku = ?", (quantity, sku))
        released += quantity
    db.execute("UPDATE orders SET status = 'cancelled', hold_reason = NULL WHERE order_id = ?", (order_id,))
    return {"order_id": order_id, "status": "cancelled", "released_units": released}


if __name__ == "__main__":
    from tool_cli import main
    main(globals())

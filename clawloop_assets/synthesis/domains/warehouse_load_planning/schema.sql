-- Warehouse load planning: a load plan puts one truck at one dock for one
-- destination; staged pallets are assigned to it within the truck's limits,
-- then the plan is dispatched (the truck departs, its pallets ship).

CREATE TABLE trucks (
    truck_id         TEXT PRIMARY KEY,          -- TRK-0001
    plate            TEXT NOT NULL UNIQUE,
    kind             TEXT NOT NULL CHECK (kind IN ('van', 'rigid', 'semi')),
    max_kg           INTEGER NOT NULL CHECK (max_kg > 0),
    max_pallets      INTEGER NOT NULL CHECK (max_pallets > 0),
    hazmat_certified INTEGER NOT NULL CHECK (hazmat_certified IN (0, 1)),
    status           TEXT NOT NULL CHECK (status IN ('available', 'loading', 'departed', 'maintenance'))
);

CREATE TABLE docks (
    dock_id    TEXT PRIMARY KEY,                -- DCK-0001
    zone       TEXT NOT NULL CHECK (zone IN ('north', 'south', 'east')),
    in_service INTEGER NOT NULL CHECK (in_service IN (0, 1))
);

CREATE TABLE pallets (
    pallet_id   TEXT PRIMARY KEY,               -- PAL-0001
    destination TEXT NOT NULL,
    weight_kg   INTEGER NOT NULL CHECK (weight_kg > 0),
    hazmat      INTEGER NOT NULL CHECK (hazmat IN (0, 1)),
    status      TEXT NOT NULL CHECK (status IN ('staged', 'planned', 'shipped'))
);

CREATE TABLE load_plans (
    plan_id     TEXT PRIMARY KEY,               -- PLN-0001
    truck_id    TEXT NOT NULL REFERENCES trucks (truck_id),
    dock_id     TEXT NOT NULL REFERENCES docks (dock_id),
    destination TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('open', 'dispatched'))
);
-- A dock serves, and a truck loads for, one open plan at a time.
CREATE UNIQUE INDEX one_open_plan_per_dock ON load_plans (dock_id) WHERE status = 'open';
CREATE UNIQUE INDEX one_open_plan_per_truck ON load_plans (truck_id) WHERE status = 'open';

CREATE TABLE assignments (
    assignment_id TEXT PRIMARY KEY,             -- ASG-0001
    plan_id       TEXT NOT NULL REFERENCES load_plans (plan_id),
    pallet_id     TEXT NOT NULL UNIQUE REFERENCES pallets (pallet_id)
);

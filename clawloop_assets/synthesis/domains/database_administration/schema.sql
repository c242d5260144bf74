-- Database administration: instances host databases within a storage quota
-- and keep their backups within a backup quota; users hold roles on databases;
-- maintenance windows never overlap on one instance.

CREATE TABLE instances (
    instance_id      TEXT PRIMARY KEY,          -- INS-0001
    host             TEXT NOT NULL UNIQUE,
    engine           TEXT NOT NULL CHECK (engine IN ('postgres', 'mysql')),
    status           TEXT NOT NULL CHECK (status IN ('running', 'stopped')),
    storage_quota_gb INTEGER NOT NULL CHECK (storage_quota_gb > 0),
    backup_quota_gb  INTEGER NOT NULL CHECK (backup_quota_gb > 0)
);

CREATE TABLE databases (
    database_id TEXT PRIMARY KEY,               -- DBS-0001
    instance_id TEXT NOT NULL REFERENCES instances (instance_id),
    name        TEXT NOT NULL,
    size_gb     INTEGER NOT NULL CHECK (size_gb > 0),
    status      TEXT NOT NULL CHECK (status IN ('online', 'dropped'))
);
-- A name is taken once per instance among the databases still online.
CREATE UNIQUE INDEX one_online_name_per_instance ON databases (instance_id, name) WHERE status = 'online';

CREATE TABLE users (
    user_id  TEXT PRIMARY KEY,                  -- USR-0001
    username TEXT NOT NULL UNIQUE,
    status   TEXT NOT NULL CHECK (status IN ('active', 'locked'))
);

CREATE TABLE roles (
    role        TEXT PRIMARY KEY,               -- reader, writer, ...
    privilege   TEXT NOT NULL CHECK (privilege IN ('read', 'write', 'admin')),
    description TEXT NOT NULL
);

CREATE TABLE grants (
    grant_id    TEXT PRIMARY KEY,               -- GRT-0001
    user_id     TEXT NOT NULL REFERENCES users (user_id),
    role        TEXT NOT NULL REFERENCES roles (role),
    database_id TEXT NOT NULL REFERENCES databases (database_id),
    UNIQUE (user_id, role, database_id)
);

CREATE TABLE backups (
    backup_id   TEXT PRIMARY KEY,               -- BKP-0001 (later ids are newer)
    database_id TEXT NOT NULL REFERENCES databases (database_id),
    size_gb     INTEGER NOT NULL CHECK (size_gb > 0),
    status      TEXT NOT NULL CHECK (status IN ('completed', 'failed'))
);

CREATE TABLE maintenance_windows (
    window_id   TEXT PRIMARY KEY,               -- MNW-0001
    instance_id TEXT NOT NULL REFERENCES instances (instance_id),
    day         TEXT NOT NULL CHECK (day GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]'),
    start_hour  INTEGER NOT NULL CHECK (start_hour BETWEEN 0 AND 23),
    end_hour    INTEGER NOT NULL CHECK (end_hour > start_hour AND end_hour <= 24)
);

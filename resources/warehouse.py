"""The warehouse: every table of the loop, with each round's rows replaced in
one transaction so a rerun never duplicates and never half-writes."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import dagster as dg
import duckdb
import polars as pl
from pydantic import PrivateAttr

from resources import paths
from resources.run_lock import RunLock, acquire_run_lock
from resources.schemas import TABLES


def polars_schema(table: str) -> dict[str, pl.DataType]:
    """The polars dtypes of a table, from its pandera schema."""
    columns = TABLES[table].to_schema().columns
    return {name: column.dtype.type for name, column in columns.items()}


def table_frame(table: str, rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """Rows as a DataFrame typed by the table's schema (typed even when empty)."""
    return pl.DataFrame(list(rows), schema=polars_schema(table), strict=False)


class WarehouseError(RuntimeError):
    pass


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rows = con.sql(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        params=[table],
    ).fetchall()
    return dict(rows)


def _add_new_columns(con: duckdb.DuckDBPyConnection, table: str) -> None:
    """A table written before its schema gained a column gets that column
    (NULL in the old rows), so a newer loop can write to an older warehouse."""
    existing = _columns(con, table)
    missing = [c for c in polars_schema(table) if c not in existing]
    if not missing:
        return
    empty = table_frame(table, [])  # noqa: F841 (read by DuckDB's replacement scan)
    con.execute("CREATE OR REPLACE TEMP TABLE clawloop_typed AS SELECT * FROM empty")
    types = _columns(con, "clawloop_typed")
    for column in missing:
        con.execute(f'ALTER TABLE {table} ADD COLUMN "{column}" {types[column]}')


class Warehouse(dg.ConfigurableResource, ABC):
    @abstractmethod
    def replace(self, table: str, rows: pl.DataFrame, scope: Mapping[str, Any]) -> int:
        """Validate `rows`, then in one transaction delete the rows matching
        `scope` (e.g. {"round": k, "phase": "validation"}) and insert `rows`."""

    @abstractmethod
    def read(self, table: str, where: Mapping[str, Any] | None = None) -> pl.DataFrame: ...

    @abstractmethod
    def query(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame: ...


class DuckDBWarehouse(Warehouse):
    """A DuckDB file under $CLAWLOOP_HOME. DuckDB allows one writer process, so
    connections are short-lived and a locked file is retried briefly."""

    path: str = ""
    _run_lock: RunLock | None = PrivateAttr(default=None)

    def database_path(self) -> Path:
        return Path(self.path) if self.path else paths.warehouse_path()

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """A run holds the warehouse's run lock from start to end: a second
        run (another `clawloop run`, a UI launch) is refused, naming the
        holder. Reads outside a run take no lock."""
        if context.run_id is None:
            return
        run = context.dagster_run
        partition = run.tags.get("dagster/partition") if run is not None else None
        self._run_lock = acquire_run_lock(self.database_path(), context.run_id, partition)
        try:
            self._report_dead_holder(context, self._run_lock.previous_holder)
        except Exception:
            # Dagster skips teardown when setup fails: let go here.
            self._run_lock.release()
            self._run_lock = None
            raise

    def teardown_after_execution(self, context: dg.InitResourceContext) -> None:
        if self._run_lock is not None:
            self._run_lock.release()
            self._run_lock = None

    def _report_dead_holder(self, context: dg.InitResourceContext, holder: dict | None) -> None:
        """The last holder died holding the lock (kill -9, power loss): nothing
        marks its run failed on a laptop (no run monitoring), so its successor
        does, in the same instance."""
        if not holder or not holder.get("run_id") or context.instance is None:
            return
        dead = context.instance.get_run_by_id(holder["run_id"])
        if dead is None or dead.is_finished:
            return
        context.instance.report_run_failed(
            dead, f"its process (pid {holder.get('pid')}) died holding the warehouse run lock "
                  f"(found by run {context.run_id}); its partial work is replaced by the rerun")

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        db = self.database_path()
        db.parent.mkdir(parents=True, exist_ok=True)
        if read_only and not db.exists():
            read_only = False  # create it so that reads of a fresh home work
        last_error: Exception | None = None
        for attempt in range(50):
            try:
                con = duckdb.connect(str(db), read_only=read_only)
                break
            except duckdb.IOException as exc:  # held by another writer
                last_error = exc
                time.sleep(0.1 * (attempt + 1))
        else:
            raise WarehouseError(f"warehouse {db} is locked by another process: {last_error}")
        try:
            yield con
        finally:
            con.close()

    def replace(self, table: str, rows: pl.DataFrame, scope: Mapping[str, Any]) -> int:
        if table not in TABLES:
            raise WarehouseError(f"unknown warehouse table {table!r}; known: {sorted(TABLES)}")
        rows = TABLES[table].validate(rows.select(list(polars_schema(table))))
        for column, value in scope.items():
            outside = rows.filter(pl.col(column) != value)
            if outside.height:
                raise WarehouseError(f"{table}: {outside.height} rows outside the scope {column}={value!r}")
        clause = " AND ".join(f"{column} = ?" for column in scope)
        with self.connect() as con:
            empty = table_frame(table, [])  # noqa: F841 (read by DuckDB's replacement scan)
            con.execute(f"CREATE TABLE IF NOT EXISTS {table} AS SELECT * FROM empty")
            _add_new_columns(con, table)
            con.execute("BEGIN TRANSACTION")
            try:
                con.execute(f"DELETE FROM {table} WHERE {clause}", list(scope.values()))
                if rows.height:
                    con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM rows")
                con.execute("COMMIT")
            except Exception:
                con.execute("ROLLBACK")
                raise
        return rows.height

    def read(self, table: str, where: Mapping[str, Any] | None = None) -> pl.DataFrame:
        if table not in TABLES:
            raise WarehouseError(f"unknown warehouse table {table!r}; known: {sorted(TABLES)}")
        where = where or {}
        clause = (" WHERE " + " AND ".join(f"{c} = ?" for c in where)) if where else ""
        with self.connect(read_only=True) as con:
            exists = con.sql(
                "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", params=[table]
            ).fetchall()[0][0]
            if not exists:
                return table_frame(table, [])
            result = con.sql(f"SELECT * FROM {table}{clause}", params=list(where.values()))
            frame = pl.from_arrow(result.to_arrow_table())
        # A column the schema gained after the table was written reads as NULL,
        # as _add_new_columns will store it, so a newer loop reads an older warehouse.
        schema = polars_schema(table)
        frame = frame.with_columns(pl.lit(None, dtype=schema[c]).alias(c) for c in schema if c not in frame.columns)
        return frame.select(list(schema)).cast(schema)

    def query(self, sql: str, params: list[Any] | None = None) -> pl.DataFrame:
        with self.connect(read_only=True) as con:
            return pl.from_arrow(con.sql(sql, params=params or []).to_arrow_table())

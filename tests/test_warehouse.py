import polars as pl
import pytest
from pandera.errors import SchemaError

from resources.warehouse import DuckDBWarehouse, WarehouseError, table_frame


def splits(round_key, *pairs):
    return table_frame("task_splits", [{"round": round_key, "task_id": t, "split": s} for t, s in pairs])


def test_replace_is_idempotent_and_scoped(tmp_path):
    warehouse = DuckDBWarehouse(path=str(tmp_path / "w.duckdb"))
    warehouse.replace("task_splits", splits("round-0001", ("a", "train"), ("b", "heldout")), {"round": "round-0001"})
    warehouse.replace("task_splits", splits("round-0002", ("c", "train")), {"round": "round-0002"})
    warehouse.replace("task_splits", splits("round-0001", ("a", "train"), ("b", "heldout")), {"round": "round-0001"})
    assert warehouse.read("task_splits").height == 3
    assert warehouse.read("task_splits", {"round": "round-0002"})["task_id"].to_list() == ["c"]


def test_invalid_rows_are_rejected_and_nothing_stored_is_lost(tmp_path):
    warehouse = DuckDBWarehouse(path=str(tmp_path / "w.duckdb"))
    warehouse.replace("task_splits", splits("round-0001", ("a", "train")), {"round": "round-0001"})
    with pytest.raises(SchemaError, match="split"):
        warehouse.replace("task_splits", splits("round-0001", ("a", "bogus")), {"round": "round-0001"})
    with pytest.raises(WarehouseError, match="outside the scope"):
        warehouse.replace("task_splits", splits("round-0002", ("z", "train")), {"round": "round-0001"})
    assert warehouse.read("task_splits")["split"].to_list() == ["train"]


def test_reading_a_table_never_written_gives_typed_empty_frame(tmp_path):
    frame = DuckDBWarehouse(path=str(tmp_path / "w.duckdb")).read("rollouts")
    assert frame.is_empty() and frame.schema["token_ids"] == pl.List(pl.Int64)


def test_list_columns_round_trip(tmp_path):
    warehouse = DuckDBWarehouse(path=str(tmp_path / "w.duckdb"))
    row = {"round": "round-0001", "capability_id": "c", "track": "analysis", "description": "d", "skills": ["x", "y"],
           "route": "capability"}
    warehouse.replace("capabilities", table_frame("capabilities", [row]), {"round": "round-0001"})
    assert warehouse.read("capabilities")["skills"].to_list() == [["x", "y"]]


def test_a_table_from_an_older_schema_gains_the_new_columns(tmp_path):
    import duckdb

    path = tmp_path / "w.duckdb"
    with duckdb.connect(str(path)) as con:  # task_splits as an older loop wrote it: no "split" column
        con.execute("CREATE TABLE task_splits (round VARCHAR, task_id VARCHAR)")
        con.execute("INSERT INTO task_splits VALUES ('round-0001', 'old')")
    warehouse = DuckDBWarehouse(path=str(path))
    # Read before any write adds the column: the missing column reads as NULL.
    assert warehouse.read("task_splits").to_dicts() == [{"round": "round-0001", "task_id": "old", "split": None}]
    warehouse.replace("task_splits", splits("round-0002", ("new", "train")), {"round": "round-0002"})
    rows = {r["task_id"]: r["split"] for r in warehouse.read("task_splits").iter_rows(named=True)}
    assert rows == {"old": None, "new": "train"}

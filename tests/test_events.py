"""read_events: every accepted input type, timestamp conversion, and every bad-input message."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from seqenc.data.events import epoch_seconds, read_events
from seqenc.data.schema import EventSchema
from seqenc.errors import SeqencError

T0 = 1_600_000_000  # 2020-09-13T12:26:40Z


def frame(**overrides) -> pd.DataFrame:
    data = {"entity_id": [1, 1, 2], "item_id": [10, 11, 10], "timestamp": [T0, T0 + 5, T0 + 9]}
    data.update(overrides)
    return pd.DataFrame(data)


def test_types_of_a_plain_frame():
    table = read_events(frame(extra=[0, 0, 0]))
    assert table.column_names == ["entity_id", "item_id", "timestamp"]
    assert table.schema.types == [pa.int64(), pa.int64(), pa.float64()]
    assert table["timestamp"].to_pylist() == [T0, T0 + 5, T0 + 9]


@pytest.mark.parametrize(
    "ids",
    [
        pd.Series(["a", "b", "a"], dtype="string"),
        pd.Series(["a", "b", "a"], dtype=object),
        pd.Series(["a", "b", "a"], dtype="category"),
    ],
)
def test_string_ids_become_large_string(ids):
    table = read_events(frame(entity_id=ids, item_id=ids))
    assert table.schema.field("entity_id").type == pa.large_string()
    assert table["item_id"].to_pylist() == ["a", "b", "a"]


def test_whole_float_ids_become_int_and_fractional_ones_text():
    assert read_events(frame(item_id=[1.0, 2.0, 3.0]))["item_id"].type == pa.int64()
    assert read_events(frame(item_id=[1.5, 2.0, 3.0]))["item_id"].to_pylist() == ["1.5", "2", "3"]


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_datetime_units(unit):
    times = pd.to_datetime([T0, T0 + 5, T0 + 9], unit="s").astype(f"datetime64[{unit}]")
    assert read_events(frame(timestamp=times))["timestamp"].to_pylist() == [T0, T0 + 5, T0 + 9]


def test_timezone_aware_is_converted_to_utc_and_naive_taken_as_utc():
    naive = pd.Series(pd.to_datetime(["2020-01-01 12:00", "2020-01-01 13:00", "2020-01-02 00:00"]))
    aware = naive.dt.tz_localize("Europe/Paris")  # UTC+1 in winter
    utc = read_events(frame(timestamp=naive))["timestamp"].to_numpy()
    paris = read_events(frame(timestamp=aware))["timestamp"].to_numpy()
    assert utc[0] == dt.datetime(2020, 1, 1, 12, tzinfo=dt.timezone.utc).timestamp()
    np.testing.assert_array_equal(utc - paris, 3600.0)


def test_iso_strings_with_and_without_offsets():
    texts = ["2020-01-01T00:00:00Z", "2020-01-01 01:00:00", "2020-01-01T03:00:00+01:00"]
    got = read_events(frame(timestamp=texts))["timestamp"].to_numpy()
    base = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc).timestamp()
    np.testing.assert_array_equal(got - base, [0, 3600, 7200])


def test_arrow_table_with_dates_and_float_seconds():
    table = pa.table(
        {
            "entity_id": pa.array(["x", "y", "x"]).dictionary_encode(),
            "item_id": pa.array([1, 2, 3], pa.int16()),
            "timestamp": pa.array([dt.date(1970, 1, 2)] * 3),
        }
    )
    out = read_events(table)
    assert out["timestamp"].to_pylist() == [86400.0] * 3
    assert out["entity_id"].type == pa.large_string()
    seconds = read_events(frame(timestamp=[0.5, 1.25, 2.0]))["timestamp"].to_pylist()
    assert seconds == [0.5, 1.25, 2.0]


def test_categorical_and_numeric_columns():
    schema = EventSchema(categorical=("kind",), numeric=("amount",))
    df = frame(kind=["buy", None, "view"], amount=[1, 2.5, -3])
    table = read_events(df, schema)
    assert table.column_names == schema.columns
    assert table["amount"].type == pa.float32()
    assert table["kind"].to_pylist() == ["buy", None, "view"]  # null categories are allowed
    parsed = read_events(frame(kind=[1, 2, 3], amount=["1", " 2.5", "1e3"]), schema)
    assert parsed["amount"].to_pylist() == [1.0, 2.5, 1000.0]


def test_no_timestamp_schema():
    table = read_events(frame().drop(columns="timestamp"), EventSchema(timestamp=None))
    assert table.column_names == ["entity_id", "item_id"]


# --- files --------------------------------------------------------------------------------------


def test_parquet_csv_tsv_gz_glob_and_directory(tmp_path):
    df = frame(unused=["p", "q", "r"])
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "a.parquet")
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "b.pq")
    df.to_csv(tmp_path / "c.csv", index=False)
    df.to_csv(tmp_path / "d.csv.gz", index=False)
    df.to_csv(tmp_path / "e.tsv", index=False, sep="\t")
    expected = read_events(df)
    for source in ["a.parquet", "b.pq", "c.csv", "d.csv.gz", "e.tsv"]:
        assert read_events(tmp_path / source).equals(expected), source
    both = read_events([tmp_path / "a.parquet", str(tmp_path / "c.csv")])
    assert both.num_rows == 6 and both["item_id"].type == pa.int64()
    assert read_events(str(tmp_path / "*.csv*")).num_rows == 6
    assert read_events(tmp_path).num_rows == 6  # a directory means its Parquet files


def test_csv_whose_ids_turn_to_text_after_the_first_block(tmp_path):
    n = 300_000  # more than Arrow's first inference block
    ids = [str(i) for i in range(n - 1)] + ["user-x"]
    pd.DataFrame({"entity_id": ids, "item_id": 1, "timestamp": T0}).to_csv(
        tmp_path / "log.csv", index=False
    )
    table = read_events(tmp_path / "log.csv")
    assert table["entity_id"].type == pa.large_string()
    assert table["entity_id"][-1].as_py() == "user-x"


def test_files_with_int_and_text_ids_are_compared_as_text(tmp_path):
    frame().to_csv(tmp_path / "a.csv", index=False)
    frame(entity_id=["u", "v", "w"]).to_csv(tmp_path / "b.csv", index=False)
    table = read_events([tmp_path / "a.csv", tmp_path / "b.csv"])
    assert table["entity_id"].to_pylist() == ["1", "1", "2", "u", "v", "w"]


# --- bad input ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "df, schema, pieces",
    [
        (frame().drop(columns="item_id"), EventSchema(), ["'item_id'", "available", "timestamp"]),
        (frame(entity_id=[1, None, 2]), EventSchema(), ["'entity_id'", "null entity", "row 1"]),
        (frame(item_id=["a", "b", None]), EventSchema(), ["'item_id'", "null item", "row 2"]),
        (frame(timestamp=[T0, None, T0]), EventSchema(), ["'timestamp'", "null", "row 1"]),
        (
            frame(timestamp=pd.to_datetime([T0, None, T0], unit="s")),
            EventSchema(),
            ["'timestamp'", "NaT", "row 1"],
        ),
        (
            frame(timestamp=["2020-01-01", "2020-01-02", "next tuesday"]),
            EventSchema(),
            ["'timestamp'", "ISO-8601", "row 2", "next tuesday"],
        ),
        (
            frame(timestamp=[T0 * 1000] * 3),
            EventSchema(),
            ["'timestamp'", "SECONDS", "milliseconds", "row 0"],
        ),
        (frame(x=["1", "two", "3"]), EventSchema(numeric=("x",)), ["'x'", "non-numeric", "two"]),
        (frame(x=[1.0, np.nan, 3]), EventSchema(numeric=("x",)), ["'x'", "NaN", "row 1"]),
        (frame(x=[1.0, 2, np.inf]), EventSchema(numeric=("x",)), ["'x'", "infinite", "row 2"]),
        (frame(x=[1.0, 2, 1e39]), EventSchema(numeric=("x",)), ["'x'", "float32", "row 2"]),
        (frame(item_id=[1, "a", 2.5]), EventSchema(), ["'item_id'", "mixed"]),
        (frame().iloc[:0], EventSchema(), ["empty", "0 rows"]),
    ],
)
def test_bad_frames(df, schema, pieces):
    with pytest.raises(SeqencError) as info:
        read_events(df, schema)
    for piece in pieces:
        assert piece in str(info.value)


def test_nan_in_arrow_float_ids_counts_as_null():
    table = pa.table({"entity_id": [1.0, float("nan")], "item_id": [1, 2], "timestamp": [0, 1]})
    with pytest.raises(SeqencError, match="null entity id.*row 1"):
        read_events(table)


def test_bad_files(tmp_path):
    with pytest.raises(SeqencError, match="file not found.*nope.parquet"):
        read_events(tmp_path / "nope.parquet")
    with pytest.raises(SeqencError, match=r"no file matches the pattern .*\*\.csv"):
        read_events(str(tmp_path / "*.csv"))
    with pytest.raises(SeqencError, match="holds no Parquet files"):
        read_events(tmp_path)
    (tmp_path / "log.json").write_text("{}")
    with pytest.raises(SeqencError, match=r"unsupported file type.*log\.json"):
        read_events(tmp_path / "log.json")
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(SeqencError, match=r"cannot read Parquet.*broken\.parquet"):
        read_events(tmp_path / "broken.parquet")
    (tmp_path / "cols.csv").write_text("user,item,timestamp\n1,2,3\n")
    with pytest.raises(SeqencError, match=r"'entity_id'.*cols\.csv.*available.*'user'"):
        read_events(tmp_path / "cols.csv")
    (tmp_path / "ragged.csv").write_text("entity_id,item_id,timestamp\n1,2,3\n4,5\n")
    with pytest.raises(SeqencError, match=r"ragged\.csv"):
        read_events(tmp_path / "ragged.csv")


def test_epoch_seconds():
    assert epoch_seconds(T0) == T0
    assert epoch_seconds("2020-09-13T12:26:40Z") == T0
    assert epoch_seconds(dt.datetime(2020, 9, 13, 14, 26, 40)) == T0 + 7200  # naive = UTC
    assert epoch_seconds(pd.Timestamp(T0, unit="s", tz="Asia/Tokyo")) == T0
    with pytest.raises(SeqencError, match="'soon'"):
        epoch_seconds("soon")


def test_epoch_seconds_has_the_timestamp_columns_rules():
    assert epoch_seconds("1600000000") == epoch_seconds(np.int64(T0)) == T0  # CLI text = number
    assert epoch_seconds("1600000000.5") == T0 + 0.5
    for value in (T0 * 1000, str(T0 * 1000)):
        with pytest.raises(SeqencError, match="milliseconds"):
            epoch_seconds(value)
    with pytest.raises(SeqencError, match="point in time"):
        epoch_seconds(True)


@pytest.mark.parametrize("column", ["entity_id", "item_id"])
def test_boolean_ids_are_refused(column):
    with pytest.raises(SeqencError, match=f"'{column}' holds booleans"):
        read_events(frame(**{column: [True, True, False]}))


def test_every_file_must_have_every_column(tmp_path):
    frame().to_parquet(tmp_path / "a.parquet")
    frame().drop(columns="timestamp").to_parquet(tmp_path / "b.parquet")
    with pytest.raises(SeqencError, match=r"b\.parquet.*\['timestamp'\] not found"):
        read_events(tmp_path)


def test_csv_and_parquet_read_the_same_types(tmp_path):
    df = frame(entity_id=["007", "7", "8"])  # text in Parquet stays text; in CSV all digits: int
    df.to_parquet(tmp_path / "a.parquet")
    df.to_csv(tmp_path / "a.csv", index=False)
    assert read_events(tmp_path / "a.parquet")["entity_id"].to_pylist() == ["007", "7", "8"]
    assert read_events(tmp_path / "a.csv")["entity_id"].to_pylist() == [7, 7, 8]
    mixed = read_events([tmp_path / "a.parquet", tmp_path / "a.csv"])["entity_id"]
    assert mixed.to_pylist() == ["007", "7", "8", "007", "7", "8"]  # any text file: all text

"""read_events: every accepted input type, timestamp conversion, and every bad-input message."""

from __future__ import annotations

import datetime as dt
import decimal

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
    df = frame(entity_id=["007", "7", "8"])  # "007" and "7" are two accounts, in any file type
    df.to_parquet(tmp_path / "a.parquet")
    df.to_csv(tmp_path / "a.csv", index=False)
    assert read_events(tmp_path / "a.parquet")["entity_id"].to_pylist() == ["007", "7", "8"]
    assert read_events(tmp_path / "a.csv")["entity_id"].to_pylist() == ["007", "7", "8"]
    mixed = read_events([tmp_path / "a.parquet", tmp_path / "a.csv"])["entity_id"]
    assert mixed.to_pylist() == ["007", "7", "8", "007", "7", "8"]  # any text file: all text
    frame(entity_id=["7", "-8", "9"]).to_csv(tmp_path / "b.csv", index=False)
    assert read_events(tmp_path / "b.csv")["entity_id"].to_pylist() == [7, -8, 9]


# --- issue 28: id types, mixed kinds, clear errors for every dtype --------------------------------


@pytest.mark.parametrize("written", ["007", "+7", " 7", "-0"])
def test_csv_integers_not_written_canonically_keep_the_column_text(tmp_path, written):
    """Issue 28, 5b: a CSV merged "007" and "7" into one account (both read as 7)."""
    path = tmp_path / "log.csv"
    path.write_text(f"entity_id,item_id,timestamp\n{written},1,{T0}\n7,1,{T0}\n")
    ids = read_events(path)["entity_id"].to_pylist()
    assert ids == [written, "7"]


def test_id_types_string_keeps_text_and_int_reads_integers(tmp_path):
    path = tmp_path / "log.csv"
    path.write_text(f"entity_id,item_id,timestamp\n0007,000156,{T0}\n7,156,{T0}\n")
    as_text = read_events(path, EventSchema(id_types="string"))
    assert as_text["entity_id"].to_pylist() == ["0007", "7"]
    assert as_text["item_id"].to_pylist() == ["000156", "156"]
    as_int = read_events(path, EventSchema(id_types={"entity_id": "int", "item_id": "auto"}))
    assert as_int["entity_id"].to_pylist() == [7, 7]  # asked for: "0007" is the integer 7
    assert as_int["item_id"].to_pylist() == ["000156", "156"]
    numbers = frame(entity_id=[7.0, 8.0, 7.0], item_id=np.array([10, 2**40, 10]))
    typed = read_events(numbers, EventSchema(id_types="string"))
    assert typed["entity_id"].to_pylist() == ["7", "8", "7"]
    assert typed["item_id"].to_pylist() == ["10", str(2**40), "10"]
    kinds = EventSchema(categorical=("kind",), id_types={"kind": "string"})
    assert read_events(frame(kind=[1, None, 2]), kinds)["kind"].to_pylist() == ["1", None, "2"]


@pytest.mark.parametrize(
    "df, pieces",
    [
        (frame(entity_id=["7", "x7", "8"]), ["'entity_id'", "not an integer", "row 1", "x7"]),
        (frame(entity_id=[7.0, 7.5, 8.0]), ["'entity_id'", "whole number", "row 1", "7.5"]),
        (frame(entity_id=["1", "2", "9" * 20]), ["'entity_id'", "beyond int64", "row 2"]),
    ],
)
def test_id_types_int_refuses_what_is_not_an_integer(df, pieces):
    with pytest.raises(SeqencError) as info:
        read_events(df, EventSchema(id_types={"entity_id": "int"}))
    for piece in pieces:
        assert piece in str(info.value)


def test_id_types_are_validated():
    with pytest.raises(SeqencError, match="id_types.*'amount'.*not an id column"):
        EventSchema(numeric=("amount",), id_types={"amount": "string"})
    with pytest.raises(SeqencError, match=r"id_types\['item_id'\] must be one of"):
        EventSchema(id_types={"item_id": "text"})
    schema = EventSchema(categorical=("k",), id_types="string")
    assert schema.id_types == {"entity_id": "string", "item_id": "string", "k": "string"}
    assert schema.to_dict()["id_types"] == schema.id_types
    assert "id_types" not in EventSchema().to_dict()  # older configurations keep their hash
    assert hash(schema) == hash(EventSchema(categorical=("k",)))


@pytest.mark.parametrize(
    "column, values, kinds",
    [
        ("timestamp", [pd.Timestamp("2020-01-01"), pd.Timestamp("2020-01-02"), 5], "number"),
        (
            "timestamp",
            [pd.Timestamp("2020-01-01"), "2020-01-02", pd.Timestamp("2020-01-02")],
            "text",
        ),
        ("entity_id", [7, "007", 8], "text"),
        ("item_id", [True, 1, 2], "boolean"),
    ],
)
def test_object_columns_mixing_kinds_of_values_are_refused(column, values, kinds):
    """Issue 28, 7: an integer among Timestamps became a 1970 time that passed every as_of."""
    with pytest.raises(SeqencError) as info:
        read_events(frame(**{column: pd.Series(values, dtype=object)}))
    message = str(info.value)
    assert f"column {column!r} holds mixed kinds" in message and f"first {kinds}" in message
    assert "\n" not in message


def test_mixed_numbers_in_a_numeric_column_are_refused_by_row():
    df = frame(amount=pd.Series([1.5, 2, "3"], dtype=object))
    with pytest.raises(SeqencError, match=r"'amount'.*mixed kinds.*first text at row 2"):
        read_events(df, EventSchema(numeric=("amount",)))
    fine = frame(amount=pd.Series([1.5, 2, decimal.Decimal("2.25")], dtype=object))
    assert read_events(fine, EventSchema(numeric=("amount",)))["amount"].to_pylist() == [
        1.5,
        2.0,
        2.25,
    ]


def test_integer_nanoseconds_name_their_unit_and_row():
    for unit, factor in [("nanoseconds", 10**9), ("microseconds", 10**6), ("milliseconds", 10**3)]:
        with pytest.raises(SeqencError) as info:
            read_events(frame(timestamp=[T0, T0 * factor + 1, T0]))
        message = str(info.value)
        assert "'timestamp'" in message and unit in message and "row 1" in message
    with pytest.raises(SeqencError, match="nanoseconds"):
        epoch_seconds(T0 * 10**9)


def test_decimals_are_numbers_and_integral_decimal_ids_integers():
    D = decimal.Decimal
    schema = EventSchema(numeric=("amount",))
    objects = frame(amount=[D("1.10"), D("2"), D("-3.5")])
    assert read_events(objects, schema)["amount"].to_pylist() == pytest.approx([1.1, 2, -3.5])
    table = pa.table(
        {
            "entity_id": pa.array([D(7), D(8), D(7)], pa.decimal128(20, 0)),
            "item_id": pa.array([D("1.5"), D("2"), D("1.5")], pa.decimal128(5, 1)),
            "timestamp": pa.array([D(T0), D(T0 + 1), D(T0 + 2)], pa.decimal128(12, 0)),
            "amount": pa.array([D("1.25"), D("2"), D("0")], pa.decimal128(6, 2)),
        }
    )
    out = read_events(table, schema)
    assert out["entity_id"].to_pylist() == [7, 8, 7]
    assert out["item_id"].to_pylist() == ["1.5", "2.0", "1.5"]  # as written by the decimal type
    assert out["timestamp"].to_pylist() == [T0, T0 + 1, T0 + 2]
    assert out["amount"].to_pylist() == [1.25, 2.0, 0.0]


def test_far_future_times():
    """as_of="9999-12-31" raised OverflowError; ISO text that far out, a raw ArrowInvalid."""
    end = dt.datetime(9999, 12, 31, tzinfo=dt.timezone.utc).timestamp()
    assert epoch_seconds("9999-12-31") == epoch_seconds(dt.datetime(9999, 12, 31)) == end
    got = read_events(frame(timestamp=["2020-01-01", "9999-12-31", "2020-01-01"]))["timestamp"]
    assert got[1].as_py() == end


def test_an_instant_is_one_float_whatever_its_unit():
    """A time and an as_of equal to it compare equal, so `as_of` keeps the event at that time."""
    instant = pd.Timestamp("2024-02-29 23:59:58.123456789", tz="UTC")
    reference = epoch_seconds(instant)
    for unit in ("ns", "us", "ms", "s"):
        t = instant.floor({"ns": "ns", "us": "us", "ms": "ms", "s": "s"}[unit])
        col = pd.Series([t] * 3).astype(f"datetime64[{unit}, UTC]")
        assert read_events(frame(timestamp=col))["timestamp"][0].as_py() == epoch_seconds(t)
    assert reference == pytest.approx(instant.value / 1e9, abs=1e-6)


def test_big_integers_in_numeric_and_tie_breaker_columns():
    schema = EventSchema(numeric=("amount",), tie_breakers=("seq",))
    df = frame(amount=[2**60 + 1, 1, 2], seq=np.array([2**40, 1, 2], dtype=np.uint64))
    out = read_events(df, schema)
    assert out["amount"][0].as_py() == pytest.approx(2.0**60)
    assert out["seq"].to_pylist() == [2**40, 1, 2]
    df = frame(seq=np.array([1, 2**63 + 5, 2], dtype=np.uint64))
    with pytest.raises(SeqencError, match="'seq': integer beyond int64.*row 1"):
        read_events(df, EventSchema(tie_breakers=("seq",)))


def test_uint64_ids_beyond_int64_need_string_ids():
    ids = np.array([2**63 + 5, 1, 2**63 + 5], dtype=np.uint64)
    with pytest.raises(SeqencError, match=r"'entity_id'.*beyond int64.*'string'.*row 0"):
        read_events(frame(entity_id=ids))
    as_text = read_events(frame(entity_id=ids), EventSchema(id_types={"entity_id": "string"}))
    assert as_text["entity_id"].to_pylist() == [str(2**63 + 5), "1", str(2**63 + 5)]


def test_other_pandas_dtypes():
    schema = EventSchema(categorical=("kind", "size"))
    df = frame(
        kind=pd.array([1, None, 2], dtype="Int64"),  # nullable integers: NA is a null category
        size=pd.Categorical(["s", "m", "s"], categories=["s", "m", "l", "xl"]),  # unused: ignored
    )
    out = read_events(df, schema)
    assert out["kind"].to_pylist() == [1, None, 2] and out["size"].to_pylist() == ["s", "m", "s"]
    paris = pd.Timestamp("2020-01-01 12:00", tz="Europe/Paris")
    york = pd.Timestamp("2020-01-01 12:00", tz="America/New_York")
    zones = frame(timestamp=pd.Series([paris, york, paris.tz_localize(None)], dtype=object))
    got = read_events(zones)["timestamp"].to_pylist()  # each zone converted, naive taken as UTC
    assert got == [paris.timestamp(), york.timestamp(), paris.tz_localize(None).timestamp()]
    with pytest.raises(SeqencError, match="'entity_id'.*null entity id.*row 1"):
        read_events(frame(entity_id=pd.array([1, None, 2], dtype="Int64")))


def test_csv_tie_breakers_are_numbers_and_files_may_store_them_differently(tmp_path):
    """A CSV sequence number was ordered as text ("10" before "9"); files storing a tie-breaker as
    integers and floats failed with a raw Arrow schema error."""
    from seqenc.data.sequences import build_sequences

    schema = EventSchema(tie_breakers=("seq",))
    (tmp_path / "log.csv").write_text(
        f"entity_id,item_id,timestamp,seq\n1,100,{T0},10\n1,900,{T0},9\n1,200,{T0},11\n"
    )
    table = read_events(tmp_path / "log.csv", schema)
    assert table["seq"].to_pylist() == [10, 9, 11] and table["seq"].type == pa.int64()
    store, vocabs = build_sequences(tmp_path / "log.csv", schema, keep_newest=None)
    assert vocabs.item.decode(store.items).tolist() == [900, 100, 200]  # seq 9, 10, 11

    base = frame(seq=[1, 2, 3])
    base.to_parquet(tmp_path / "int.parquet")
    base.assign(seq=[0.5, 2.5, 3.5]).to_parquet(tmp_path / "float.parquet")
    both = read_events([tmp_path / "int.parquet", tmp_path / "float.parquet"], schema)
    assert both["seq"].to_pylist() == [1, 2, 3, 0.5, 2.5, 3.5]
    mixed = [tmp_path / "int.parquet", tmp_path / "log.csv"]
    assert read_events(mixed, schema)["seq"].to_pylist() == [1, 2, 3, 10, 9, 11]
    base.assign(seq=["a", "b", "c"]).to_parquet(tmp_path / "text.parquet")
    with pytest.raises(SeqencError, match="'seq' holds numbers in some file.*and text"):
        read_events([tmp_path / "int.parquet", tmp_path / "text.parquet"], schema)
    base.assign(seq=pd.to_datetime([T0] * 3, unit="s")).to_parquet(tmp_path / "time.parquet")
    with pytest.raises(SeqencError, match="'seq' holds times in some files"):
        read_events([tmp_path / "int.parquet", tmp_path / "time.parquet"], schema)

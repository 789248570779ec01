"""Property-based tests of the reader and the export (issue 28).

Random logs with random id types (integers, text, text with leading zeros where "7" and "007" are
two accounts) and time types (datetime64 of every unit, timezone-aware, ISO text with offsets,
epoch seconds), shuffled, split over Parquet and CSV files (a list, or a directory tree of Parquet
files) and exported in random chunk sizes must give:

- the rows of the log, whatever the files (the reader; with a categorical column with nulls and a
  tie-breaker);
- one row per entity, and each entity's embedding within 1e-5 of ``encode()`` on the log as one
  ordered DataFrame (chunking, row order and file split change nothing else);
- ``as_of`` monotonicity: a later cut-off keeps every entity of an earlier one with at least as
  many events, and ``n_events_read`` is the number of events at or before the cut-off (up to max_len);
- input files byte for byte as they were.

Times are multiples of 0.25 s (of 1 s as datetime64[s]), exact in every unit and as float seconds;
``as_of`` falls on an event's time or after it. Examples are derandomized
(the suite is deterministic) and no example database is written.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny import random_bundle

from seqenc.data.events import read_events
from seqenc.data.schema import EventSchema
from seqenc.export import export_embeddings
from seqenc.inference import load_encoder

T0 = 1_700_000_000.0
N_ITEMS, MAX_LEN = 9, 5
SCHEMA = EventSchema(numeric=("amount",))
READ_SCHEMA = EventSchema(categorical=("channel",), numeric=("amount",), tie_breakers=("seq",))
ID_KINDS = ("int", "text", "zeros")
TIME_KINDS = ("s", "ms", "us", "ns", "tz", "iso", "epoch")
PROFILE = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def ids(codes: np.ndarray, kind: str, prefix: str) -> list:
    """Integer codes as ids of ``kind``: integers, text, or text where codes differing by a
    multiple of 3 differ only in leading zeros ("1", "01", "001", "2", ...)."""
    if kind == "int":
        return [int(c) for c in codes]
    if kind == "text":
        return [f"{prefix}-{c}" for c in codes]
    return ["0" * (int(c) % 3) + str(int(c) // 3 + 1) for c in codes]


def seconds(ticks: np.ndarray | int, kind: str) -> np.ndarray | float:
    """The time of ``ticks``: quarter seconds after T0, or whole seconds for datetime64[s]."""
    return T0 + ticks * (1.0 if kind == "s" else 0.25)


def times(ticks: np.ndarray, kind: str) -> pd.Series | np.ndarray:
    """:func:`seconds` in the representation ``kind``."""
    exact = seconds(ticks, kind)
    if kind == "epoch":
        return exact
    utc = pd.Series(pd.to_datetime(exact, unit="s", utc=True))
    if kind == "tz":
        return utc.dt.tz_convert("Asia/Kolkata")  # +05:30
    if kind == "iso":
        return utc.dt.tz_convert("America/Sao_Paulo").map(pd.Timestamp.isoformat)
    return utc.dt.tz_localize(None).astype(f"datetime64[{kind}]")


@st.composite
def logs(draw: st.DrawFn) -> dict:
    """A log (entity / item codes, times, amounts) and how to write it."""
    n_entities = draw(st.integers(1, 7))
    lengths = draw(st.lists(st.integers(1, 8), min_size=n_entities, max_size=n_entities))
    n = sum(lengths)
    return {
        "entity": np.repeat(np.arange(n_entities), lengths),
        "item": np.array(draw(st.lists(st.integers(0, N_ITEMS - 1), min_size=n, max_size=n))),
        "tick": np.array(draw(st.lists(st.integers(0, 40), min_size=n, max_size=n))),
        "amount": np.array(draw(st.lists(st.integers(-3, 3), min_size=n, max_size=n))) / 2,
        "seq": draw(st.lists(st.integers(0, 12), min_size=n, max_size=n)),
        "channel": draw(st.lists(st.none() | st.integers(0, 4), min_size=n, max_size=n)),
        "channel_kind": draw(st.sampled_from(ID_KINDS)),
        "entity_kind": draw(st.sampled_from(ID_KINDS)),
        "item_kind": draw(st.sampled_from(ID_KINDS)),
        "time_kind": draw(st.sampled_from(TIME_KINDS)),
        "order": np.array(draw(st.permutations(range(n)))),
        "cuts": sorted(draw(st.lists(st.integers(1, max(1, n - 1)), max_size=2, unique=True))),
        "formats": draw(st.lists(st.sampled_from(["parquet", "csv"]), min_size=3, max_size=3)),
        "layout": draw(st.sampled_from(["list", "tree"])),
    }


def frame(log: dict) -> pd.DataFrame:
    """The log as one DataFrame in its id and time types, in generation order; ``channel`` has
    nulls (nullable integers, or None among text) and ``seq`` is a tie-breaker."""
    present = [c for c in log["channel"] if c is not None]
    named = iter(ids(np.array(present, dtype=np.int64), log["channel_kind"], "web"))
    channel = [None if c is None else next(named) for c in log["channel"]]
    return pd.DataFrame(
        {
            "entity_id": ids(log["entity"], log["entity_kind"], "acct"),
            "item_id": ids(log["item"], log["item_kind"], "sku"),
            "timestamp": times(log["tick"], log["time_kind"]),
            "amount": log["amount"],
            "seq": log["seq"],
            "channel": pd.array(channel, dtype="Int64" if log["channel_kind"] == "int" else object),
        }
    )


def write(log: dict, root: Path) -> tuple[Path | list[Path], list[Path]]:
    """The shuffled log split into files: ``(source to read, every file written)``. A tree is a
    directory of Parquet files in nested folders; a list mixes Parquet and CSV."""
    shuffled = frame(log).iloc[log["order"]]
    pieces = np.split(np.arange(len(shuffled)), log["cuts"])
    files = []
    for k, rows in enumerate(pieces):
        part = shuffled.iloc[rows]
        if log["layout"] == "tree":
            path = root / "logs" / f"day={k}" / ("deep" if k % 2 else "") / f"part-{k}.parquet"
        else:
            path = root / f"part-{k}.{log['formats'][k]}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.suffix == ".csv":
            part.to_csv(path, index=False)
        else:
            part.to_parquet(path, index=False)
        files.append(path)
    return (root / "logs" if log["layout"] == "tree" else files), files


def sorted_rows(table: pa.Table, schema: EventSchema) -> list[tuple]:
    """Rows as comparable tuples (ids as text: what ``str`` of the id gives), sorted."""
    columns = [table[c].to_pylist() for c in table.column_names]
    for i, name in enumerate(table.column_names):
        if name in schema.id_columns:
            columns[i] = [str(v) for v in columns[i]]
    return sorted(zip(*columns, strict=True))


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One random-weights bundle per item id kind, built once; every item of the pool known."""
    root = tmp_path_factory.mktemp("bundles")
    codes = np.arange(N_ITEMS)
    out = {}
    for kind in ID_KINDS:
        pool = pd.DataFrame(
            {
                "entity_id": codes % 2,
                "item_id": ids(codes, kind, "sku"),
                "timestamp": T0 + codes,
                "amount": 0.0,
            }
        )
        out[kind] = random_bundle(root / kind, pool, SCHEMA, MAX_LEN, dropout=0.0)
    return out


@settings(PROFILE, max_examples=400)
@given(log=logs())
def test_the_reader_reads_the_rows_of_the_log_whatever_the_files(log, tmp_path_factory):
    root = tmp_path_factory.mktemp("read")
    source, _ = write(log, root)
    expected = read_events(frame(log), READ_SCHEMA)
    got = read_events(source, READ_SCHEMA)
    assert sorted_rows(got, READ_SCHEMA) == sorted_rows(expected, READ_SCHEMA)
    assert got["seq"].type == pa.int64()  # CSV numbers too: ordered 9 before 10
    if log["entity_kind"] == "int":
        assert got["entity_id"].type == pa.int64()
    if log["entity_kind"] == "zeros" and len(set(log["entity"])) > 1:  # "1" and "01" differ
        assert pa.types.is_large_string(got["entity_id"].type)


def digests(files: list[Path]) -> dict[Path, str]:
    return {f: hashlib.sha256(f.read_bytes()).hexdigest() for f in files}


def by_entity(df: pd.DataFrame) -> pd.DataFrame:
    return df.set_index(df["entity_id"].map(str)).sort_index()


@settings(PROFILE, max_examples=150)
@given(log=logs(), data=st.data())
def test_export_one_row_per_entity_chunking_and_order_independent(
    log, data, bundles, tmp_path_factory
):
    root = tmp_path_factory.mktemp("export")
    source, files = write(log, root)
    before = digests(files)
    n = len(log["order"])
    chunk_events = data.draw(st.integers(1, n + 1), label="chunk_events")
    cut = data.draw(st.sampled_from(sorted(set(log["tick"]))), label="as_of tick")  # an event's
    later = data.draw(st.integers(cut, 41), label="later as_of tick")
    encoder = load_encoder(bundles[log["item_kind"]], device="cpu")
    reference = by_entity(encoder.encode(frame(log)))

    def export(as_of: object, name: str) -> pd.DataFrame:
        output = export_embeddings(
            bundles[log["item_kind"]],
            source,
            root / name,
            as_of=as_of,
            chunk_events=chunk_events,
            batch_size=3,
            progress=False,
        )
        return by_entity(pd.read_parquet(output))

    everything = export(None, "all.parquet")
    assert everything.index.is_unique
    assert list(everything.index) == list(reference.index)
    np.testing.assert_allclose(
        np.stack(everything["embedding"]), np.stack(reference["embedding"]), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(everything["n_events_read"], reference["n_events_read"])

    kind = log["time_kind"]
    early, late = (export(seconds(q, kind), f"as_of-{q}.parquet") for q in (cut, later))
    keys = pd.Series(ids(log["entity"], log["entity_kind"], "acct")).map(str)
    for q, got in ((cut, early), (later, late)):
        counts = keys[log["tick"] <= q].value_counts().clip(upper=MAX_LEN).sort_index()
        assert list(got.index) == list(counts.index)  # entities with an event at or before as_of
        np.testing.assert_array_equal(got["n_events_read"], counts.to_numpy())
    assert set(early.index) <= set(late.index)
    assert (late.loc[early.index, "n_events_read"] >= early["n_events_read"]).all()
    assert digests(files) == before


def test_leading_zero_ids_are_two_accounts_in_every_chunking(bundles, tmp_path):
    """Issue 28, 5a: with small chunks "0007" and "7" came out twice, with two vectors each
    (partitions hashed the text, then the column turned into integers)."""
    accounts = ["0007", "7", "07", "8", "0008"]
    log = pd.DataFrame(
        {
            "entity_id": np.repeat(accounts, 3),
            "item_id": np.arange(15) % N_ITEMS,
            "timestamp": T0 + np.arange(15),
            "amount": 1.0,
        }
    )
    log.to_csv(tmp_path / "log.csv", index=False)
    reference = by_entity(load_encoder(bundles["int"], device="cpu").encode(log))
    for chunk_events in (1, 2, 4, 100):
        output = tmp_path / f"chunks-{chunk_events}.parquet"
        export_embeddings(
            bundles["int"], tmp_path / "log.csv", output, chunk_events=chunk_events, progress=False
        )
        got = by_entity(pd.read_parquet(output))
        assert sorted(got.index) == sorted(accounts) and got.index.is_unique
        np.testing.assert_allclose(
            np.stack(got["embedding"]), np.stack(reference["embedding"]), rtol=1e-5, atol=1e-5
        )

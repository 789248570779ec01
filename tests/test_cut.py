"""One cut (issue 54): every reader keeps exactly the events at or before ``as_of``, to the tick.

Each log has events on a grid of its time unit (s, ms, us, ns, or ISO text to the nanosecond)
around one instant ``E``; the cut-off is ``E`` - 1 ns, ``E`` or ``E`` + 1 ns. The reference is a
numpy comparison of integer nanoseconds. Near 2024 a float64 of epoch seconds cannot tell
instants 1 ns apart (its spacing is 238 ns), so a reader cutting on float seconds fails here.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqenc.cli import main as cli_main
from seqenc.data.cut import parse
from seqenc.data.datamodule import SequenceDataModule
from seqenc.data.events import Events, read_events
from seqenc.data.label_aggregates import label_aggregates
from seqenc.data.labels import labelled_view, read_labels
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.encoding import EncodeOptions
from seqenc.encoding.run import load_on
from seqenc.encoding.spark import encode_sorted
from seqenc.encoding.store import sequences, wide_inputs
from seqenc.errors import SeqencError
from seqenc.evaluate import aggregate_features, embed_at
from seqenc.evaluate.drift import known_items
from seqenc.export import export_embeddings
from seqenc.inference import load_encoder
from tests.tiny import random_bundle

SCHEMA = EventSchema()
FORMATS = ("s", "ms", "us", "ns", "iso")
STEP_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1, "iso": 1}
# 2024-01-01 plus a fraction of a second on the nanosecond grid: E is on the grid of every unit
# by rounding down to it below.
BASE_NS = 1_704_067_200 * 10**9 + 123_456_789
N_ITEMS = 6
DELTAS = (-1, 0, 1)  # the cut-off in nanoseconds from E
GRID = [[-2, 0, 1], [0, 0], [1, 2], [-1, 0, 3]]  # the fixed log's steps from E, per entity
FAST = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def instant(fmt: str) -> int:
    """``E`` in nanoseconds, on the grid of ``fmt``."""
    return BASE_NS - BASE_NS % STEP_NS[fmt]


def event_log(
    fmt: str, steps: list[list[int]], items: list[list[int]]
) -> tuple[pa.Table, np.ndarray]:
    """``(table, ns)``: entity ``i`` has an event ``steps[i][j]`` grid steps from ``E`` with item
    ``items[i][j]``; the timestamp column in ``fmt``; ``ns`` each row's time in nanoseconds."""
    entity = np.repeat(np.arange(len(steps)), [len(s) for s in steps])
    ns = instant(fmt) + np.concatenate([np.asarray(s, np.int64) for s in steps]) * STEP_NS[fmt]
    if fmt == "iso":  # naive ISO text to the nanosecond (UTC)
        times = pa.array([str(pd.Timestamp(int(t))) for t in ns])
    else:
        ticks = ns // STEP_NS[fmt]
        times = pa.array(ticks, pa.int64()).cast(pa.timestamp(fmt, "UTC"))
    item = np.concatenate([np.asarray(i, np.int64) for i in items])
    table = pa.table({"entity_id": entity, "item_id": item, "timestamp": times})
    return table, ns


def reference(table: pa.Table, ns: np.ndarray, cut_ns: np.ndarray | int) -> pd.Series:
    """Events at or before the cut per entity (entities with none left out): integer ticks."""
    kept = ns <= cut_ns
    ids = table["entity_id"].to_numpy()[kept]
    return pd.Series(ids).value_counts().sort_index().rename_axis("entity_id")


def as_given(cut_ns: int, form: str) -> object:
    """The cut-off as a user gives it."""
    ts = pd.Timestamp(cut_ns, unit="ns", tz="UTC")
    return {"timestamp": ts, "iso": str(ts.tz_localize(None)), "datetime64": ts.asm8}[form]


@dataclass
class Case:
    """A log around ``E`` (:func:`event_log` of ``fmt``, ``steps``, ``items``) and its cut-off
    ``E + delta`` ns as a user gives it in ``form`` (:func:`as_given`); shown by these fields
    alone where a test fails."""

    fmt: str
    steps: list[list[int]]
    items: list[list[int]]
    delta: int = 0
    form: str = "iso"

    @cached_property
    def log(self) -> tuple[pa.Table, np.ndarray]:
        return event_log(self.fmt, self.steps, self.items)

    @property
    def table(self) -> pa.Table:
        return self.log[0]

    @property
    def ns(self) -> np.ndarray:
        """Each row's time in nanoseconds."""
        return self.log[1]

    @property
    def cut_ns(self) -> int:
        return instant(self.fmt) + self.delta

    @property
    def as_of(self) -> object:
        return as_given(self.cut_ns, self.form)

    @property
    def want(self) -> pd.Series:
        """The reference: each entity's events at or before the cut-off."""
        return reference(self.table, self.ns, self.cut_ns)


def grid(fmt: str, delta: int = 0, copies: int = 1) -> Case:
    """The fixed log: :data:`GRID` ``copies`` times, each of its rows an entity, items in turn."""
    steps = GRID * copies
    return Case(fmt, steps, [[1 + j % N_ITEMS for j in range(len(s))] for s in steps], delta)


@st.composite
def cases(draw) -> Case:
    """A small log around ``E`` and a cut within 1 ns of it, given in any form."""
    fmt = draw(st.sampled_from(FORMATS))
    n = draw(st.integers(1, 4))
    steps = [draw(st.lists(st.integers(-3, 3), min_size=1, max_size=6)) for _ in range(n)]
    items = [[draw(st.integers(1, N_ITEMS)) for _ in s] for s in steps]
    delta = draw(st.sampled_from(DELTAS))
    form = draw(st.sampled_from(("timestamp", "iso", "datetime64")))
    return Case(fmt, steps, items, delta, form)


def every_item_log() -> pd.DataFrame:
    """A log holding every item, for the bundles' vocabularies."""
    t = pd.Timestamp(BASE_NS, unit="ns", tz="UTC") - pd.Timedelta(days=1)
    return pd.DataFrame(
        {
            "entity_id": np.arange(N_ITEMS) % 2,
            "item_id": np.arange(1, N_ITEMS + 1),
            "timestamp": t + pd.to_timedelta(np.arange(N_ITEMS), unit="s"),
        }
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("cut") / "bundle"
    random_bundle(path, every_item_log(), SCHEMA, 16, n_layers=1, causal=True)
    return str(path)


@pytest.fixture(scope="module")
def encoder(bundle):
    return load_encoder(bundle, "cpu")


@pytest.fixture(scope="module")
def fused(encoder):
    """The encoder's bundle as a fused one: a label head's aggregate layout in its metadata."""
    log = every_item_log()
    labels = read_labels(pd.DataFrame({"entity_id": [0, 1], "y": [0, 1]}), "entity_id", "y")
    layout, _ = label_aggregates(log, SCHEMA, labels, np.arange(2))
    return dataclasses.replace(encoder.meta, head={"aggregates": layout})


def counts_of(frame: pd.DataFrame, column: str = "n_events_read") -> pd.Series:
    return frame.set_index("entity_id")[column].sort_index().astype(np.int64).rename(None)


def same(got: pd.Series, want: pd.Series) -> None:
    assert got.index.tolist() == want.index.tolist()
    assert got.to_numpy().tolist() == want.to_numpy().tolist()


# ---------------------------------------------------------------------------------------------
# The parse and the one function


@FAST
@given(st.sampled_from(FORMATS), st.integers(-3, 3), st.sampled_from(DELTAS))
def test_at_or_before_is_the_integer_comparison(fmt, step, delta):
    from seqenc.data import cut as cut_module

    table, ns = event_log(fmt, [[step]], [[1]])
    cut_ns = instant(fmt) + delta
    cut = cut_module.parse(as_given(cut_ns, "iso"))
    col = table["timestamp"]
    if fmt == "iso":
        col = col.cast(pa.timestamp("ns"))
    ticks = col.cast(pa.int64()).to_numpy()
    per_second = cut_module.TICKS_PER_SECOND["ns" if fmt == "iso" else fmt]
    assert cut_module.at_or_before((ticks, per_second), cut).tolist() == (ns <= cut_ns).tolist()


def test_a_number_cut_compares_float_seconds_exactly():
    from seqenc.data import cut as cut_module

    cut = cut_module.parse(1_704_067_200.5)
    times = np.array([1_704_067_200.5, np.nextafter(1_704_067_200.5, np.inf)])
    assert cut_module.at_or_before((times, None), cut).tolist() == [True, False]
    assert cut_module.at_or_before(
        (np.array([1_704_067_200_500, 1_704_067_200_501]), 1000), cut
    ).tolist() == [True, False]


# ---------------------------------------------------------------------------------------------
# Every reader


@FAST
@given(cases())
def test_read_events_until(case):
    for source in (case.table, case.table.to_pandas()):
        got = read_events(source, SCHEMA, until=case.as_of)
        same(pd.Series(got["entity_id"].to_numpy()).value_counts().sort_index(), case.want)


@FAST
@given(cases())
def test_encode(encoder, case):
    if case.want.empty:
        with pytest.raises(SeqencError, match="no event at or before"):
            encoder.encode(case.table, as_of=case.as_of)
        return
    same(counts_of(encoder.encode(case.table, as_of=case.as_of, on_empty="skip")), case.want)


@FAST
@given(cases())
def test_spark_partitions(bundle, case):
    options = EncodeOptions(as_of=case.as_of, on_empty="skip")
    loaded = load_on(bundle, "cpu", options)
    batches = case.table.to_batches(max_chunksize=3)
    out = list(encode_sorted(batches, loaded, options, "entity_id", 4))
    got = (
        pa.Table.from_batches(out).to_pandas()
        if out
        else pd.DataFrame({"entity_id": [], "n_events_read": []})
    )
    same(counts_of(got), case.want)


@FAST
@given(cases())
def test_update(encoder, case):
    """A state of the events well before ``E``, then the rest with the cut: as ``encode``."""
    early = case.ns < instant(case.fmt) - 2 * STEP_NS[case.fmt]
    first = case.table.filter(pa.array(early))
    if first.num_rows == 0 or case.want.empty:
        return
    state = encoder.state(first, on_empty="skip")
    rest = case.table.filter(pa.array(~early))
    got, _ = encoder.update(state, rest, as_of=case.as_of, on_empty="skip")
    same(counts_of(got), case.want)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_export(bundle, tmp_path, fmt, delta):
    case = grid(fmt, delta)
    pq.write_table(case.table, tmp_path / "events.parquet")
    out = tmp_path / "out.parquet"
    export_embeddings(bundle, tmp_path / "events.parquet", out, as_of=case.as_of, progress=False)
    same(counts_of(pq.read_table(out).to_pandas()), case.want)


def per_row_labels(case: Case, deltas: list[int]) -> pd.DataFrame:
    """One label row per entity of ``case``'s log, each with its own cut-off ``E + delta`` (ns)."""
    ids = np.unique(case.table["entity_id"].to_numpy())
    when = pd.to_datetime(
        instant(case.fmt) + np.asarray(deltas[: len(ids)], np.int64), unit="ns", utc=True
    )
    return pd.DataFrame({"entity_id": ids, "as_of": when, "y": np.arange(len(ids)) % 2})


def row_cuts(case: Case, labels: pd.DataFrame) -> np.ndarray:
    """Each event's cut-off in nanoseconds: its entity's label row's (one row per entity)."""
    cuts = labels.set_index("entity_id")["as_of"].astype("int64")
    return cuts.loc[case.table["entity_id"].to_numpy()].to_numpy()


rows = st.tuples(cases(), st.lists(st.sampled_from(DELTAS), min_size=4, max_size=4))


@FAST
@given(rows)
def test_fine_tuning_label_rows(drawn):
    case, deltas = drawn
    table = case.table
    labels = per_row_labels(case, deltas)
    n, want = len(labels), reference(table, case.ns, row_cuts(case, labels))
    if labels["y"].nunique() < 2:  # a second class: the same entities a day later
        later = labels.assign(y=1 - labels["y"], as_of=labels["as_of"] + pd.Timedelta(days=1))
        labels = pd.concat([labels, later], ignore_index=True)
    dm = SequenceDataModule(
        table.to_pandas(), schema=SCHEMA, labels=labels, label_column="y", history_len=16
    )
    try:
        samples = labelled_view(dm.store, dm.label_table)
    except SeqencError as e:  # every row before its entity's first event: refused
        assert "lies before its entity's first event" in str(e)
        assert want.empty
        return
    mine = samples.rows < n  # the rows at E + delta (the later rows of a second class come after)
    ids = labels["entity_id"].to_numpy()[samples.rows[mine]]
    got = pd.Series((samples.view.ends - samples.view.starts)[mine], index=ids).sort_index()
    same(got, want)


@FAST
@given(rows)
def test_aggregates_and_the_probe_events(drawn):
    """The aggregates at one cut-off and at per-row cut-offs (what ``seqenc probe --events``
    computes for a label table with ``as_of``)."""
    case, deltas = drawn
    if not case.want.empty:
        got = aggregate_features(case.table, SCHEMA, as_of=case.as_of)
        same(counts_of(got, "n_events"), case.want)
    labels = per_row_labels(case, deltas)
    want = reference(case.table, case.ns, row_cuts(case, labels))
    if want.empty:
        return
    got = aggregate_features(case.table, SCHEMA, as_of=labels[["entity_id", "as_of"]])
    same(counts_of(got, "n_events"), want)


@FAST
@given(rows)
def test_label_aggregates(drawn):
    """A fused head's aggregates of each label row (fit time), cut at the label table's cut-offs;
    a row with no event left is 0."""
    case, deltas = drawn
    table, ns = case.log
    frame = per_row_labels(case, deltas)
    if frame["y"].nunique() < 2:  # a second class: the entity a day earlier, before its events
        earlier = frame.assign(y=1, as_of=frame["as_of"] - pd.Timedelta(days=1))
        frame = pd.concat([frame, earlier], ignore_index=True)
    labels = read_labels(frame, "entity_id", "y")
    entity = table["entity_id"].to_numpy()
    want = [  # naive, per label row: its entity's events at or before its cut-off, in ns
        int(((entity == e) & (ns <= t.value)).sum())
        for e, t in zip(frame["entity_id"], frame["as_of"], strict=True)
    ]
    if not any(want):
        with pytest.raises(SeqencError, match="no event at or before"):
            label_aggregates(table, SCHEMA, labels, np.arange(len(labels)))
        return
    layout, values = label_aggregates(table, SCHEMA, labels, np.arange(len(labels)))
    assert values[:, layout["names"].index("n_events")].astype(int).tolist() == want


@FAST
@given(cases())
def test_wide_inputs(encoder, fused, case):
    """A fused head's aggregates at encode time: the events at or before the encode's cut."""
    options = EncodeOptions(as_of=case.as_of, on_empty="skip")
    store, _ = sequences(case.table, fused, encoder.vocabs, options, None)
    wide = wide_inputs(case.table, store, fused, options.cut)
    names = fused.head["aggregates"]["names"]
    got = pd.Series(wide[:, names.index("n_events")], index=store.entity_ids.to_numpy())
    same(got.astype(np.int64), case.want)


@FAST
@given(rows)
def test_embed_at(encoder, drawn):
    case, deltas = drawn
    labels = per_row_labels(case, deltas)
    want = reference(case.table, case.ns, row_cuts(case, labels))
    if want.empty:
        return
    at = labels[["entity_id", "as_of"]]
    got = embed_at(encoder, case.table, at, columns=("n_events_read",))
    same(counts_of(got), want)


@FAST
@given(cases())
def test_drift_known_items(encoder, case):
    """The share of known items among the events at or before the cut: the events at ``E`` and
    later carry an item the model never saw."""
    table, ns, e = case.table, case.ns, instant(case.fmt)
    table = table.set_column(
        1, "item_id", pa.array(np.where(ns >= e, 999, table["item_id"].to_numpy()))
    )
    kept = ns <= case.cut_ns
    want = float((ns[kept] < e).mean()) if kept.any() else 0.0
    got = known_items({"m": encoder}, table, as_of=case.as_of)["m"]
    assert got == pytest.approx(want, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# The probe refuses embeddings taken at other cut-offs than the labels'


def probe(argv: list[str]) -> None:
    cli_main(["probe", *argv])


@pytest.mark.parametrize("taken", ["whole", "earlier", "csv"])
def test_probe_refuses_embeddings_not_taken_at_the_label_cut_offs(encoder, tmp_path, capsys, taken):
    case = grid("ns", delta=-1, copies=3)
    labels = per_row_labels(case, [0] * len(case.steps))
    labels.to_parquet(tmp_path / "labels.parquet")
    as_of = None if taken == "whole" else case.as_of
    emb = encoder.encode(case.table, as_of=as_of, on_empty="skip", output="arrow")
    if taken == "csv":
        emb.to_pandas().assign(embedding=lambda d: d["embedding"].map(list)).to_csv(
            tmp_path / "emb.csv"
        )
    path = tmp_path / ("emb.csv" if taken == "csv" else "emb.parquet")
    if taken != "csv":
        pq.write_table(emb, path)
    with pytest.raises(SystemExit) as exit_info:
        probe(
            [
                "--labels",
                str(tmp_path / "labels.parquet"),
                "--label-column",
                "y",
                "--embeddings",
                str(path),
            ]
        )
    assert exit_info.value.code == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "label rows have another cut-off" in err and "embed_at" in err


def test_probe_takes_embeddings_taken_at_the_label_cut_offs(encoder, tmp_path, capsys):
    case = grid("ns", delta=1, copies=10)
    labels = per_row_labels(case, [1] * len(case.steps))
    labels.to_parquet(tmp_path / "labels.parquet")
    emb = encoder.encode(case.table, as_of=case.as_of, output="arrow")
    pq.write_table(emb, tmp_path / "emb.parquet")
    probe(
        [
            "--labels",
            str(tmp_path / "labels.parquet"),
            "--label-column",
            "y",
            "--embeddings",
            str(tmp_path / "emb.parquet"),
            "--folds",
            "2",
        ]
    )
    assert "embeddings" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------
# The cut is one function


def test_every_reader_goes_through_the_one_function(encoder, bundle, fused, tmp_path, monkeypatch):
    """With ``at_or_before`` replaced by one that keeps nothing, no reader keeps an event: a
    reader comparing times with ``as_of`` on its own would."""
    from seqenc.data import cut as cut_module

    original = cut_module.at_or_before
    calls = []

    def nothing(times, cut):
        calls.append(type(cut).__name__)
        return np.zeros(len(times[0]), bool)

    for module in list(sys.modules.values()):
        if (module.__name__ or "").startswith("seqenc") and getattr(
            module, "at_or_before", None
        ) is original:
            monkeypatch.setattr(module, "at_or_before", nothing)
    case = grid("ns", delta=10**12)  # after every event: everything is in
    table, late = case.table, case.as_of
    assert read_events(table, SCHEMA, until=late).num_rows == 0
    with pytest.raises(SeqencError, match="no event at or before"):
        encoder.encode(table, as_of=late)
    options = EncodeOptions(as_of=late, on_empty="skip")
    assert (
        list(
            encode_sorted(
                table.to_batches(), load_on(bundle, "cpu", options), options, "entity_id", 4
            )
        )
        == []
    )
    pq.write_table(table, tmp_path / "events.parquet")
    export_embeddings(
        bundle, tmp_path / "events.parquet", tmp_path / "out.parquet", as_of=late, progress=False
    )
    assert pq.read_table(tmp_path / "out.parquet").num_rows == 0
    labels = per_row_labels(case, [10**12] * 4)
    with pytest.raises(SeqencError, match="first event"):
        dm = SequenceDataModule(
            table.to_pandas(), schema=SCHEMA, labels=labels, label_column="y", history_len=16
        )
        labelled_view(dm.store, dm.label_table)
    with pytest.raises(SeqencError):
        aggregate_features(table, SCHEMA, as_of=labels[["entity_id", "as_of"]])
    with pytest.raises(SeqencError):
        aggregate_features(table, SCHEMA, as_of=late)
    assert embed_at(encoder, table, labels[["entity_id", "as_of"]]).empty
    assert known_items({"m": encoder}, table, as_of=late)["m"] == 0.0
    state = encoder.state(table.filter(pa.array(np.arange(table.num_rows) == 0)), on_empty="skip")
    with pytest.raises(SeqencError):
        encoder.update(state, table, as_of=late)
    with pytest.raises(SeqencError, match="no event at or before"):
        label_aggregates(table, SCHEMA, read_labels(labels, "entity_id", "y"), np.arange(4))
    store, _ = build_sequences(Events(read_events(table, SCHEMA, exact=True), SCHEMA), SCHEMA)
    with pytest.raises(SeqencError, match="no event at or before"):
        wide_inputs(table, store, fused, parse(late))
    assert {"Cut", "RowCuts"} <= set(calls)


def test_no_other_module_parses_a_point_in_time():
    """``as_of`` is parsed in seqenc/data/cut.py alone: no other module defines a parser of it or
    converts it with pandas."""
    from pathlib import Path

    from seqenc.data import cut as cut_module

    root = Path(cut_module.__file__).parents[1]
    for path in root.rglob("*.py"):
        if path.name == "cut.py":
            continue
        text = path.read_text()
        for name in (
            "def epoch_seconds",
            "def instant_ticks",
            "def epoch_column",
            "def at_or_before",
        ):
            assert name not in text, (path, name)


@FAST
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.integers(-(2**55), 2**55), st.integers(1, N_ITEMS)),
        min_size=1,
        max_size=40,
    )
)
def test_histories_are_ordered_to_the_tick(rows):
    """Events 1 ns apart (or spans beyond 2**53 ns, where float seconds and float spans round)
    are ordered by their ticks in the store the encode and the fine-tuning read."""
    from seqenc.data.events import Events
    from seqenc.data.sequences import build_sequences

    entity, offset, item = (np.array(c, np.int64) for c in zip(*rows, strict=True))
    ns = BASE_NS + offset
    table = pa.table(
        {
            "entity_id": entity,
            "item_id": item,
            "timestamp": pa.array(ns).cast(pa.timestamp("ns", "UTC")),
        }
    )
    store, vocabs = build_sequences(Events(read_events(table, SCHEMA, exact=True), SCHEMA), SCHEMA)
    want = np.lexsort((ns, entity))
    assert store.ticks.tolist() == ns[want].tolist()

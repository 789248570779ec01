"""Per-row cut-offs by a scalar's rules (issue 67, family 2): a label table's ``as_of`` column is
read by :func:`seqenc.data.cut.parse`'s rules in every form it may take (datetimes of any unit or
zone, ISO text in mixed spellings, timestamps, epoch seconds), on every path that reads one (the
parser, a fit's label table, the aggregates, ``embed_at``, ``seqenc probe``); epoch milliseconds,
a missing cut-off and a column mixing instants with numbers end in the same one line on every
path, never in rows silently dropped or read as another instant."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqenc import load_encoder
from seqenc.cli import main as cli_main
from seqenc.data.aggregates import AggregateSpec
from seqenc.data.cut import NS, parse, parse_column
from seqenc.data.labels import read_labels
from seqenc.errors import SeqencError
from seqenc.evaluate import embed_at
from tests.tiny import SCHEMA, random_bundle

SETTINGS = settings(
    max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True
)
BASE = 1_704_067_200 * NS  # 2024-01-01T00:00:00Z in ns


def _iso(ns: int, spelling: int) -> str:
    """The instant ``ns`` as ISO text in one of several spellings of the same kind of instant."""
    ts = pd.Timestamp(ns, unit="ns")
    day, clock = ts.strftime("%Y-%m-%d"), ts.strftime("%H:%M:%S")
    frac = f".{ns % NS:09d}" if ns % NS else ""
    return [
        f"{day}T{clock}{frac}",
        f"{day} {clock}{frac}",
        f"{day}T{clock}{frac}Z",
        f"{day}T{clock}{frac}+00:00",
        (ts.tz_localize("UTC").tz_convert("Asia/Kolkata")).isoformat(),
    ][spelling]


FORMS = ("iso_mixed", "ns", "us", "s", "aware", "timestamps", "seconds", "seconds_text")


def _column(ns: list[int], form: str, spellings: list[int]) -> pd.Series:
    """The cut-offs ``ns`` (int ns since the epoch) written in ``form``."""
    naive = pd.Series(pd.to_datetime(ns, unit="ns"))
    if form == "iso_mixed":
        return pd.Series([_iso(n, k) for n, k in zip(ns, spellings, strict=True)], dtype=object)
    if form in ("us", "s", "ns"):
        return naive.astype(f"datetime64[{form}]")
    if form == "aware":
        return naive.dt.tz_localize("UTC").dt.tz_convert("America/New_York")
    if form == "timestamps":
        return pd.Series([pd.Timestamp(n, unit="ns", tz="Europe/Paris") for n in ns], dtype=object)
    seconds = [n // NS for n in ns]
    return pd.Series(seconds if form == "seconds" else [str(s) for s in seconds], dtype=object)


def _exact(ns: list[int], form: str) -> np.ndarray:
    """What the form holds of ``ns``: whole units only for the coarser forms."""
    step = {"us": 1000, "s": NS, "seconds": NS, "seconds_text": NS}.get(form, 1)
    return np.array([n // step * step for n in ns], dtype=np.int64)


@SETTINGS
@given(
    offsets=st.lists(st.integers(-(10**15), 10**15), min_size=1, max_size=6),
    form=st.sampled_from(FORMS),
    spellings=st.lists(st.integers(0, 4), min_size=6, max_size=6),
)
def test_every_form_is_read_as_the_scalar_reads_each_row(offsets, form, spellings):
    ns = [BASE + o for o in offsets]
    column = _column(ns, form, spellings[: len(ns)])
    cuts = parse_column(column, "as_of")
    scalar = [parse(v) for v in column]
    want = _exact(ns, form)
    if cuts.ns is None:  # epoch seconds: float per row, as the scalar's
        np.testing.assert_array_equal(cuts.seconds, [c.seconds for c in scalar])
        np.testing.assert_array_equal(cuts.seconds, want / NS)
    else:
        np.testing.assert_array_equal(cuts.ns, [c.ticks(NS) for c in scalar])
        np.testing.assert_array_equal(cuts.ns, want)
        np.testing.assert_array_equal(cuts.seconds, [c.seconds for c in scalar])


def test_the_scalars_range_far_instants_clip_to_the_events_range():
    cuts = parse_column(pd.Series(["9999-12-31", "0001-01-01T00:00:00"]), "as_of")
    assert cuts.ns[0] == parse("9999-12-31").ticks(NS)
    assert cuts.ns[1] == parse("0001-01-01").ticks(NS)
    assert cuts.seconds[0] == parse("9999-12-31").seconds


# --- bad cut-offs: the same one line on every path ---------------------------------------------

BAD = {
    "milliseconds": (pd.Series([BASE // 10**6, BASE // 10**6 + 1], dtype="int64"), "milliseconds"),
    "missing": (pd.Series([pd.Timestamp(BASE), pd.NaT]), "no cut-off"),
    "missing_text": (pd.Series(["2024-01-01", None], dtype=object), "no cut-off"),
    "mixed_kinds": (pd.Series(["2024-01-01", 1704067200], dtype=object), "mixes instants"),
    "not_a_time": (pd.Series(["2024-01-01", "soon"], dtype=object), "'soon'"),
    "booleans": (pd.Series([True, False]), "booleans"),
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from seqenc.data.synthetic import generate_events

    tmp = tmp_path_factory.mktemp("rowcuts")
    events = generate_events(2, n_items=10, seed=1, max_events=8).drop(columns="account_type")
    events = events.assign(timestamp=pd.Timestamp(BASE, unit="ns", tz="UTC"))
    events.to_parquet(tmp / "events.parquet")
    bundle = random_bundle(tmp / "bundle", events, SCHEMA, 8, causal=True)
    return tmp, events, bundle


def _labels(events: pd.DataFrame, as_of: pd.Series) -> pd.DataFrame:
    ids = sorted(events["entity_id"].unique())
    return pd.DataFrame({"entity_id": ids, "y": [0, 1], "as_of": as_of.to_numpy()})


def _paths(world, labels: pd.DataFrame) -> dict:
    tmp, events, bundle = world
    labels.to_csv(tmp / "labels.csv", index=False)  # Parquet holds no column of mixed kinds
    probe = ["probe", "--labels", str(tmp / "labels.csv"), "--label-column", "y"]
    probe += ["--events", str(tmp / "events.parquet"), "--categorical", "event_type", "channel"]
    probe += ["--numeric", "amount", "--folds", "2", "--model", "linear"]
    spec = AggregateSpec.fit(events, SCHEMA)
    return {
        "parse_column": lambda: parse_column(labels["as_of"], "as_of"),
        "read_labels": lambda: read_labels(labels, "entity_id", "y"),
        "aggregates": lambda: spec.transform(events, SCHEMA, labels[["entity_id", "as_of"]]),
        "embed_at": lambda: embed_at(load_encoder(bundle, "cpu"), events, labels),
        "probe": lambda: cli_main(probe),
    }


@pytest.mark.parametrize("path", ["parse_column", "read_labels", "aggregates", "embed_at", "probe"])
@pytest.mark.parametrize("bad", sorted(BAD))
def test_a_bad_cut_off_is_one_line_on_every_path(world, path, bad, capsys):
    column, words = BAD[bad]
    run = _paths(world, _labels(world[1], column))[path]
    if path == "probe":
        with pytest.raises(SystemExit) as stop:
            run()
        err = capsys.readouterr().err.strip()
        assert stop.value.code == 1 and len(err.splitlines()) == 1, err
        assert words in err and "Traceback" not in err, err
        return
    with pytest.raises(SeqencError, match=words.replace("(", r"\(")):
        run()


def test_mixed_spellings_of_one_instant_are_one_key_of_a_label_table():
    """Two rows of one entity at one instant in two spellings are one key: a repeat is dropped,
    and two different labels are refused, as for one spelling."""
    one = ["2024-01-01T00:00:00", "2024-01-01 00:00:00+00:00"]
    same = pd.DataFrame({"entity_id": ["a", "a", "b"], "y": [1, 1, 0], "as_of": [*one, one[0]]})
    assert len(read_labels(same, "entity_id", "y").entity) == 2
    with pytest.raises(SeqencError, match="different labels"):
        read_labels(same.assign(y=[1, 0, 0]), "entity_id", "y")


def test_datetime_objects_and_dates_read_as_the_scalar():
    column = pd.Series([dt.datetime(2024, 1, 1, 12), dt.date(2024, 1, 2)], dtype=object)
    cuts = parse_column(column, "as_of")
    np.testing.assert_array_equal(cuts.ns, [parse(v).ticks(NS) for v in column])

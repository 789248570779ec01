"""seqenc.evaluate: aggregates against hand-computed values, the probe against planted signal and
noise, point-in-time correctness of aggregates and embeddings, the ``seqenc probe`` front end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tiny import SCHEMA, tiny_bundle, tiny_events

from seqenc import EventSchema, SeqencError, load_encoder
from seqenc.cli import main as cli_main
from seqenc.evaluate import aggregate_features, embed_at, feature_matrix, probe

pytest.importorskip("sklearn")

DAY = 86400
TINY_SCHEMA = EventSchema(entity="user", item="kind", categorical=["channel"], numeric=["amount"])


def main(argv: list[str]) -> None:
    """``seqenc probe ...``."""
    cli_main(["probe", *argv])


def tiny_log() -> pd.DataFrame:
    """Two users; times in days after 2024-01-01."""
    t0 = pd.Timestamp("2024-01-01", tz="UTC")
    rows = [
        ("u1", "a", "web", 10.0, 0),
        ("u1", "b", "app", 4.0, 1),
        ("u1", "a", "web", 30.0, 4),
        ("u1", "a", "app", 20.0, 5),
        ("u2", "b", "web", 7.0, 2),
        ("u2", "b", "web", 1.0, 3),
    ]
    df = pd.DataFrame(rows, columns=["user", "kind", "channel", "amount", "day"])
    df["timestamp"] = t0 + pd.to_timedelta(df.pop("day"), unit="D")
    return df.sample(frac=1.0, random_state=1)  # input order must not matter


def test_value_stats_summarise_each_values_numbers_in_time_order():
    agg = aggregate_features(tiny_log(), TINY_SCHEMA, value_stats=("mean", "min", "max", "last"))
    u1, u2 = agg.set_index("user").loc["u1"], agg.set_index("user").loc["u2"]
    # u1's kind=a amounts in time order: 10, 30, 20; u2 has no kind=a (0, its count says absent)
    assert (u1["amount_mean[kind=a]"], u1["amount_min[kind=a]"]) == (20.0, 10.0)
    assert (u1["amount_max[kind=a]"], u1["amount_last[kind=a]"]) == (30.0, 20.0)
    assert u2["amount_last[kind=a]"] == 0.0 and u2["count[kind=a]"] == 0
    assert (u2["amount_last[kind=b]"], u2["amount_mean[channel=web]"]) == (1.0, 4.0)
    with pytest.raises(SeqencError, match="value_stats"):
        aggregate_features(tiny_log(), TINY_SCHEMA, value_stats=("median",))


def test_aggregates_match_hand_computed_values():
    agg = aggregate_features(tiny_log(), TINY_SCHEMA).set_index("user")
    u1, u2 = agg.loc["u1"], agg.loc["u2"]
    # No as_of: each entity's cut-off is its own newest event (u1: day 5, u2: day 3), not the
    # log's end; tenure and recency are measured from there (recency 0).
    assert (u1["n_events"], u1["tenure_days"], u1["recency_days"]) == (4, 5, 0)
    assert (u2["n_events"], u2["tenure_days"], u2["recency_days"]) == (2, 1, 0)
    assert u1["events_per_day"] == pytest.approx(4 / 5)
    assert u2["events_per_day"] == pytest.approx(2 / 1)
    # At the log's end as an as_of, u2's recency and tenure count from day 5.
    at_end = aggregate_features(tiny_log(), TINY_SCHEMA, tiny_log()["timestamp"].max())
    u2_end = at_end.set_index("user").loc["u2"]
    assert (u2_end["tenure_days"], u2_end["recency_days"]) == (3, 2)
    # u1's gaps: 1, 3, 1 days; u2's: one gap of 1 day.
    assert u1["gap_days_mean"] == pytest.approx(5 / 3)
    assert u1["gap_days_std"] == pytest.approx(np.std([1, 3, 1], ddof=1))
    assert (u1["gap_days_median"], u1["gap_days_max"]) == (1, 3)
    assert (u2["gap_days_mean"], u2["gap_days_std"]) == (1, 0)
    assert (u1["count[kind=a]"], u1["count[kind=b]"], u2["count[kind=a]"]) == (3, 1, 0)
    assert (u1["share[kind=a]"], u2["share[kind=b]"]) == (0.75, 1.0)
    assert (u1["count[channel=web]"], u1["share[channel=app]"]) == (2, 0.5)
    assert u1["amount_sum"] == 64 and u1["amount_mean"] == 16
    assert u1["amount_std"] == pytest.approx(np.std([10, 4, 30, 20], ddof=1))
    assert u1["amount_q50"] == pytest.approx(15.0)
    # Spend shares: u1 spent 60 of 64 on kind a, 30 of 64 on the web; u2 nothing on a.
    assert u1["amount_share[kind=a]"] == pytest.approx(60 / 64)
    assert u1["amount_share[channel=web]"] == pytest.approx(40 / 64)
    assert (u2["amount_share[kind=a]"], u2["amount_share[kind=b]"]) == (0, 1)
    assert (u1["distinct[kind]"], u1["distinct[channel]"], u2["distinct[channel]"]) == (2, 2, 1)
    # Every event is its own session here (no two share a time): sessions mirror the events.
    assert (u1["n_sessions"], u1["session_size_mean"], u1["session_size_max"]) == (4, 1, 1)
    assert u1["session_gap_days_mean"] == pytest.approx(5 / 3)
    assert not agg.isna().any().any()


def test_sessions_are_the_events_sharing_a_time():
    log = tiny_log()
    # A third u1 event on day 0 and a second on day 5: sessions of sizes 2, 1, 1, 2 on days
    # 0, 1, 4, 5; gaps between sessions 1, 3, 1 days.
    extra = log[log["user"] == "u1"].sort_values("timestamp").iloc[[0, 3]]
    agg = aggregate_features(pd.concat([log, extra]), TINY_SCHEMA).set_index("user").loc["u1"]
    assert (agg["n_events"], agg["n_sessions"]) == (6, 4)
    assert (agg["session_size_mean"], agg["session_size_max"]) == (1.5, 2)
    assert agg["session_gap_days_mean"] == pytest.approx(5 / 3)
    assert agg["gap_days_mean"] == pytest.approx(1.0)  # 0, 1, 3, 1, 0 days between events
    assert agg["sessions_per_day"] == pytest.approx(4 / 5)


def test_rare_categories_are_pooled():
    agg = aggregate_features(tiny_log(), TINY_SCHEMA, max_categories=1)
    kinds = sorted(c for c in agg.columns if c.startswith("count[kind="))
    assert kinds == ["count[kind=<other>]", "count[kind=a]"]  # a: 3 events, b: 3 (tie → first)


def test_events_after_as_of_change_no_aggregate():
    log = tiny_log()
    as_of = pd.Timestamp("2024-01-04 12:00", tz="UTC")
    later = pd.DataFrame(
        {
            "user": ["u1", "u2", "u3"],
            "kind": ["c", "a", "a"],
            "channel": ["api", "web", "web"],
            "amount": [1e6, 5.0, 3.0],
            "timestamp": as_of + pd.to_timedelta([1, 60, 3600], unit="s"),
        }
    )
    before = aggregate_features(log, TINY_SCHEMA, as_of=as_of)
    after = aggregate_features(pd.concat([log, later]), TINY_SCHEMA, as_of=as_of)
    pd.testing.assert_frame_equal(before, after)
    u1 = before.set_index("user").loc["u1"]
    assert (u1["n_events"], u1["recency_days"]) == (2, 2.5)  # days 0 and 1


def test_per_row_cutoffs_equal_one_call_per_cutoff():
    log = tiny_log()
    cut = pd.DataFrame(
        {
            "user": ["u1", "u2", "u1", "u9"],
            "as_of": pd.to_datetime(["2024-01-02", "2024-01-09", "2024-01-09", "2024-01-09"]),
        }
    )
    agg = aggregate_features(log, TINY_SCHEMA, cut)
    assert list(agg.columns[:2]) == ["user", "as_of"]
    assert len(agg) == 3  # u9 has no event
    for when in cut["as_of"].unique():
        one = aggregate_features(log, TINY_SCHEMA, as_of=when)
        mine = agg[agg["as_of"] == when].drop(columns="as_of").set_index("user")
        one = one.set_index("user").loc[mine.index, [c for c in mine.columns if c in one.columns]]
        pd.testing.assert_frame_equal(mine[one.columns], one, check_dtype=False)
        assert (mine.drop(columns=one.columns) == 0).all().all()


def test_aggregates_reject_bad_input():
    with pytest.raises(SeqencError, match="amount"):
        aggregate_features(tiny_log().assign(amount=["x", 1, 2, 3, 4, 5]), TINY_SCHEMA)
    with pytest.raises(SeqencError, match="as_of"):
        aggregate_features(tiny_log(), TINY_SCHEMA, pd.DataFrame({"user": ["u1"]}))


def planted(n: int = 400, d: int = 10, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    return x, (x[:, 0] + 0.5 * x[:, 1] > 0).astype(int)


def test_probe_finds_a_planted_separable_signal():
    x, y = planted()
    result = probe(x, y)
    assert result.task == "binary" and result.n_rows == 400
    assert result.mean("roc_auc") > 0.99 and result.mean("accuracy") > 0.95
    assert len(result.folds["roc_auc"]) == 5


def test_probe_on_noise_is_chance():
    x, _ = planted()
    y = np.random.default_rng(1).integers(0, 2, len(x))
    result = probe(x, y)
    assert abs(result.mean("roc_auc") - 0.5) < 0.08
    assert result.baseline["roc_auc"] == 0.5


def test_probe_multiclass_and_regression():
    x, _ = planted(600)
    classes = np.array(["p", "q", "r"])[np.argmax(x[:, :3], axis=1)]
    multi = probe(x, classes)
    assert multi.task == "multiclass" and multi.classes == ["p", "q", "r"]
    assert multi.mean("roc_auc") > 0.95
    assert multi.baseline["accuracy"] < 0.45
    target = x @ np.linspace(1, 0, x.shape[1]) + 0.1 * np.random.default_rng(2).normal(size=600)
    reg = probe(x, target)
    assert reg.task == "regression" and reg.mean("r2") > 0.95
    assert reg.baseline["r2"] <= 0.0


def test_probe_joins_tables_and_expands_array_columns():
    x, y = planted()
    ids = [f"e{i:03d}" for i in range(len(x))]
    features = pd.DataFrame({"entity_id": ids, "embedding": list(x.astype(np.float32))})
    labels = pd.DataFrame({"entity_id": ids[::-1], "y": pd.array(y[::-1], dtype="Int64")})
    labels.loc[::10, "y"] = pd.NA  # unlabelled rows are dropped
    result = probe(features, labels, label_column="y")
    assert result.n_rows == 360 and result.n_features == 10
    assert result.mean("roc_auc") > 0.99
    expanded = feature_matrix(features, exclude=["entity_id"])
    np.testing.assert_array_equal(expanded, x.astype(np.float32))


def test_probe_rejects_bad_input():
    x, y = planted(40)
    with pytest.raises(SeqencError, match="fewer than n_splits"):
        probe(x, np.r_[np.ones(3, int), np.zeros(37, int)])
    with pytest.raises(SeqencError, match="single class"):
        probe(x, np.zeros(40, int))
    with pytest.raises(SeqencError, match=r"column\(s\) \['y'\] not found in the labels"):
        probe(pd.DataFrame({"entity_id": [1]}), pd.DataFrame({"entity_id": [1]}), label_column="y")
    with pytest.raises(SeqencError, match="do not align"):
        probe(x, y[:-1])


def test_embeddings_at_a_cutoff_ignore_later_events(tmp_path):
    events = tiny_events(30)
    encoder = load_encoder(tiny_bundle(tmp_path / "b", events), "cpu")
    as_of = events["timestamp"].quantile(0.5)
    shifted = events.copy()
    late = shifted["timestamp"] > as_of
    shifted.loc[late, "item_id"] = shifted.loc[late, "item_id"].to_numpy()[::-1]
    shifted.loc[late, "amount"] = 1e4
    a = encoder.encode(events, as_of=as_of, on_empty="skip")
    b = encoder.encode(shifted, as_of=as_of, on_empty="skip")
    np.testing.assert_array_equal(np.stack(a["embedding"]), np.stack(b["embedding"]))
    # embed_at: each row at its own cut-off equals a plain encode at that cut-off.
    ids = a["entity_id"].to_numpy()
    at_end = events["timestamp"].max()
    cut = pd.DataFrame({"entity_id": ids, "as_of": [as_of] * (len(ids) - 3) + [at_end] * 3})
    got = embed_at(encoder, shifted, cut)
    assert len(got) == len(ids)
    early = got[got["as_of"] == as_of].set_index("entity_id").loc[a["entity_id"].iloc[:-3]]
    # other entities in the call, so other batches: equal within float rounding, not bit for bit
    np.testing.assert_allclose(
        np.stack(early["embedding"]), np.stack(a["embedding"][:-3]), rtol=0, atol=1e-5
    )
    full = encoder.encode(shifted, as_of=at_end).set_index("entity_id").loc[ids[-3:]]
    late_rows = got[got["as_of"] != as_of].set_index("entity_id").loc[ids[-3:]]
    np.testing.assert_allclose(
        np.stack(late_rows["embedding"]), np.stack(full["embedding"]), rtol=0, atol=1e-5
    )


def write_probe_inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    events = tiny_events(80, seed=3)
    encoder = load_encoder(tiny_bundle(tmp_path / "b", events), "cpu")
    events.to_parquet(tmp_path / "events.parquet")
    encoder.encode(events).to_parquet(tmp_path / "emb.parquet")
    labels = events.groupby("entity_id", as_index=False)["account_type"].first()
    labels["planted"] = (labels["account_type"] >= 2).astype(int)
    labels.to_parquet(tmp_path / "labels.parquet")
    return tmp_path / "events.parquet", tmp_path / "emb.parquet", tmp_path / "labels.parquet"


def test_cli_probes_aggregates_embeddings_and_both(tmp_path, capsys):
    events, emb, labels = write_probe_inputs(tmp_path)
    argv = ["--labels", str(labels), "--label-column", "planted", "--embeddings", str(emb)]
    argv += ["--events", str(events), "--categorical", *SCHEMA.categorical]
    argv += ["--numeric", *SCHEMA.numeric, "--folds", "3", "--json", str(tmp_path / "r.json")]
    main(argv)
    out = capsys.readouterr().out
    assert out.startswith("task: binary (2 distinct whole numbers, at most 20)\n")
    for name in ("aggregates ", "embeddings ", "aggregates+embeddings", "constant predictor"):
        assert name in out
    assert "3 folds (stratified for classes, shuffled with seed 0), the same for every row" in out
    assert "aggregates+embeddings: the embeddings stacked beside the aggregates" in out
    records = pd.read_json(tmp_path / "r.json")
    # the paired differences are those of the per-fold scores of the same folds
    for model in ("linear", "trees"):
        rows = records[records["model"] == model].set_index("features")
        assert np.isnan(rows.loc["aggregates", "paired_roc_auc"])
        for name in ("embeddings", "aggregates+embeddings"):
            gap = rows.loc[name, "roc_auc_mean"] - rows.loc["aggregates", "roc_auc_mean"]
            assert rows.loc[name, "paired_roc_auc"] == pytest.approx(gap)
        assert f"{model:<7} embeddings" in out
    assert out.count("(vs aggregates ") == 4 * 2  # 4 rows, 2 metrics
    sets = ["aggregates", "embeddings", "aggregates+embeddings"]
    assert list(records["features"]) == sets * 2  # both probes by default
    assert list(records["model"]) == ["linear"] * 3 + ["trees"] * 3
    assert (records["n_rows"] == 80).all()
    # The time gaps are planted by account type: the aggregates see them.
    # (0.86 on this small log: the generator's sessions and bursts blur the planted gaps)
    linear = records[records["model"] == "linear"].set_index("features")
    assert linear.loc["aggregates", "roc_auc_mean"] > 0.8


def test_tree_probe_finds_an_interaction_the_linear_probe_cannot():
    # y = x0 XOR x1: no linear function of the two separates it, two splits do.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(600, 3))
    y = ((x[:, 0] > 0) ^ (x[:, 1] > 0)).astype(int)
    linear = probe(x, y, model="linear", n_splits=3)
    trees = probe(x, y, model="trees", n_splits=3)
    assert linear.mean("roc_auc") < 0.6
    assert trees.mean("roc_auc") > 0.95
    # Regression too: y = |x0| is not linear in x0.
    r2 = probe(x, np.abs(x[:, 0]) + 0.01 * x[:, 2], model="trees", n_splits=3).mean("r2")
    assert r2 > 0.9 > probe(x, np.abs(x[:, 0]), model="linear", n_splits=3).mean("r2") + 0.5


def test_cli_bad_input_is_one_line(tmp_path, capsys):
    _, emb, labels = write_probe_inputs(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["--labels", str(labels), "--label-column", "nope", "--embeddings", str(emb)])
    assert exit_.value.code == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"seqenc probe: error: labels {str(labels)!r}: column(s) ['nope'] not found in the "
        "labels; available columns: ['entity_id', 'account_type', 'planted']"
    ]


# ---- Berka (../shared/data, skipped when absent) -----------------------------------------------


def run_prep(script: str, data: Path, out: Path) -> None:
    """``python datasets/<script> --data <data> --out <out>``; skips when ``data`` is absent."""
    if not data.is_dir():
        pytest.skip(f"{data} not found")
    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, str(root / "datasets" / script), "--data", str(data), "--out", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.mark.shared_data
def test_prep_berka_counts_and_loan_cutoffs(shared_data, tmp_path):
    berka = shared_data / "berka"
    run_prep("prep_berka.py", berka, tmp_path)
    events = pd.read_parquet(tmp_path / "berka_events.parquet")
    labels = pd.read_parquet(tmp_path / "berka_labels.parquet")
    assert (len(events), events["account_id"].nunique()) == (49102, 1229)  # SOURCE.md
    static = labels[labels["gender"].notna()]
    assert len(static) == 1229 and (static["gender"] == "F").sum() == 610
    assert static["age_group"].value_counts().min() >= 300
    statements = static["statement"].value_counts().to_dict()  # counted with pandas on account.asc
    assert statements == {"monthly": 1138, "weekly": 65, "after_transaction": 26}
    loans = labels[labels["loan_default"].notna()]
    assert len(loans) == 160 and loans["loan_default"].sum() == 25  # B 18 + D 7
    loan = pd.read_csv(berka / "loan.asc", sep=";")
    loan_day = pd.to_datetime("19" + loan["date"].astype(str), format="%Y%m%d", utc=True)
    day = dict(zip(loan["account_id"], loan_day, strict=True))  # one loan per account in Berka
    assert (loans["as_of"] < loans["account_id"].map(day)).all()  # never the loan day or later
    propensity = labels[labels["loan_next_12m"].notna()]
    cutoff = events["timestamp"].max()  # 1994-03-31: the log's last day, one cut-off for all rows
    assert (propensity["as_of"] == cutoff).all()
    granted = propensity["account_id"].map(day)
    assert not (granted <= cutoff).any()  # an account with a loan at the cut-off has no row
    late = (granted > cutoff) & (granted <= pd.Timestamp("1995-03-31", tz="UTC"))
    assert (propensity["loan_next_12m"] == late.astype(int)).all()
    # 1,229 accounts - 38 loans granted by the cut-off; 104 loans in the 12 months after it.
    assert (len(propensity), int(propensity["loan_next_12m"].sum())) == (1191, 104)


@pytest.mark.shared_data
def test_prep_tafeng_counts_and_forward_labels(shared_data, tmp_path):
    run_prep("prep_tafeng.py", shared_data / "ta-feng", tmp_path)
    events = pd.read_parquet(tmp_path / "tafeng_events.parquet")
    train = pd.read_parquet(tmp_path / "tafeng_train.parquet")
    labels = pd.read_parquet(tmp_path / "tafeng_labels.parquet")
    # SOURCE.md's counts; ids keep their leading zeros (8-digit text).
    assert (len(events), events["customer_id"].nunique()) == (817741, 32266)
    assert events["product_id"].nunique() == 23812 and events["subclass"].nunique() == 2012
    assert events["customer_id"].str.len().eq(8).all()
    static = labels[labels["age_group"].notna()]
    assert len(static) == 32266 - 626 and (static["age_group"] == "35-39").sum() == 6588
    under = static["age_group"].isin(["<25", "25-29", "30-34"])
    assert (static["age_under_35"] == under.astype(float)).all()
    # Training events and forward inputs end at the cut-off; the February labels come after it.
    cutoff = pd.Timestamp("2001-01-31", tz="UTC")
    assert (
        train["timestamp"].max() == cutoff and len(train) == (events["timestamp"] <= cutoff).sum()
    )
    forward = labels[labels["buys_february"].notna()]
    assert (forward["as_of"] == cutoff).all()
    assert set(forward["customer_id"]) == set(train["customer_id"])
    feb = events[events["timestamp"] > cutoff].groupby("customer_id")["price"].sum()
    spend = np.log1p(forward["customer_id"].map(feb).fillna(0.0))
    np.testing.assert_allclose(forward["february_spend"], spend)
    assert (forward["buys_february"] == forward["customer_id"].isin(feb.index)).all()

"""A label head fused with the hand-made aggregates (``model.fusion aggregates``): the layout and
its statistics, the same aggregates on every encode path at the same cut-off, and the paths that
cannot compute them refusing in one line."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch

from seqenc import load_encoder
from seqenc.data import events as event_reader
from seqenc.data.aggregates import AggregateSpec
from seqenc.encoding import run as encoding_run
from seqenc.errors import SeqencError
from seqenc.evaluate import predict_at
from seqenc.model.embeddings import signed_log
from tests.tiny import SCHEMA, label_fit

ENTITY = [
    "--model.objective", "masked",
    "--model.encoder.pooling", "items",  # the shipped finetune.yaml's
    "--model.encoder.event_dropout", "0.1",
    "--model.fusion", "aggregates",
]  # fmt: skip


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    """A fused, fine-tuned bundle on a synthetic log whose label is its latent account type,
    each label row cut at its own ``as_of``: ``(bundle, events, labels, printed)``."""
    return label_fit(tmp_path_factory.mktemp("fusion"), 200, 12, *ENTITY, as_of=True)


def test_statistics_are_the_training_rows_after_a_signed_log(fused) -> None:
    """The stored centre and scale, against numpy on the aggregates of the rows the fit trained
    on (every labelled row but the held-out ones, which the layout's statistics must not see)."""
    bundle, events, labels, _ = fused
    layout = json.loads((bundle / "config.json").read_text())["head"]["aggregates"]
    spec = AggregateSpec.from_dict(layout["spec"])
    table = spec.transform(events, SCHEMA, labels[["entity_id", "as_of"]])
    logs = np.sign(table.values) * np.log1p(np.abs(table.values.astype(np.float64)))
    center = np.asarray(layout["center"])
    # the held-out rows are a tenth: the stored centre is near, not at, the all-rows mean
    assert np.abs(center - logs.mean(0)).max() < 0.5 * logs.std(0).max() + 1e-6
    assert not np.allclose(center, logs.mean(0), atol=1e-9)
    assert (np.asarray(layout["scale"]) > 0).all()


def test_encode_predicts_from_the_embedding_and_the_aggregates_at_as_of(fused) -> None:
    """encode(as_of=T)'s predictions, against the head applied by hand to its embeddings and to
    the aggregates of the events at or before T; events after T change neither."""
    bundle, events, _, _ = fused
    enc = load_encoder(bundle, "cpu")
    when = events["timestamp"].quantile(0.6)
    out = enc.encode(events, as_of=when, output="numpy", on_empty="skip")
    layout = enc.meta.head["aggregates"]
    table = AggregateSpec.from_dict(layout["spec"]).transform(events, SCHEMA, when)
    order = pd.Index(table.keys["entity_id"]).get_indexer(out.entity_ids)
    z = (signed_log(torch.from_numpy(table.values[order])) - torch.tensor(layout["center"])) / (
        torch.tensor(layout["scale"])
    )
    head = enc.model.head
    deep = head.linear(head.norm(torch.from_numpy(out.embeddings)))
    scores = head.wide(z.clamp(-8, 8)) + deep
    expected = torch.softmax(scores, -1).detach().numpy()
    np.testing.assert_allclose(out.predictions, expected, atol=1e-5)
    later = events.copy()
    later.loc[later["timestamp"] > when, "amount"] *= 1000.0
    again = enc.encode(later, as_of=when, output="numpy", on_empty="skip")
    np.testing.assert_allclose(again.predictions, out.predictions, atol=1e-6)


def test_a_fused_encode_reads_its_events_once(fused, monkeypatch) -> None:
    """The store and the aggregates of an encode come from one read of its events: the events
    are typed once per call, not once for the store and again for :func:`wide_inputs`."""
    bundle, events, _, _ = fused
    enc = load_encoder(bundle, "cpu")
    typed, calls = event_reader.normalize_table, []

    def counted(*args, **kwargs):
        calls.append(len(args[0]))
        return typed(*args, **kwargs)

    monkeypatch.setattr(event_reader, "normalize_table", counted)
    out = enc.encode(
        events, as_of=events["timestamp"].quantile(0.6), output="numpy", on_empty="skip"
    )
    assert calls == [len(events)] and out.predictions.shape == (len(out.entity_ids), 4)


def test_recommend_computes_no_aggregates(fused, monkeypatch) -> None:
    """A fused bundle's recommend reads histories only: the head's aggregates are not computed
    (the encode beside it computes them once, so the count is the one that matters)."""
    bundle, events, _, _ = fused
    enc = load_encoder(bundle, "cpu")
    computed, wide = [], encoding_run.wide_inputs
    monkeypatch.setattr(encoding_run, "wide_inputs", lambda *a: computed.append(1) or wide(*a))
    top = enc.recommend(events, k=3)
    assert computed == [] and len(top) == 3 * top["entity_id"].nunique() > 0
    enc.encode(events, output="numpy")
    assert computed == [1]


def test_predict_at_reads_each_rows_own_cutoff(fused) -> None:
    bundle, events, labels, _ = fused
    enc = load_encoder(bundle, "cpu")
    rows = labels.head(30)
    keys, probabilities = predict_at(enc, events, rows)
    for when, group in keys.groupby("as_of"):
        alone = enc.encode(events, as_of=when, output="numpy", on_empty="skip")
        at = pd.Index(alone.entity_ids).get_indexer(group["entity_id"])
        np.testing.assert_allclose(probabilities[group.index], alone.predictions[at], atol=1e-5)


def test_incremental_encoding_refuses_a_fused_head(fused) -> None:
    bundle, events, _, _ = fused
    enc = load_encoder(bundle, "cpu")
    with pytest.raises(SeqencError, match="incremental encoding"):
        enc.state(events)


def test_fusion_none_keeps_the_readout_alone(tmp_path, caplog) -> None:
    caplog.set_level("INFO")
    bundle, *_ = label_fit(tmp_path, 80, 2, *ENTITY[:-2])
    assert "fusion: none (the head reads the pooled sequence alone)" in caplog.text
    assert json.loads((bundle / "config.json").read_text())["head"]["aggregates"] is None


def test_the_wide_start_is_the_penalised_logistic_regression() -> None:
    """The wide part's start against scikit-learn's logistic regression on the same standardised
    aggregates: a two-class softmax with an L2 penalty p on both rows is a logistic regression of
    C = 1 / (n p) (the penalty falls on half the difference of the rows)."""
    from sklearn.linear_model import LogisticRegression

    from seqenc.finetune.wide_start import PENALTIES, fit_wide_start
    from seqenc.model.head import SupervisedHead

    rng = np.random.default_rng(0)
    n, k = 400, 6
    wide = rng.gamma(2.0, 3.0, size=(n, k)).astype(np.float32)
    y = (np.log1p(wide[:, 0]) - np.log1p(wide[:, 1]) + rng.normal(0, 0.5, n) > 0).astype(np.int64)
    logs = np.log1p(wide.astype(np.float64))
    layout = {
        "names": list("abcdef"),
        "center": logs.mean(0).tolist(),
        "scale": logs.std(0).tolist(),
    }
    head = SupervisedHead(4, "classification", [0, 1], aggregates=layout)
    why = fit_wide_start(head, wide, y)
    penalty = float(why.split("penalty ")[1].split(",")[0])
    assert penalty in PENALTIES
    with torch.no_grad():
        z = head.standardise(torch.from_numpy(wide))
        ours = torch.softmax(head.wide(z), -1)[:, 1].numpy()
    reference = LogisticRegression(C=1.0 / (n * penalty), tol=1e-10, max_iter=10000)
    expected = reference.fit(z.numpy(), y).predict_proba(z.numpy())[:, 1]
    np.testing.assert_allclose(ours, expected, atol=2e-3)


def test_the_wide_starts_penalty_is_the_lowest_held_out_log_loss() -> None:
    """The penalty against a reference search with scikit-learn on the same three folds, scored
    by held-out log loss (the probe's rule). A rare class and few rows, where a held-out AUC ties
    and the class weights would tilt the fit, are the case it must get right."""
    from seqenc.finetune.wide_start import PENALTIES, fit_wide_start
    from seqenc.model.head import SupervisedHead

    rng = np.random.default_rng(3)
    n, k = 150, 12
    wide = rng.gamma(2.0, 3.0, size=(n, k)).astype(np.float32)
    y = (np.log1p(wide[:, 0]) + rng.normal(0, 0.6, n) > 2.6).astype(np.int64)
    logs = np.log1p(wide.astype(np.float64))
    layout = {"names": [str(i) for i in range(k)], "center": logs.mean(0).tolist(),
              "scale": logs.std(0).tolist()}  # fmt: skip
    head = SupervisedHead(4, "classification", [0, 1], aggregates=layout)
    why = fit_wide_start(head, wide, y)
    with torch.no_grad():
        z = head.standardise(torch.from_numpy(wide)).numpy().astype(np.float64)
    means = _reference_losses(z, y)
    assert 0.05 < y.mean() < 0.3
    assert f"penalty {PENALTIES[int(np.argmin(means))]:g}," in why
    printed = float(re.search(r"cross-validated held-out loss ([0-9.]+)", why).group(1))
    assert printed == pytest.approx(min(means), abs=1e-3)


def _reference_losses(z: np.ndarray, y: np.ndarray) -> list[float]:
    """scikit-learn's mean held-out log loss of each penalty of the wide start's grid, on its
    folds (the penalty p of a two-class softmax is a logistic regression of C = 1 / (n p))."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import log_loss

    from seqenc.finetune.wide_start import FOLDS, PENALTIES

    folds = np.random.default_rng(0).permutation(len(y)) % FOLDS
    means = []
    for penalty in PENALTIES:
        losses = []
        for fold in range(FOLDS):
            train, held = folds != fold, folds == fold
            model = LogisticRegression(C=1.0 / (train.sum() * penalty), tol=1e-10, max_iter=10000)
            model.fit(z[train], y[train])
            losses.append(log_loss(y[held], model.predict_proba(z[held]), labels=[0, 1]))
        means.append(float(np.mean(losses)))
    return means


@pytest.mark.parametrize("signal_in_stats", [False, True])
def test_the_wide_start_reads_the_per_value_statistics_where_they_lower_the_held_out_loss(
    signal_in_stats: bool,
) -> None:
    """A small table with many per-value statistic columns: pure noise, they are left out (weight
    0); carrying the label, they are read. The choice and the printed losses against
    scikit-learn's search on each set of columns."""
    from seqenc.finetune.wide_start import fit_wide_start, value_stat_columns
    from seqenc.model.head import SupervisedHead

    rng = np.random.default_rng(5)
    n, base, extra = 120, 3, 40
    wide = rng.gamma(2.0, 3.0, size=(n, base + extra)).astype(np.float32)
    driver = np.log1p(wide[:, base if signal_in_stats else 0])
    y = (driver + rng.normal(0, 0.4, n) > np.median(driver)).astype(np.int64)
    names = ["count", "share[c=a]", "amount_share[c=a]"] + [
        f"amount_{stat}[c={i}]" for i in range(extra // 2) for stat in ("mean", "last")
    ]
    logs = np.log1p(wide.astype(np.float64))
    layout = {"names": names, "center": logs.mean(0).tolist(), "scale": logs.std(0).tolist(),
              "spec": {"numeric": ["amount"], "value_stats": ["mean", "last"]}}  # fmt: skip
    stats = value_stat_columns(layout)
    assert stats.tolist() == [False] * base + [True] * extra
    head = SupervisedHead(4, "classification", [0, 1], aggregates=layout)
    why = fit_wide_start(head, wide, y)
    with torch.no_grad():
        z = head.standardise(torch.from_numpy(wide)).numpy().astype(np.float64)
    with_stats, without = min(_reference_losses(z, y)), min(_reference_losses(z[:, ~stats], y))
    printed = re.search(r"held-out loss ([0-9.]+) with them, ([0-9.]+) without", why)
    np.testing.assert_allclose(
        [float(v) for v in printed.groups()], [with_stats, without], atol=1e-3
    )
    assert (with_stats < without) == signal_in_stats
    read = head.wide.weight[:, torch.from_numpy(stats)].abs().sum() > 0
    assert bool(read) == signal_in_stats
    assert ("statistics read" in why) == signal_in_stats


def test_the_export_predicts_as_encode_does(fused, tmp_path) -> None:
    """The Parquet export (partitions of entity-complete events, its own reader) gives the
    predictions encode gives: the aggregates are recomputed from each partition's events."""
    from seqenc.export import export_embeddings

    bundle, events, _, _ = fused
    when = events["timestamp"].quantile(0.6)
    out, source = tmp_path / "out.parquet", tmp_path / "events.parquet"
    events.to_parquet(source)
    export_embeddings(bundle, source, out, as_of=when, on_empty="skip", chunk_events=500)
    written = pd.read_parquet(out).sort_values("entity_id", ignore_index=True)
    alone = load_encoder(bundle, "cpu").encode(events, as_of=when, output="numpy", on_empty="skip")
    assert written["entity_id"].tolist() == alone.entity_ids.tolist()
    np.testing.assert_allclose(np.stack(written["probabilities"]), alone.predictions, atol=1e-5)


def test_a_fused_head_starts_as_the_aggregates_model_and_keeps_it() -> None:
    """The readout's map starts at zero: the outputs are the wide part's whatever the readout;
    the wide part is fitted and frozen (no gradient reaches it), the readout's map trains."""
    from seqenc.finetune.wide_start import fit_wide_start
    from seqenc.model.head import SupervisedHead

    rng = np.random.default_rng(1)
    wide = rng.gamma(2.0, 3.0, size=(60, 3)).astype(np.float32)
    y = (wide[:, 0] > wide[:, 1]).astype(np.int64)
    layout = {"names": list("abc"), "center": [1.5] * 3, "scale": [0.7] * 3}
    head = SupervisedHead(4, "classification", [0, 1], aggregates=layout)
    fit_wide_start(head, wide, y)
    x = torch.from_numpy(wide)
    readouts = torch.randn(60, 4), torch.randn(60, 4) * 10
    a, b = (head(r, x) for r in readouts)
    torch.testing.assert_close(a, b)
    head(readouts[0], x).sum().backward()
    assert head.wide.weight.grad is None and head.linear.weight.grad.abs().sum() > 0

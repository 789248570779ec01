"""Baskets (issue 44): events of an entity that share a time are a set, in the split, the metrics,
the baselines, the attention, training, ``encode`` and the incremental update."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from tiny import SCHEMA, random_bundle, tiny_events

from seqenc.data.baskets import (
    BASKET_SHARE,
    leave_one_basket_out,
    resolve_baskets,
    tied_target_share,
)
from seqenc.data.batches import collate
from seqenc.data.schema import EventSchema
from seqenc.data.sequences import build_sequences
from seqenc.data.spec import DataSpec
from seqenc.data.split import full_view
from seqenc.errors import SeqencError
from seqenc.inference import load_encoder
from seqenc.model.baskets import basket_mask, next_basket_labels
from seqenc.model.batch import PAD
from seqenc.model.encoder import Block, EncoderConfig, SequenceEncoder
from seqenc.model.objectives import Causal
from seqenc.training.baselines import BASKET_BASELINES, baseline_metrics
from seqenc.training.metrics import BasketMetrics
from seqenc.training.run_options import resolve_encoder

TOL = 1e-5
# three baskets of entity "a" (times 1, 2, 3), two events of entity "b" at distinct times
LOG = pd.DataFrame(
    {
        "entity_id": ["a"] * 7 + ["b"] * 4,
        "item_id": [5, 3, 4, 3, 7, 6, 5, 1, 2, 3, 4],
        "timestamp": pd.to_datetime([1, 1, 2, 2, 2, 3, 3, 1, 2, 3, 4], unit="D", utc=True),
    }
)


def daily(events: pd.DataFrame) -> pd.DataFrame:
    """``events`` stamped by day (many ties), with two independent line numberings."""
    events = events.assign(timestamp=events["timestamp"].dt.floor("D"))
    rng = np.random.default_rng(0)
    return events.assign(line_a=rng.permutation(len(events)), line_b=rng.permutation(len(events)))


def test_the_split_holds_out_the_newest_basket_and_validates_on_the_one_before():
    store, _ = build_sequences(LOG)
    assert tied_target_share(store) == 0.5  # a's newest event is tied, b's is not
    train, val, test = leave_one_basket_out(store)
    assert list(train.rows) == [0, 1]
    a, b = 0, 1
    assert (train.starts[a], train.ends[a]) == (0, 2)  # basket 1
    assert (val.targets[a], val.target_ends[a]) == (2, 5)  # basket 2
    assert (test.ends[a], test.targets[a], test.target_ends[a]) == (5, 5, 7)  # basket 3
    assert (test.targets[b], test.target_ends[b]) == (10, 11)  # one event: one basket
    batch = collate(test, np.arange(2), 10)
    pairs = sorted(map(tuple, batch.target_sets.T.tolist()))
    items = store.items
    assert pairs == sorted([(0, items[5]), (0, items[6]), (1, items[10])])


def test_the_protocol_is_chosen_by_the_tied_share_and_overridable():
    store, _ = build_sequences(LOG)
    on, why = resolve_baskets(None, store)
    assert on is (0.5 >= BASKET_SHARE) and "50.0%" in why and "null" in why
    assert resolve_baskets(True, store)[0] and not resolve_baskets(False, store)[0]
    with pytest.raises(SeqencError, match="true, false or null"):
        resolve_baskets("yes", store)
    with pytest.raises(SeqencError, match="no entity has 3 baskets"):
        leave_one_basket_out(build_sequences(LOG[LOG["entity_id"] == "a"].head(5))[0])
    untimed, _ = build_sequences(LOG, EventSchema(timestamp=None))
    assert tied_target_share(untimed) == 0.0
    with pytest.raises(SeqencError, match="needs timestamps"):
        resolve_baskets(True, untimed)


def naive_basket_metrics(scores, baskets, histories, k):
    """Reference: per-basket loops over Python sets."""
    out = {"recall": [], "ndcg": [], "hr1": [], "share": [], "rep": [], "new": []}
    for row, basket in enumerate(baskets):
        order = list(np.argsort(-scores[row], kind="stable"))
        top = order[:k]
        out["recall"].append(len(set(top) & basket) / len(basket))
        dcg = sum(1 / math.log2(r + 2) for r, item in enumerate(top) if item in basket)
        idcg = sum(1 / math.log2(r + 2) for r in range(min(k, len(basket))))
        out["ndcg"].append(dcg / idcg)
        out["hr1"].append(float(order[0] in basket))
        rep, new = basket & histories[row], basket - histories[row]
        out["share"].append(len(rep) / len(basket))
        if rep:
            out["rep"].append(len(set(top) & rep) / len(rep))
        if new:
            out["new"].append(len(set(top) & new) / len(new))
    return {name: float(np.mean(values)) for name, values in out.items()}


def test_basket_metrics_match_a_naive_reference():
    rng = np.random.default_rng(1)
    n_rows, n_items, k = 12, 30, 5
    scores = rng.permutation(n_rows * n_items).reshape(n_rows, n_items).astype(np.float64)
    baskets = [set(rng.choice(n_items, rng.integers(1, 8), replace=False)) for _ in range(n_rows)]
    histories = [set(rng.choice(n_items, 6, replace=False)) for _ in range(n_rows)]
    pairs = [(row, item) for row, basket in enumerate(baskets) for item in basket]
    pairs += pairs[:3]  # a line repeated inside its basket counts once
    seen = torch.zeros(n_rows, n_items, dtype=torch.bool)
    for row, items in enumerate(histories):
        seen[row, list(items)] = True
    metrics = BasketMetrics((k,))
    metrics.update(torch.from_numpy(scores), torch.tensor(pairs).T, seen)
    got = {name: float(value) for name, value in metrics.compute().items()}
    want = naive_basket_metrics(scores, baskets, histories, k)
    assert got["recall@5"] == pytest.approx(want["recall"], abs=1e-6)
    assert got["ndcg@5"] == pytest.approx(want["ndcg"], abs=1e-6)
    assert got["hr@1"] == pytest.approx(want["hr1"], abs=1e-6)
    assert got["repeat_targets"] == pytest.approx(want["share"], abs=1e-6)
    assert got["recall_rep@5"] == pytest.approx(want["rep"], abs=1e-6)
    assert got["recall_new@5"] == pytest.approx(want["new"], abs=1e-6)


def test_a_hand_computed_basket():
    # basket {0, 2, 5} ranked 0, 2, 5 at K = 2: one hit of three, DCG 1, IDCG 1 + 1/log2(3)
    metrics = BasketMetrics((2,))
    scores = torch.tensor([[5.0, 4, 3, 2, 1, 0]])
    seen = torch.tensor([[True, False, False, False, False, False]])
    metrics.update(scores, torch.tensor([[0, 0, 0], [0, 2, 5]]), seen)
    got = metrics.compute()
    assert float(got["recall@2"]) == pytest.approx(1 / 3)
    assert float(got["ndcg@2"]) == pytest.approx(1 / (1 + 1 / math.log2(3)))
    assert float(got["hr@1"]) == 1.0
    assert (float(got["recall_rep@2"]), float(got["recall_new@2"])) == (1.0, 0.0)


def test_basket_baselines_rank_the_entitys_frequent_items_first():
    store, _ = build_sequences(LOG)
    train, _, test = leave_one_basket_out(store)
    values = baseline_metrics(train, test, ks=(2, 4))
    assert {f"{b}/recall@2" for b in BASKET_BASELINES} <= set(values)
    # a: history 3 5 | 3 4 7, basket {5, 6} (5 a repeat); b: history 1 2 3, basket {4} (new)
    assert values["share_repeat_targets"] == 0.25
    # topfreq: 3 (twice), then by recency 7, 4, 5; repeat-recent: 7, 4, 3, 5
    assert values["topfreq/recall_rep@2"] == 0.0 and values["topfreq/recall_rep@4"] == 1.0
    assert values["repeat/recall_rep@2"] == 0.0 and values["repeat/recall_rep@4"] == 1.0


def window(times: list[int], items: list[int]):
    """A one-row batch of a history with these day numbers, via the store."""
    log = pd.DataFrame(
        {
            "entity_id": "e",
            "item_id": items,
            "timestamp": pd.to_datetime(times, unit="D", utc=True),
            "line": np.arange(len(items)),
        }
    )
    store, vocabs = build_sequences(log, EventSchema(tie_breakers=("line",)))
    return collate(full_view(store), np.arange(1), len(items)), vocabs


def test_a_position_sees_strictly_earlier_times_and_itself():
    batch, _ = window([1, 1, 2, 2, 2, 3], [10, 11, 12, 13, 14, 15])
    allowed = basket_mask(batch)[0, 0]
    times = torch.tensor([1, 1, 2, 2, 2, 3])
    eye = torch.eye(6, dtype=torch.bool)
    assert torch.equal(allowed, (times[None, :] < times[:, None]) | eye)


def test_an_event_does_not_change_the_output_of_another_in_its_basket():
    torch.manual_seed(0)
    block = Block(EncoderConfig(n_items=20, d_model=16, dropout=0.0)).eval()
    batch, _ = window([1, 1, 2, 2, 2, 3], [10, 11, 12, 13, 14, 15])
    mask = basket_mask(batch)
    x = torch.randn(1, 6, 16)
    changed = x.clone()
    changed[0, 3] = torch.randn(16)  # a line of the basket at day 2
    out, out_changed = (block(t, False, mask, None) for t in (x, changed))
    same_or_earlier = [0, 1, 2, 4]  # basket 1, and the other lines of basket 2
    assert torch.allclose(out[0, same_or_earlier], out_changed[0, same_or_earlier], atol=1e-6)
    assert not torch.allclose(out[0, 5], out_changed[0, 5])  # day 3 sees day 2


def test_a_position_trains_on_an_item_of_the_next_basket():
    batch, vocabs = window([1, 1, 2, 2, 2, 3], [10, 11, 12, 13, 14, 15])
    ids = vocabs.item.encode(pd.Series([12, 13, 14, 15]))[0]
    for seed in range(5):
        labels = next_basket_labels(batch, torch.Generator().manual_seed(seed))[0]
        assert set(labels[:2].tolist()) <= set(ids[:3].tolist())
        assert labels[2:5].tolist() == [ids[3]] * 3
        assert labels[5] == PAD  # the newest basket has no next one in the window


def test_a_spec_or_config_without_baskets_reads_todays_behaviour():
    store, vocabs = build_sequences(LOG)
    spec = DataSpec(EventSchema(), vocabs, 10, 0.5, baskets=True)
    old = {k: v for k, v in spec.to_dict().items() if k != "baskets"}
    assert DataSpec.from_dict(spec.to_dict()).baskets
    assert not DataSpec.from_dict(old).baskets
    assert resolve_encoder(EncoderConfig(), spec, Causal(True)).baskets
    assert not resolve_encoder(EncoderConfig(), DataSpec.from_dict(old), Causal()).baskets
    assert not EncoderConfig().baskets


SHAPES = {
    "learned_time_query": {},
    "rope_mean": {"positional": "rope", "pooling": "mean"},
    "repeat_head": {"repeat_head": True},
}


def encode_both_orders(tmp_path, events, **options) -> list:
    """``encode`` of ``events`` by two bundles of the same weights whose stores order the lines of
    a basket by two independent numberings."""
    history_len = int(events.groupby("entity_id").size().max())  # no basket cut by truncation
    encoded = []
    for lines in ("line_a", "line_b"):
        schema = EventSchema(
            categorical=SCHEMA.categorical, numeric=SCHEMA.numeric, tie_breakers=(lines,)
        )
        path = random_bundle(tmp_path / lines, events, schema, history_len, **options)
        encoded.append(load_encoder(path, "cpu").encode(events, output="numpy"))
    assert list(encoded[0].entity_ids) == list(encoded[1].entity_ids)
    return encoded


@pytest.mark.parametrize("shape", SHAPES)
def test_the_embedding_does_not_depend_on_the_order_of_lines_in_a_basket(tmp_path, shape):
    events = daily(tiny_events(30, seed=5))
    store, _ = build_sequences(events, EventSchema(categorical=SCHEMA.categorical))
    assert tied_target_share(store) > 0.3  # the log has baskets to shuffle
    a, b = encode_both_orders(tmp_path, events, baskets=True, **SHAPES[shape])
    assert np.abs(a.embeddings - b.embeddings).max() <= TOL
    # the same model without the rule reads the order (the test above is not vacuous)
    a, b = encode_both_orders(tmp_path / "plain", events, **SHAPES[shape])
    assert np.abs(a.embeddings - b.embeddings).max() > 100 * TOL


@pytest.mark.parametrize("counts", [False, True])
def test_recommendations_do_not_depend_on_the_order_of_lines_in_a_basket(tmp_path, counts):
    """The repeat head's scores (with its purchase counts too) read a basket as a set."""
    events = daily(tiny_events(30, seed=7))
    history_len = int(events.groupby("entity_id").size().max())
    tops = []
    for lines in ("line_a", "line_b"):
        schema = EventSchema(categorical=SCHEMA.categorical, tie_breakers=(lines,))
        path = random_bundle(
            tmp_path / f"{lines}-{counts}", events, schema, history_len,
            baskets=True, repeat_head=True, repeat_counts=counts,
        )  # fmt: skip
        top = load_encoder(path, "cpu").recommend(events, k=5, filter_seen=False)
        tops.append(top.sort_values(["entity_id", "item_id"]).reset_index(drop=True))
    assert tops[0][["entity_id", "item_id"]].equals(tops[1][["entity_id", "item_id"]])
    assert np.abs(tops[0]["score"] - tops[1]["score"]).max() <= TOL


def test_the_update_of_a_basket_model_equals_encode(tmp_path):
    events = daily(tiny_events(30, seed=6)).drop(columns=["line_a", "line_b"])
    enc = load_encoder(random_bundle(tmp_path / "b", events, SCHEMA, 40, baskets=True), "cpu")
    cut = events["timestamp"].quantile(0.7)
    state = enc.state(events[events["timestamp"] <= cut])
    got, after = enc.update(state, events[events["timestamp"] > cut], output="numpy")
    want = enc.encode(events, output="numpy")
    assert list(got.entity_ids) == list(want.entity_ids)
    assert np.abs(got.embeddings - want.embeddings).max() <= TOL
    assert after.stats["n_extended"] == 0 and after.stats["n_reencoded"] > 0


def test_the_basket_rule_changes_nothing_on_a_log_without_ties():
    batch, _ = window([1, 2, 3, 4], [10, 11, 12, 13])
    config = EncoderConfig(n_items=20, d_model=16, dropout=0.0)
    torch.manual_seed(0)
    plain = SequenceEncoder(config).eval()
    baskets = SequenceEncoder(EncoderConfig(**{**config.__dict__, "baskets": True})).eval()
    baskets.load_state_dict(plain.state_dict())
    query = Causal(True).query(batch)
    assert torch.allclose(plain(batch), baskets(query), atol=1e-5)


def test_the_onnx_graph_of_a_basket_model_equals_torch(tmp_path):
    pytest.importorskip("onnxruntime")
    from seqenc.encoding.onnx import export_onnx

    events = daily(tiny_events(30, seed=5)).drop(columns=["line_a", "line_b"])
    path = random_bundle(tmp_path / "b", events, SCHEMA, 40, baskets=True)
    export_onnx(path)
    want = load_encoder(path, "cpu").encode(events, batch_size=7, output="numpy")
    got = load_encoder(path, "cpu", backend="onnxruntime").encode(
        events, batch_size=7, output="numpy"
    )
    np.testing.assert_allclose(got.embeddings, want.embeddings, atol=1e-4, rtol=0)

"""The repeat head's purchase counts (``repeat_counts``) and the multi-positive basket loss, each
against a loop written from the definition: which keys a position copies, their (purchases,
recency) biases, the copy weights, and the loss's value and gradients."""

from __future__ import annotations

import json
import math

import pytest
import torch
from tiny import fit, tiny_events

from seqenc.inference import load_encoder
from seqenc.model.basket_loss import basket_nll
from seqenc.model.baskets import basket_inputs, next_basket_pairs
from seqenc.model.batch import Batch
from seqenc.model.repeat import N_STEP_BUCKETS, RepeatHead, purchase_features

N_ITEMS = 12
N_TIME = 16


def batch() -> Batch:
    """Two histories; in row 0 equal ``dt_ref`` values are baskets (item 3 twice in one)."""
    items = torch.tensor([[3, 4, 3, 3, 5, 4, 6, 3], [7, 7, 8, 2, 7, 0, 0, 0]])
    dt_ref = torch.tensor(
        [[9e5, 9e5, 8e5, 8e5, 8e5, 5e4, 5e4, 2e3], [3e5, 2e5, 2e5, 1e5, 5e1, 0, 0, 0]],
        dtype=torch.float64,
    )
    dt_prev = torch.zeros(2, 8)
    dt_prev[:, 1:] = (dt_ref[:, :-1] - dt_ref[:, 1:]).float().clamp(min=0)
    return Batch(
        items=items,
        lengths=torch.tensor([8, 5]),
        dt_prev=dt_prev,
        dt_ref=dt_ref,
        categorical=torch.zeros(2, 8, 0, dtype=torch.long),
        numeric=torch.zeros(2, 8, 0),
        index=torch.arange(2),
        dt_query=torch.tensor([3e3, 7e4]),
    )


def bucket(x: float) -> int:
    """step_bucket of one number: 0, 1, 2, 3-4, 5-8, ..."""
    return min(math.ceil(math.log2(max(x, 1))) + (x > 0), N_STEP_BUCKETS - 1)


def naive_features(b: Batch, baskets: bool):
    """(order, first, count, until) per row and position, by loops."""
    out = []
    for r in range(len(b)):
        n, items, ref = int(b.lengths[r]), b.items[r].tolist(), b.dt_ref[r].tolist()
        order = [sum(ref[k] > ref[j] for k in range(n)) if baskets else j for j in range(n)]
        first = [
            items[j] >= 3
            and not any(items[k] == items[j] and order[k] == order[j] for k in range(j))
            for j in range(n)
        ]
        count = [
            len({order[k] for k in range(n) if items[k] == items[j] and order[k] <= order[j]})
            if first[j]
            else 0
            for j in range(n)
        ]
        until = [
            min([order[k] for k in range(n) if items[k] == items[j] and order[k] > order[j]] or [8])
            for j in range(n)
        ]
        out.append((order, first, count, until))
    return out


@pytest.mark.parametrize("baskets", [True, False])
def test_purchase_features_match_loops(baskets):
    b = batch()
    order, count, until = purchase_features(b, baskets)
    for r, (o, _, c, u) in enumerate(naive_features(b, baskets)):
        n = len(o)
        assert order[r, :n].tolist() == o
        assert count[r, :n].tolist() == c
        assert until[r, :n].tolist() == u
    if baskets:  # row 0: item 3 in baskets 0, 2 (twice), 7; its line at position 3 is no key
        assert count[0].tolist() == [1, 1, 2, 0, 1, 2, 1, 3]


def loop_attention(head: RepeatHead, hidden: torch.Tensor, b: Batch, baskets: bool):
    """``[B, L, L]`` copy weights by the definition, one query and key at a time."""
    out = torch.zeros(len(b), b.items.shape[1], b.items.shape[1])
    gaps = b.query_gaps
    for r, (order, first, count, until) in enumerate(naive_features(b, baskets)):
        n = len(order)
        for i in range(n):
            keys = [j for j in range(n) if first[j] and order[j] <= order[i] < until[j]]
            scores = []
            for j in keys:
                s = head.query(hidden[r, i]) @ head.key(hidden[r, j]) / math.sqrt(head.d_key)
                s = s + head.steps.weight[bucket(max(order[i] - order[j], 0)), 0]
                ago = float(b.dt_ref[r, j] - b.dt_ref[r, i]) + float(gaps[r, i])
                t = min(max(math.floor(math.log(max(ago, 1.0)) / 0.301), 0), N_TIME - 1)
                cell = bucket(count[j]) * N_TIME + t
                s = s + head.ago.weight[t, 0] + math.log(count[j]) + head.frequency.weight[cell, 0]
                scores.append(s)
            if scores:
                out[r, i, keys] = torch.softmax(torch.stack(scores), 0)
    return out


def head_and_hidden(seed: int, baskets: bool) -> tuple[RepeatHead, torch.Tensor]:
    torch.manual_seed(seed)
    head = RepeatHead(8, N_TIME, time=True, query_time=True, counts=True, baskets=baskets)
    with torch.no_grad():  # non-zero biases: every table's lookup is exercised
        for table in (head.steps, head.ago, head.frequency):
            table.weight.normal_()
    return head, torch.randn(2, 8, 8, requires_grad=True)


@pytest.mark.parametrize("baskets", [True, False])
def test_copy_weights_match_a_loop(baskets):
    head, hidden = head_and_hidden(0, baskets)
    b = basket_inputs(batch()) if baskets else batch()
    got = head.attention(hidden, b) * b.padding_mask[:, :, None]  # padding queries train nothing
    torch.testing.assert_close(got, loop_attention(head, hidden, b, baskets), rtol=1e-5, atol=1e-6)


def test_next_basket_pairs_are_each_basket_and_its_successors_items():
    b = basket_inputs(batch())
    rows, at, items = next_basket_pairs(b)
    got = sorted(zip(rows.tolist(), at.tolist(), items.tolist(), strict=True))
    # row 0: baskets {3, 4} -> {3, 5} (3 once), {3, 5} -> {4, 6}, {4, 6} -> {3}
    # row 1: {7} -> {7, 8}, {7, 8} -> {UNK: none}, {UNK} -> {7}
    want = [(0, 0, 3), (0, 0, 5), (0, 2, 4), (0, 2, 6), (0, 5, 3), (1, 0, 7), (1, 0, 8), (1, 3, 7)]
    assert got == sorted(want)


def test_basket_nll_values_and_gradients_match_a_loop():
    head, hidden = head_and_hidden(1, True)
    weight = torch.randn(N_ITEMS, 8, requires_grad=True)
    b = basket_inputs(batch())
    params = [hidden, weight, *head.parameters()]
    got = basket_nll(hidden, b, weight, "ce", head)
    got_grads = torch.autograd.grad(got, params)
    copy = loop_attention(head, hidden, b, True)
    terms = []
    for r, i, v in [(0, 0, 3), (0, 0, 5), (0, 2, 4), (0, 2, 6), (0, 5, 3), (1, 0, 7), (1, 0, 8)]:
        g = torch.sigmoid(head.gate(hidden[r, i]))[0]
        catalogue = torch.softmax(hidden[r, i] @ weight[3:].T, 0)[v - 3]
        copied = (copy[r, i] * (b.items[r] == v)).sum()
        terms.append(torch.log((1 - g) * catalogue + g * copied))
    terms.append(  # (1, 3, 7): row 1's UNK basket reads the first line of the basket at 1e5
        torch.log(
            (1 - torch.sigmoid(head.gate(hidden[1, 3]))[0])
            * torch.softmax(hidden[1, 3] @ weight[3:].T, 0)[4]
            + torch.sigmoid(head.gate(hidden[1, 3]))[0] * (copy[1, 3] * (b.items[1] == 7)).sum()
        )
    )
    expected = -torch.stack(terms).mean()
    expected_grads = torch.autograd.grad(expected, params)
    assert math.isclose(float(got), float(expected), rel_tol=1e-5)
    for g, e in zip(got_grads, expected_grads, strict=True):
        assert torch.allclose(g, e, rtol=1e-4, atol=1e-6)


def test_without_the_head_the_loss_is_the_catalogue_cross_entropy():
    torch.manual_seed(2)
    hidden = torch.randn(2, 8, 8)
    weight = torch.randn(N_ITEMS, 8)
    b = basket_inputs(batch())
    rows, at, items = next_basket_pairs(b)
    logits = hidden[rows, at] @ weight[3:].T
    want = torch.nn.functional.cross_entropy(logits, items - 3)
    assert math.isclose(float(basket_nll(hidden, b, weight, "ce")), float(want), rel_tol=1e-5)


def test_counts_on_a_single_event_stream_fit_test_and_recommend(tmp_path):
    """``repeat_counts`` off the basket protocol, end to end: the fit trains, tests and prints the
    baselines beside the model, the bundle keeps the option, and ``recommend`` ranks by the
    mixture (finite scores, the entity's own items among them)."""
    events = tiny_events(30, seed=4)
    events.to_parquet(tmp_path / "events.parquet")
    options = ["--data.baskets", "false", "--model.encoder.repeat_head", "true"]
    counts = ["--model.encoder.repeat_counts", "true", "--trainer.max_steps", "4"]
    bundle, printed = fit(tmp_path, *options, *counts)
    assert "baseline/topfreq" in printed and "baseline/timedecay" in printed
    encoder = json.loads((bundle / "config.json").read_text())["encoder"]
    assert (encoder["repeat_counts"], encoder["baskets"], encoder["repeat_head"]) == (
        True,
        False,
        True,
    )
    top = load_encoder(bundle, "cpu").recommend(events, k=5, filter_seen=False)
    assert (top.groupby("entity_id").size() == 5).all() and top["score"].notna().all()
    own = events.groupby("entity_id")["item_id"].agg(set)
    assert any(item in own[e] for e, item in zip(top["entity_id"], top["item_id"], strict=True))

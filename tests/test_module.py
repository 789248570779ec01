"""The LightningModule's training targets, evaluation scores and schedule."""

import torch

from seqenc.data.schema import EventSchema
from seqenc.data.spec import DataSpec
from seqenc.data.vocab import Vocabularies, Vocabulary
from seqenc.model.batch import Batch
from seqenc.model.masking import IGNORE
from seqenc.model.objectives import Causal
from seqenc.module import SeqencModule

# 10 real items + 3 specials = 13 ids, with time, no event features
SPEC = DataSpec(EventSchema(), Vocabularies(Vocabulary(list(range(10)))), max_len=8)


def causal_targets(batch):
    return Causal().training_pair(batch, SPEC.n_items)


def _batch(items, lengths, target=None, seen=None):
    items = torch.tensor(items)
    b, width = items.shape
    return Batch(
        items=items,
        lengths=torch.tensor(lengths),
        dt_prev=torch.zeros(b, width),
        dt_ref=torch.zeros(b, width),
        categorical=torch.zeros(b, width, 0, dtype=torch.long),
        numeric=torch.zeros(b, width, 0),
        index=torch.arange(b),
        target=None if target is None else torch.tensor(target),
        seen=None if seen is None else torch.tensor(seen),
    )


def test_causal_targets_shift_by_one():
    inputs, labels = causal_targets(_batch([[5, 6, 7, 8], [9, 10, 0, 0]], [4, 2]))
    assert inputs.lengths.tolist() == [3, 1]
    assert labels.tolist() == [[6, 7, 8, IGNORE], [10, IGNORE, IGNORE, IGNORE]]


def test_causal_inputs_measure_recency_from_the_newest_input():
    times = torch.tensor([[0.0, 10.0, 40.0, 100.0], [5.0, 7.0, 0.0, 0.0]])
    reference = torch.tensor([[100.0], [7.0]])  # each window's newest event (a target)
    batch = _batch([[5, 6, 7, 8], [9, 10, 0, 0]], [4, 2])
    batch.dt_ref = (reference - times) * batch.padding_mask
    inputs, _ = causal_targets(batch)
    # newest inputs are events 2 (t=40) and 0 (t=5): the targets' times never reach the inputs
    assert inputs.dt_ref.tolist() == [[40.0, 30.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_item_scores_filter_every_seen_item_target_included():
    module = SeqencModule(SPEC, d_model=8, n_heads=2).eval()
    # row 0 saw items 5 and 6, its target 6 is a repeat; row 1 saw 9
    batch = _batch([[5, 6], [9, 0]], [2, 1], target=[6, 4], seen=[[0, 0, 1], [5, 6, 9]])
    with torch.no_grad():
        raw = module.encoder.item_logits(module.encoder.entity_embedding(batch))
        scores = module.item_scores(batch, filter_seen=True)
    assert torch.isinf(scores[:, :3]).all()
    assert scores[0, 5] == -torch.inf and scores[1, 9] == -torch.inf
    assert scores[0, 6] == -torch.inf  # honest: a repeated target is filtered like any seen item
    assert scores[0, 7] == raw[0, 7]
    unfiltered = module.item_scores(batch, filter_seen=False)
    assert torch.isfinite(unfiltered[:, 3:]).all()


def test_evaluation_counts_repeated_targets_and_misses_them_when_filtered():
    module = SeqencModule(SPEC, d_model=8, n_heads=2, filter_seen=True).eval()
    # every target repeats an item of its history
    batch = _batch([[5, 6], [9, 0]], [2, 1], target=[6, 9], seen=[[0, 0, 1], [5, 6, 9]])
    with torch.no_grad():
        module._evaluate(batch, module.test_metrics)
    values = module.test_metrics.compute()
    assert values["hr@10"] == 0 and values["repeat_targets"] == 1.0


def test_defaults_follow_the_share_of_repeats():
    plain = SeqencModule(SPEC, d_model=8, n_heads=2)
    assert plain.filter_seen and plain.encoder.repeat is None
    repeats = DataSpec(SPEC.schema, SPEC.vocabs, max_len=8, repeat_share=0.5)
    causal = SeqencModule(repeats, d_model=8, n_heads=2)
    assert not causal.filter_seen and causal.encoder.repeat is not None
    masked = SeqencModule(repeats, objective="masked", d_model=8, n_heads=2)
    assert not masked.filter_seen and masked.encoder.repeat is None


def test_training_step_runs_both_objectives():
    torch.manual_seed(0)
    batch = _batch([[5, 6, 7, 8, 9], [10, 11, 12, 0, 0]], [5, 3])
    for objective, repeat in (("causal", False), ("masked", False), ("causal", True)):
        module = SeqencModule(SPEC, objective=objective, d_model=8, n_heads=2, repeat_head=repeat)
        loss = module.training_step(batch, 0)
        loss.backward()
        assert torch.isfinite(loss) and loss > 0
        assert module.encoder.item_embedding.weight.grad.abs().sum() > 0


def test_time_is_off_when_the_log_has_no_timestamps():
    untimed = DataSpec(EventSchema(timestamp=None), SPEC.vocabs, max_len=8)
    module = SeqencModule(untimed, d_model=8, n_heads=2, time=True)
    assert not module.config.time and not module.config.query_time


def test_shape_options_are_exactly_the_options_that_change_the_weights():
    """``SHAPE_OPTIONS`` (refused when resuming) against the models themselves: each of them
    changes the weights' names or shapes in some configuration (``n_heads``: with the time bias);
    no other option of the signature does, in either configuration."""
    import inspect

    from seqenc.module import SHAPE_OPTIONS

    def shapes(**options) -> dict:
        return {k: v.shape for k, v in SeqencModule(SPEC, **options).state_dict().items()}

    values = {
        "objective": ("causal", "masked"), "d_model": (16, 32), "n_layers": (2, 3),
        "n_heads": (2, 4), "ffn_mult": (4, 2), "dropout": (0.1, 0.5),
        "attention_dropout": (0.0, 0.5), "positional": ("learned", "rope"), "time": (True, False),
        "query_time": (True, False), "time_bias": (True, False), "repeat_head": (False, True),
        "pooling": ("last", "mean"), "normalize": (False, True), "loss": ("ce", "bce"),
        "loss_options": (None, {"n_negatives": 4}), "mask_prob": (0.2, 0.5),
        "replace_rule": (True, False), "mask_last_prob": (0.0, 0.5),
        "next_item_weight": (1.0, 0.5), "contrastive_weight": (0.0, 1.0),
        "contrastive_temperature": (0.1, 0.5), "contrastive_min_share": (0.5, 0.3),
        "lr": (1e-3, 0.1), "weight_decay": (0.01, 0.5), "warmup_steps": (100, 7),
        "filter_seen": (None, True), "ks": ((10, 20), (5,)),
    }  # fmt: skip
    options = [p for p in inspect.signature(SeqencModule).parameters if p != "spec"]
    assert sorted(options) == sorted(values)  # a new option must be classified here
    changes = set()
    for base in ({}, {"time_bias": True}):
        for name in options:
            a, b = ({**base, name: value} for value in values[name])
            if shapes(**a) != shapes(**b):
                changes.add(name)
    assert changes == set(SHAPE_OPTIONS)

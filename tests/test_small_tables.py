"""Label tables of any size end in a result or one line (issue 67, family 3): every probe (linear,
trees, stacked) decides before any fit whether its folds, inner folds and classes fit the table;
``predict_at`` with every cut-off before every event gives 0 rows, as ``embed_at`` does."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from seqenc import load_encoder
from seqenc.errors import SeqencError
from seqenc.evaluate import embed_at, predict_at, probe
from seqenc.evaluate import estimators as estimators_module
from tests.tiny import SCHEMA, random_bundle

pytest.importorskip("sklearn")


def _table(n: int, n_classes: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    features = pd.DataFrame(
        {"entity_id": range(n), "a": rng.normal(size=n), "embedding": list(rng.normal(size=(n, 3)))}
    )
    y = np.arange(n) % n_classes if n_classes else rng.normal(size=n)
    return features, pd.DataFrame({"entity_id": range(n), "y": y})


def test_the_stacked_probe_on_five_rows_and_two_folds_is_one_line() -> None:
    features, labels = _table(5, 2, 0)
    with pytest.raises(SeqencError, match="fold 1 of 2: its 2 training rows are too few"):
        probe(features, labels, label_column="y", n_splits=2, stack=["embedding"])


@pytest.mark.parametrize("model", ["linear", "trees"])
def test_the_size_check_comes_before_any_fit(model, monkeypatch) -> None:
    """Nothing is fitted when a fold is too small: the refusal is decided from the labels."""
    fitted = []
    monkeypatch.setattr(estimators_module, "fit_estimator", lambda *a: fitted.append(a))
    features, labels = _table(8, 2, 0)
    with pytest.raises(SeqencError, match="too few"):
        probe(features, labels, label_column="y", n_splits=2, model=model, stack=["embedding"])
    assert not fitted


@settings(
    max_examples=20,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    n=st.integers(2, 40),
    n_classes=st.sampled_from([0, 2, 3]),
    folds=st.integers(2, 6),
    model=st.sampled_from(["linear", "trees"]),
    stacked=st.booleans(),
)
def test_any_size_is_a_result_or_one_line(n, n_classes, folds, model, stacked) -> None:
    """Generated row, class and fold counts: a result, or a SeqencError in one line."""
    features, labels = _table(n, n_classes, n)
    stack = ["embedding"] if stacked else []
    try:
        result = probe(features, labels, label_column="y", n_splits=folds, model=model, stack=stack)
    except SeqencError as e:
        assert "\n" not in str(e)
        return
    assert len(next(iter(result.folds.values()))) == folds


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    from seqenc.data.synthetic import generate_events
    from tests.test_own_output import _layout

    events = generate_events(6, n_items=12, seed=2, max_events=10).drop(columns="account_type")
    head = {"task": "classification", "classes": ["a", "b"], "aggregates": _layout(events)}
    path = random_bundle(tmp_path_factory.mktemp("small") / "b", events, SCHEMA, 8, head=head)
    return load_encoder(path, "cpu"), events


def test_predict_at_before_every_event_is_zero_rows_as_embed_at(fused) -> None:
    enc, events = fused
    early = events.groupby("entity_id", as_index=False)["timestamp"].min()
    cut = early.assign(as_of=early["timestamp"] - pd.Timedelta(seconds=1))[["entity_id", "as_of"]]
    assert len(embed_at(enc, events, cut)) == 0
    keys, values = predict_at(enc, events, cut)
    assert len(keys) == 0 and values.shape == (0, 2)

"""The nearest-neighbour index: exact search against a naive sort, the approximate index's recall
measured at build, its files (and what is not one), the space check, neighbours."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqenc.errors import SeqencError
from seqenc.retrieval.approximate import faiss_module
from seqenc.retrieval.index import build_index
from seqenc.retrieval.index_files import INDEX_FILE, IVF_FILE, VECTORS_FILE, load_index, save_index
from seqenc.retrieval.space import Space, metadata_of
from seqenc.retrieval.topk import exact_search, top_per_row

SPACE = Space("m", "hash-weights", "items")


def naive_top(queries, vectors, k, allowed):
    """Each query's best ``k`` allowed rows by a full sort."""
    scores = queries @ vectors.T
    scores[:, ~allowed] = -np.inf
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, order, 1), order


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(1, 12),
    chunk=st.integers(1, 200),
    seed=st.integers(0, 2**16),
    share=st.floats(0.0, 1.0),
)
def test_exact_search_is_a_full_sort_chunk_by_chunk(n, k, chunk, seed, share):
    rng = np.random.default_rng(seed)
    queries, vectors = rng.normal(size=(5, 4)), rng.normal(size=(n, 4))
    allowed = rng.random(n) < share
    scores, found = exact_search(queries, vectors, k, allowed, chunk_elements=chunk)
    want_scores, want = naive_top(
        queries.astype(np.float32), vectors.astype(np.float32), k, allowed
    )
    width = min(k, n)
    np.testing.assert_allclose(scores[:, :width], want_scores, rtol=1e-5, atol=1e-5)
    real = np.isfinite(want_scores)
    np.testing.assert_array_equal(found[:, :width][real], want[real])
    assert (found[:, :width][~real] == -1).all() and (found[:, width:] == -1).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 9), st.floats(-3, 3)), max_size=40))
def test_top_per_row_against_a_loop(pairs):
    rows = np.array([p[0] for p in pairs], dtype=np.int64)
    items = np.array([p[1] for p in pairs], dtype=np.int64)
    scores = np.array([p[2] for p in pairs], dtype=np.float32)
    scores[items == 9] = -np.inf  # filtered pairs never come back
    got = top_per_row(rows, items, scores, 3)
    for row in range(6):
        mine = sorted(
            (
                (s, i)
                for r, i, s in zip(rows, items, scores, strict=True)
                if r == row and s > -np.inf
            ),
            key=lambda t: -t[0],
        )[:3]
        here = got[0] == row
        assert got[2][here].tolist() == pytest.approx([s for s, _ in mine])
        assert got[3][here].tolist() == list(range(1, len(mine) + 1))


def clustered(n: int, dim: int = 8, seed: int = 0) -> np.ndarray:
    """Vectors around 20 centres, as trained embeddings cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(20, dim)) * 3
    return (centres[rng.integers(0, 20, n)] + rng.normal(size=(n, dim))).astype(np.float32)


@pytest.mark.parametrize("ids", [np.arange(500) * 7, [f"item-{i}" for i in range(500)]])
def test_an_exact_index_round_trips_through_its_files(tmp_path, ids):
    vectors = clustered(500)
    index = build_index(pa.array(ids), vectors, SPACE)
    assert index.info["kind"] == "exact" and "exact" in index.summary()
    save_index(index, tmp_path / "ix")
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == [INDEX_FILE, VECTORS_FILE]
    back = load_index(tmp_path / "ix")
    assert back.ids.to_pylist() == list(np.asarray(ids).tolist()) and back.space == SPACE
    queries = clustered(7, seed=1)
    np.testing.assert_array_equal(back.search(queries, 5)[1], index.search(queries, 5)[1])
    np.testing.assert_array_equal(
        index.search(queries, 5)[1], naive_top(queries, vectors, 5, np.ones(500, bool))[1]
    )


def test_an_approximate_index_keeps_the_recall_it_measured(tmp_path, caplog):
    pytest.importorskip("faiss")
    vectors = clustered(4000, dim=16)
    with caplog.at_level("INFO"):
        index = build_index(
            pa.array(np.arange(4000)), vectors, SPACE, kind="approximate", target=0.9
        )
    assert index.info["kind"] == "ivf" and index.info["recall"] >= 0.9
    assert "recall@10" in caplog.text and f"nprobe {index.info['nprobe']}" in index.summary()
    save_index(index, tmp_path / "ix")
    back = load_index(tmp_path / "ix")
    queries = vectors[:200]
    np.testing.assert_array_equal(back.search(queries, 10)[1], index.search(queries, 10)[1])
    exact = index.search(queries, 10, exact=True)[1]
    found = index.search(queries, 10)[1]
    hits = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(found, exact, strict=True)])
    assert hits >= 0.85
    allowed = np.arange(4000) % 3 == 0  # filtered inside the scan
    assert np.isin(index.search(queries, 10, allowed)[1], np.flatnonzero(allowed)).all()


def test_what_is_not_an_index_is_refused_in_one_line(tmp_path):
    index = build_index(pa.array(np.arange(50)), clustered(50), SPACE)
    save_index(index, tmp_path / "ix")
    folder = tmp_path / "ix"
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for path in (tmp_path / "empty", tmp_path / "file", tmp_path / "absent"):
        with pytest.raises(SeqencError, match="is not a seqenc index"):
            load_index(path)
    header = json.loads((folder / INDEX_FILE).read_text())
    for broken in ({**header, "format": "x"}, {**header, "ids": header["ids"][:-1]}, [1]):
        (folder / INDEX_FILE).write_text(json.dumps(broken))
        with pytest.raises(SeqencError, match="is not a seqenc index"):
            load_index(folder)
    (folder / INDEX_FILE).write_text("{not json")
    with pytest.raises(SeqencError, match="not JSON"):
        load_index(folder)
    (folder / INDEX_FILE).write_text(json.dumps(header))
    (folder / VECTORS_FILE).write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(SeqencError, match="not a NumPy array"):
        load_index(folder)
    (folder / VECTORS_FILE).unlink()
    np.save(folder / VECTORS_FILE, np.zeros((50, 3), np.float32))
    with pytest.raises(SeqencError, match="not \\(50, 8\\)"):
        load_index(folder)
    if faiss_module() is not None:  # the approximate index's own file
        np.save(folder / VECTORS_FILE, clustered(50))
        (folder / INDEX_FILE).write_text(json.dumps({**header, "kind": "ivf", "nprobe": 1}))
        (folder / IVF_FILE).write_bytes(b"not faiss")
        with pytest.raises(SeqencError, match="not a faiss index"):
            load_index(folder)


def test_a_query_from_another_model_or_role_is_refused(tmp_path):
    index = build_index(pa.array(np.arange(30)), clustered(30), SPACE)
    other = pa.table(
        {"entity_id": ["a"], "query": pa.array([[0.0] * 8], pa.list_(pa.float32(), 8))},
        schema=None,
    )
    other = other.replace_schema_metadata(metadata_of(Space("n", "other-space", "queries")))
    with pytest.raises(SeqencError, match="the query comes from model 'n'"):
        index.query(other)
    accounts = other.rename_columns(["entity_id", "embedding"]).replace_schema_metadata(
        metadata_of(Space("m", SPACE.space_id, "accounts"))
    )
    with pytest.raises(SeqencError, match="an index of items answers"):
        index.query(accounts)
    same = other.replace_schema_metadata(metadata_of(Space("m", SPACE.space_id, "queries")))
    assert index.query(same, k=3)["query_id"].tolist() == ["a"] * 3


def test_neighbours_leave_the_query_out_and_follow_cosine():
    vectors = clustered(80)
    ids = pa.array([f"acct-{i}" for i in range(80)])
    index = build_index(ids, vectors, Space("m", "s", "accounts"))
    got = index.neighbours(["acct-3", "acct-10"], k=4)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    for name, row in (("acct-3", 3), ("acct-10", 10)):
        cosine = unit @ unit[row]
        cosine[row] = -np.inf
        want = [f"acct-{i}" for i in np.argsort(-cosine)[:4]]
        assert got[got.query_id == name].id.tolist() == want
    with pytest.raises(SeqencError, match="not in the index"):
        index.neighbours(["nobody"])
    with pytest.raises(SeqencError, match="empty"):
        index.neighbours([])
    assert isinstance(got, pd.DataFrame) and list(got.columns) == [
        "query_id",
        "rank",
        "id",
        "score",
    ]

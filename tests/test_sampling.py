import numpy as np
import pytest

from seqenc.data.sampling import BucketBatchSampler, token_batches


def _lengths(n=1000, seed=0):
    return np.random.default_rng(seed).integers(1, 500, n)


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_sample_once_and_len(shuffle):
    lengths = _lengths()
    sampler = BucketBatchSampler(lengths, 64, shuffle=shuffle, bucket_factor=4)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert np.array_equal(np.sort(np.concatenate(batches)), np.arange(len(lengths)))
    assert all(len(b) <= 64 for b in batches)


def test_bucketing_reduces_padding():
    lengths = _lengths(5000)
    padded = lambda s: sum(len(b) * lengths[b].max() for b in s)  # noqa: E731
    bucketed = padded(BucketBatchSampler(lengths, 64, shuffle=True, bucket_factor=50))
    plain = padded(BucketBatchSampler(lengths, 64, shuffle=True, bucket_factor=1))
    assert bucketed < 0.7 * plain


def test_deterministic_per_seed_and_epoch():
    lengths = _lengths()
    a, b = (BucketBatchSampler(lengths, 32, shuffle=True, seed=3) for _ in range(2))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    b.set_epoch(1)
    assert not all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("even", [True, False])
def test_shards_are_disjoint(even):
    lengths = _lengths(1001)
    shards = [
        list(BucketBatchSampler(lengths, 10, shuffle=even, rank=r, world_size=3, even_shards=even))
        for r in range(3)
    ]
    seen = np.concatenate([np.concatenate(s) for s in shards])
    assert len(np.unique(seen)) == len(seen)
    if even:  # equal batch counts so DDP ranks step together
        assert len({len(s) for s in shards}) == 1
    else:  # prediction covers every sample exactly once
        assert len(seen) == len(lengths)
    for r, s in enumerate(shards):
        sampler = BucketBatchSampler(
            lengths, 10, shuffle=even, rank=r, world_size=3, even_shards=even
        )
        assert len(s) == len(sampler)


@pytest.mark.parametrize(("max_tokens", "max_rows"), [(1, None), (64, None), (500, 7), (10**6, 30)])
def test_token_batches_cover_in_order_within_budget_and_greedily(max_tokens, max_rows):
    width = _lengths(300)
    order = np.argsort(width, kind="stable")
    batches = token_batches(order, width, max_tokens, max_rows)
    np.testing.assert_array_equal(np.concatenate(batches), order)
    rows = max_rows or len(order)

    def padded(batch):
        return len(batch) * max(int(width[batch].max()), 1)

    for batch, following in zip(batches, batches[1:] + [None], strict=True):
        assert len(batch) <= rows
        assert len(batch) == 1 or padded(batch) <= max_tokens
        if following is not None and len(batch) < rows:  # the next row would not have fitted
            assert padded(np.append(batch, following[0])) > max_tokens

"""Where an entity is read out: the encoder's final hidden states → one embedding per history.

The one readout rule, used by :meth:`SequenceEncoder.entity_embedding
<seqenc.model.encoder.SequenceEncoder.entity_embedding>`, the incremental cache
(:func:`seqenc.model.cache.readout`) and the ONNX graph (:mod:`seqenc.encoding.onnx`): ``pooling="last"``
takes the state at the newest real position, ``"mean"`` averages the real positions,
``"attention"`` weighs them by a learned score (a softmax over each row's real positions, so the
model picks which events describe the entity); then ``normalize`` scales it to unit L2 norm. Rows are gathered, never indexed by ``arange(batch)``, so a
trace keeps the batch size dynamic.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from seqenc.model.config import SCORED_POOLINGS


def newest_state(hidden: Tensor, lengths: Tensor) -> Tensor:
    """``[B, d]`` the state at each row's newest real position of ``hidden`` ``[B, L, d]``
    (position 0 for an empty row)."""
    index = (lengths - 1).clamp(min=0)[:, None, None].expand(-1, 1, hidden.shape[-1])
    return hidden.gather(1, index)[:, 0]


def real_sum(hidden: Tensor, lengths: Tensor) -> Tensor:
    """``[B, d]`` the sum of ``hidden`` ``[B, L, d]`` over each row's first ``lengths`` positions."""
    positions = torch.arange(hidden.shape[1], device=hidden.device)
    weights = (positions[None, :] < lengths[:, None]).to(hidden.dtype)[..., None]
    return (hidden * weights).sum(1)


def pool(newest: Tensor, total: Tensor, count: Tensor, pooling: str, normalize: bool) -> Tensor:
    """``[B, d]`` the readout from a row's summaries: its ``newest`` state (``"last"``) or
    ``total / count`` (``"mean"``, over ``count`` real positions, at least 1), then the optional L2
    normalisation. ``newest`` or ``total`` may be ``None`` when the pooling does not read it."""
    if pooling == "mean":
        pooled = total / count.to(total.dtype).clamp(min=1.0)[:, None]
    else:
        pooled = newest
    return F.normalize(pooled, dim=-1) if normalize else pooled


def attention_pool(hidden: Tensor, lengths: Tensor, scores: Tensor) -> Tensor:
    """``[B, d]`` the sum of ``hidden`` ``[B, L, d]`` weighted by the softmax of ``scores``
    ``[B, L]`` over each row's real positions (an empty row reads position 0)."""
    positions = torch.arange(hidden.shape[1], device=hidden.device)
    real = positions[None, :] < lengths.clamp(min=1)[:, None]
    weights = torch.softmax(scores.float().masked_fill(~real, -torch.inf), dim=1)
    return (hidden * weights.to(hidden.dtype)[..., None]).sum(1)


def entity_readout(
    hidden: Tensor,
    lengths: Tensor,
    pooling: str,
    normalize: bool,
    scores: Tensor | None = None,
    summaries: Tensor | None = None,
) -> Tensor:
    """``[B, d]`` the entity embeddings of ``hidden`` ``[B, L, d]``, rows of ``lengths`` real
    positions (:func:`pool` of :func:`newest_state` or :func:`real_sum`, or with
    ``pooling="attention"`` :func:`attention_pool` of ``scores`` ``[B, L]``; ``"items"`` adds the
    per-item ``summaries`` ``[B, d]`` of :mod:`seqenc.model.item_readout` to that)."""
    if pooling in SCORED_POOLINGS:
        pooled = attention_pool(hidden, lengths, scores)
        if pooling == "items":
            pooled = pooled + summaries
        return F.normalize(pooled, dim=-1) if normalize else pooled
    if pooling == "mean":
        return pool(None, real_sum(hidden, lengths), lengths, pooling, normalize)
    return pool(newest_state(hidden, lengths), None, lengths, pooling, normalize)

"""Time groups: the events of a history that share one time (the measurements of one round, a
basket's lines) read as one token of a bidirectional encoder.

A group's token is the sum of its events' contents (item, features, values: a set, whatever the
store's tie order) plus the place of the group in the history (:meth:`TokenEmbedding.context
<seqenc.model.embeddings.TokenEmbedding.context>` of its first event: position, gap from the
previous group, time values). Attention then runs over groups, not events, and every event reads
its group's state back, so the readout and the objectives see one state per event as before. A
history whose times all differ is unchanged; one of n events at k distinct times costs attention
over k.
An appended [MASK] is a group of its own.
"""

from __future__ import annotations

import torch
from torch import Tensor

from seqenc.model.batch import MASK, Batch


def group_starts(batch: Batch) -> Tensor:
    """``[B, L]`` bool: the real events whose time differs from the previous event's (and every
    [MASK]): each starts a group. Times are compared through ``dt_ref``, equal for equal times."""
    ref = batch.dt_ref
    starts = torch.ones_like(batch.padding_mask)
    starts[:, 1:] = ref[:, 1:] != ref[:, :-1]
    return (starts | (batch.items == MASK)) & batch.padding_mask


def group_batch(batch: Batch, starts: Tensor, width: int) -> Batch:
    """The batch of each group's first event (``width`` groups a row, right-padded): what
    :meth:`~seqenc.model.embeddings.TokenEmbedding.context` reads for the group's place."""
    # the k-th group's first event: the number of events before the (k+1)-th start (a count, not
    # a sort, so that an ONNX trace gives the same order)
    counts = starts.long().cumsum(1)
    ks = torch.arange(width, device=starts.device)[None, :, None]
    first = (counts[:, None, :] <= ks).sum(-1).clamp(max=starts.shape[1] - 1)
    rows, n_cat, n_num = len(batch), batch.categorical.shape[-1], batch.numeric.shape[-1]
    lengths = starts.sum(1)
    kept = torch.arange(width, device=starts.device)[None, :] < lengths[:, None]
    return Batch(
        items=batch.items.gather(1, first) * kept,
        lengths=lengths,
        dt_prev=batch.dt_prev.gather(1, first) * kept,
        dt_ref=batch.dt_ref.gather(1, first) * kept,
        categorical=batch.categorical.new_zeros(rows, width, n_cat),
        numeric=batch.numeric.new_zeros(rows, width, n_num),
        index=batch.index,
        dt_query=batch.dt_query,
    )


def sum_into_groups(
    content: Tensor, starts: Tensor, real: Tensor, width: int
) -> tuple[Tensor, Tensor]:
    """``(tokens [B, width, d], group [B, L])``: each group's summed event ``content`` and each
    event's group index (``width`` for padding, ``real`` False, which no group reads)."""
    group = starts.long().cumsum(1) - 1
    group = torch.where(real, group, torch.full_like(group, width))
    d = content.shape[-1]
    tokens = content.new_zeros(content.shape[0], width + 1, d)
    tokens.scatter_add_(1, group[..., None].expand(-1, -1, d), content)
    return tokens[:, :width], group


def events_of_groups(hidden: Tensor, group: Tensor) -> Tensor:
    """``[B, L, d]`` each event's group state from ``hidden`` ``[B, G, d]`` (padding reads group 0)."""
    index = group.clamp(max=hidden.shape[1] - 1)[..., None].expand(-1, -1, hidden.shape[-1])
    return hidden.gather(1, index)

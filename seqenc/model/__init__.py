"""The Transformer sequence encoder, its input embeddings, masking and item-prediction losses."""

from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.losses import LOSSES, compute_loss
from seqenc.model.masking import IGNORE, mask_items, next_item_targets

__all__ = [
    "IGNORE",
    "LOSSES",
    "EncoderConfig",
    "SequenceEncoder",
    "compute_loss",
    "mask_items",
    "next_item_targets",
]

"""A ``seqenc fit`` Lightning checkpoint → a model bundle, reading plain data only.

Lightning checkpoints are pickles: they are read with ``torch.load(weights_only=True)``, which
refuses any object that is not plain data or a tensor. Checkpoints written before the lengths were
named (``max_len`` in the encoder configuration and the data spec) convert too.
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import torch

from seqenc.bundle import save_bundle
from seqenc.data.spec import DataSpec
from seqenc.errors import SeqencError
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.head import SupervisedHead


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: plain containers and tensors only, never arbitrary
    objects; one that :func:`bundle_from_checkpoint` cannot use is refused in one line."""
    path = Path(path)
    if not path.is_file():
        raise SeqencError(f"checkpoint not found: {str(path)!r}")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise SeqencError(
            f"refusing to load checkpoint {str(path)!r}: it holds objects other than plain data and "
            f"tensors, which could run code when unpickled ({first})"
        ) from e
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise SeqencError(f"cannot read checkpoint {str(path)!r}: {e}") from e
    missing = [k for k in ("hyper_parameters", "state_dict", "encoder_config") if k not in ckpt]
    if not any(isinstance(v, dict) and "spec" in v for v in ckpt.values()):
        missing.append("the DataModule's spec")
    if missing:
        raise SeqencError(
            f"checkpoint {str(path)!r} lacks {missing}; expected a checkpoint written by "
            "`seqenc fit` (SeqencModule with its SequenceDataModule)"
        )
    return ckpt


def bundle_from_checkpoint(
    ckpt_path: str | Path, output_dir: str | Path, name: str | None = None
) -> Path:
    """Turn a ``seqenc fit`` Lightning checkpoint into a bundle; returns the bundle path.

    Reads plain data only: the module's ``encoder_config`` and ``encoder.*`` weights, its
    ``objective`` hyperparameter, and the DataModule's saved spec.
    """
    ckpt_path = Path(ckpt_path)
    ckpt = load_checkpoint(ckpt_path)
    try:
        encoder = SequenceEncoder(EncoderConfig(**EncoderConfig.upgrade(ckpt["encoder_config"])))
        state = next(v for v in ckpt.values() if isinstance(v, dict) and "spec" in v)
        spec = DataSpec.from_dict(state["spec"])
        if spec.labels:  # a fine-tuned model: its label head is part of the encoder's weights
            hp = ckpt["hyper_parameters"]
            fusion = hp.get("fusion", "none")
            encoder.head = SupervisedHead.of(encoder.config.d_model, spec.labels, fusion)
        prefix = "encoder."
        encoder.load_state_dict(
            {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
        )
        objective = ckpt["hyper_parameters"]["objective"]
    except (TypeError, KeyError, RuntimeError, ValueError, SeqencError) as e:
        raise SeqencError(f"checkpoint {str(ckpt_path)!r} is not a usable seqenc model: {e}") from e
    return save_bundle(
        output_dir, encoder, spec, objective=objective, name=name, inputs=[ckpt_path]
    )

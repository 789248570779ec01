"""A trained model as a self-contained directory that loads without pickle.

A bundle holds three files:

- ``config.json``: format and seqenc versions, the model name, the objective, the
  :class:`~seqenc.model.encoder.EncoderConfig`, the :class:`~seqenc.data.schema.EventSchema`,
  ``max_len`` (events per history fed to the model), a hash of that configuration and the SHA-256
  of the weight file;
- ``vocab.json``: :meth:`Vocabularies.to_dict`;
- ``model.safetensors``: the encoder weights only (no optimizer, no objective head).

Loading reads JSON and safetensors only, so a bundle cannot run code. Lightning checkpoints are
pickles: :func:`bundle_from_checkpoint` reads them with ``torch.load(weights_only=True)``, which
refuses any object that is not plain data or a tensor. Bundles are written to a temporary directory
next to the target and renamed into place, so a crash never leaves a half-written bundle.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import pickle
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from seqenc import __version__
from seqenc.data.schema import EventSchema
from seqenc.data.vocab import Vocabularies
from seqenc.errors import SeqencError
from seqenc.model.encoder import EncoderConfig, SequenceEncoder

FORMAT_VERSION = 1
CONFIG_FILE, VOCAB_FILE, WEIGHTS_FILE = "config.json", "vocab.json", "model.safetensors"
OBJECTIVES = ("causal", "masked")


@dataclass(frozen=True)
class BundleMeta:
    """What ``config.json`` holds.

    Attributes:
        name: a human-readable model name (written into every export).
        objective: ``"causal"`` or ``"masked"``.
        max_len: the newest ``max_len`` events of a history are fed to the model.
        encoder: the encoder architecture.
        schema: the event-log columns the model reads.
        config_hash: short SHA-256 of (objective, max_len, encoder, schema): bundles with equal
            hashes read the same inputs and give embeddings of the same shape.
        weights_sha256: SHA-256 of ``model.safetensors``, checked on load.
        seqenc_version: the seqenc version that wrote the bundle.
        format_version: the bundle layout version.
    """

    name: str
    objective: str
    max_len: int
    encoder: EncoderConfig
    schema: EventSchema
    config_hash: str
    weights_sha256: str
    seqenc_version: str = __version__
    format_version: int = FORMAT_VERSION

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return self.encoder.d_model

    def to_dict(self) -> dict[str, Any]:
        return {
            "format_version": self.format_version,
            "seqenc_version": self.seqenc_version,
            "name": self.name,
            "objective": self.objective,
            "max_len": self.max_len,
            "encoder": asdict(self.encoder),
            "schema": asdict(self.schema),
            "config_hash": self.config_hash,
            "weights_sha256": self.weights_sha256,
        }

    @classmethod
    def from_dict(cls, d: Any, where: str) -> BundleMeta:
        """Validate a parsed ``config.json``; every problem names ``where``."""
        if not isinstance(d, dict):
            raise SeqencError(f"{where}: expected a JSON object, got {type(d).__name__}")
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            raise SeqencError(
                f"{where}: bundle format version {version!r} is not supported; seqenc "
                f"{__version__} reads version {FORMAT_VERSION} (re-export the bundle, or use the "
                f"seqenc version that wrote it: {d.get('seqenc_version')!r})"
            )
        missing = [k for k in cls.__dataclass_fields__ if k not in d]
        if missing:
            raise SeqencError(f"{where}: missing key(s) {missing}")
        try:
            meta = cls(
                name=str(d["name"]),
                objective=d["objective"],
                max_len=int(d["max_len"]),
                encoder=EncoderConfig(**d["encoder"]),
                schema=EventSchema(**d["schema"]),
                config_hash=d["config_hash"],
                weights_sha256=d["weights_sha256"],
                seqenc_version=d["seqenc_version"],
                format_version=version,
            )
        except (TypeError, ValueError) as e:
            raise SeqencError(f"{where}: invalid model configuration: {e}") from e
        if meta.objective not in OBJECTIVES or meta.max_len < 1:
            raise SeqencError(
                f"{where}: objective must be one of {OBJECTIVES} and max_len >= 1, "
                f"got {meta.objective!r}, {meta.max_len!r}"
            )
        if meta.config_hash != config_hash(meta.objective, meta.max_len, meta.encoder, meta.schema):
            raise SeqencError(f"{where}: config_hash does not match the configuration (edited?)")
        return meta


def config_hash(objective: str, max_len: int, encoder: EncoderConfig, schema: EventSchema) -> str:
    """16 hex digits of the SHA-256 of the canonical JSON of the model's configuration."""
    text = json.dumps(
        {
            "objective": objective,
            "max_len": max_len,
            "encoder": asdict(encoder),
            "schema": asdict(schema),
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_vocabs(
    vocabs: Vocabularies, encoder: EncoderConfig, schema: EventSchema, where: str
) -> None:
    """The vocabularies must match the embedding tables they index."""
    sizes = tuple(len(vocabs.categorical[c]) for c in schema.categorical if c in vocabs.categorical)
    if len(vocabs.item) != encoder.n_items or sizes != encoder.categorical_sizes:
        raise SeqencError(
            f"{where}: vocabularies (items {len(vocabs.item)}, categorical {sizes}) do not match the "
            f"encoder (n_items {encoder.n_items}, categorical_sizes {encoder.categorical_sizes})"
        )


@contextmanager
def _atomic_directory(target: Path) -> Iterator[Path]:
    """A fresh temporary directory beside ``target``, renamed to ``target`` on success.

    An existing ``target`` is replaced only if it is an empty directory or a bundle (holds
    ``config.json``).
    """
    replaceable = target.is_dir() and (
        (target / CONFIG_FILE).is_file() or not any(target.iterdir())
    )
    if target.exists() and not replaceable:
        raise SeqencError(
            f"{str(target)!r} exists and is not a seqenc bundle; refusing to overwrite"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        tmp.chmod(0o755)
        if target.exists():
            old = Path(
                tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
            )
            target.rename(old / "bundle")
            tmp.rename(target)
            shutil.rmtree(old)
        else:
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def save_bundle(
    output_dir: str | Path,
    encoder: SequenceEncoder,
    vocabs: Vocabularies,
    schema: EventSchema,
    max_len: int,
    objective: str | None = None,
    name: str | None = None,
) -> Path:
    """Write ``encoder`` with its vocabularies and schema as a bundle directory; returns its path.

    ``objective`` defaults to the encoder's (causal or not); ``name`` to the directory's name.
    """
    output_dir = Path(output_dir)
    config = encoder.config
    objective = objective or ("causal" if config.causal else "masked")
    _check_vocabs(vocabs, config, schema, "save_bundle")
    state = {k: v.detach().cpu().contiguous() for k, v in encoder.state_dict().items()}
    with _atomic_directory(output_dir) as tmp:
        save_file(state, tmp / WEIGHTS_FILE, metadata={"format": "pt"})
        meta = BundleMeta(
            name=name or output_dir.resolve().name,
            objective=objective,
            max_len=int(max_len),
            encoder=config,
            schema=schema,
            config_hash=config_hash(objective, int(max_len), config, schema),
            weights_sha256=_file_sha256(tmp / WEIGHTS_FILE),
        )
        (tmp / CONFIG_FILE).write_text(json.dumps(meta.to_dict(), indent=2) + "\n")
        (tmp / VOCAB_FILE).write_text(json.dumps(vocabs.to_dict()) + "\n")
    return output_dir


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as e:
        raise SeqencError(f"bundle file missing: {str(path)!r}") from e
    except (OSError, ValueError) as e:
        raise SeqencError(f"cannot read bundle file {str(path)!r}: {e}") from e


def load_bundle(path: str | Path) -> tuple[SequenceEncoder, BundleMeta, Vocabularies]:
    """Read a bundle: ``(encoder in eval mode on CPU, meta, vocabularies)``.

    Raises:
        SeqencError: naming the file, for a missing directory or file, malformed JSON, an
            unsupported format version, a weight file whose checksum or tensors do not match.
    """
    path = Path(path)
    if not path.is_dir():
        raise SeqencError(f"model bundle not found: {str(path)!r} is not a directory")
    meta = BundleMeta.from_dict(_read_json(path / CONFIG_FILE), str(path / CONFIG_FILE))
    vocab_path = path / VOCAB_FILE
    try:
        vocabs = Vocabularies.from_dict(_read_json(vocab_path))
    except SeqencError as e:
        raise SeqencError(f"invalid bundle file {str(vocab_path)!r}: {e}") from e
    _check_vocabs(vocabs, meta.encoder, meta.schema, str(vocab_path))

    weights = path / WEIGHTS_FILE
    if not weights.is_file():
        raise SeqencError(f"bundle file missing: {str(weights)!r}")
    if _file_sha256(weights) != meta.weights_sha256:
        raise SeqencError(f"{str(weights)!r} is corrupt: its SHA-256 differs from config.json's")
    try:
        state = load_file(weights)
    except (SafetensorError, OSError, ValueError) as e:
        raise SeqencError(f"cannot read weights {str(weights)!r}: {e}") from e
    encoder = SequenceEncoder(meta.encoder)
    try:
        encoder.load_state_dict(state)
    except RuntimeError as e:
        raise SeqencError(
            f"weights {str(weights)!r} do not fit the encoder in config.json: {e}"
        ) from e
    return encoder.eval(), meta, vocabs


def _load_checkpoint(path: Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)``: plain containers and tensors only, never arbitrary objects."""
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
    missing = [k for k in ("hyper_parameters", "state_dict", "seqenc") if k not in ckpt]
    if missing:
        raise SeqencError(
            f"checkpoint {str(path)!r} lacks {missing}; expected a checkpoint written by "
            "`seqenc fit` (SeqencModule with its SequenceDataModule)"
        )
    return ckpt


def bundle_from_checkpoint(
    ckpt_path: str | Path, output_dir: str | Path, name: str | None = None
) -> Path:
    """Turn a ``seqenc fit`` Lightning checkpoint into a bundle; returns the bundle path."""
    from seqenc.module import SeqencModule  # Lightning is only needed here

    ckpt_path = Path(ckpt_path)
    ckpt = _load_checkpoint(ckpt_path)
    hparams = ckpt["hyper_parameters"]
    accepted = inspect.signature(SeqencModule.__init__).parameters
    try:
        module = SeqencModule(**{k: v for k, v in hparams.items() if k in accepted})
        prefix = "encoder."
        module.encoder.load_state_dict(
            {k[len(prefix) :]: v for k, v in ckpt["state_dict"].items() if k.startswith(prefix)}
        )
        vocabs = Vocabularies.from_dict(ckpt["seqenc"]["vocabs"])
        schema = EventSchema(**ckpt["seqenc"]["schema"])
    except (TypeError, KeyError, RuntimeError, SeqencError) as e:
        raise SeqencError(f"checkpoint {str(ckpt_path)!r} is not a usable seqenc model: {e}") from e
    return save_bundle(
        output_dir,
        module.encoder,
        vocabs,
        schema,
        max_len=hparams["max_len"],
        objective=hparams["objective"],
        name=name,
    )


def main(argv: list[str]) -> None:
    """``seqenc bundle --ckpt CKPT --output DIR [--name NAME]``."""
    parser = argparse.ArgumentParser(
        prog="seqenc bundle", description="Turn a seqenc Lightning checkpoint into a model bundle."
    )
    parser.add_argument("--ckpt", required=True, help="a .ckpt written by `seqenc fit`")
    parser.add_argument("--output", required=True, help="bundle directory to write")
    parser.add_argument("--name", default=None, help="model name (default: the directory name)")
    args = parser.parse_args(argv)
    try:
        path = bundle_from_checkpoint(args.ckpt, args.output, name=args.name)
    except SeqencError as e:
        parser.exit(1, f"seqenc bundle: error: {e}\n")
    print(f"bundle: {path}")

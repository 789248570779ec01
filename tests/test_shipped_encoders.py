"""Each shipped config (``configs/*.yaml``, the fine-tuning ones layered on a data config as their
headers say) builds the same encoder as recorded in ``tests/data/shipped_encoders.json``: the same
weights' names and shapes and the same entity embeddings of one seeded batch. Renaming or removing
an option must leave the models the configs build unchanged.

``python tests/test_shipped_encoders.py`` rewrites the record (only when a config is meant to
build another model)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from seqenc.data.schema import EventSchema
from seqenc.data.spec import DataSpec
from seqenc.data.vocab import Vocabularies, Vocabulary
from seqenc.model.encoder import EncoderConfig, SequenceEncoder
from seqenc.model.objectives import Causal, Masked
from seqenc.training.run_options import resolve_encoder
from tests.test_encoder import make_batch

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "tests" / "data" / "shipped_encoders.json"
LAYERED = {"finetune": "account_events", "entity_pretrain": "account_events"}
SCHEMA = EventSchema(categorical=("kind",), numeric=("amount",))
VOCABS = Vocabularies(Vocabulary(list(range(40))), {"kind": Vocabulary(["a", "b", "c"])})
HISTORIES = [[5, 9, 7, 30, 12], [4, 4, 8], [21, 22, 23, 24, 25, 26, 27, 28], [11]]


def model_options(name: str) -> dict[str, Any]:
    """The ``model`` section of ``configs/{name}.yaml``, layered on its data config."""
    options: dict[str, Any] = {"encoder": {}}
    for part in (LAYERED.get(name), name):
        if part is not None:
            model = yaml.safe_load((ROOT / "configs" / f"{part}.yaml").read_text())["model"]
            options |= {k: v for k, v in model.items() if k != "encoder"}
            options["encoder"] |= model.get("encoder") or {}
    return options


def build(name: str) -> SequenceEncoder:
    """The encoder ``configs/{name}.yaml`` builds on a timed log with a categorical and a numeric
    column, seeded."""
    options = model_options(name)
    objective = Masked() if options.get("objective") == "masked" else Causal()
    spec = DataSpec(SCHEMA, VOCABS, history_len=12, repeat_share=0.1)
    config = resolve_encoder(EncoderConfig(**options["encoder"]), spec, objective)
    torch.manual_seed(0)
    return SequenceEncoder(config).eval()


def describe(name: str) -> dict[str, Any]:
    """The weights' shapes and the entity embeddings (rounded) of ``name``'s encoder."""
    model = build(name)
    batch = make_batch(HISTORIES, n_cat=1, n_num=1)
    batch.categorical = batch.categorical.clamp(max=len(VOCABS.categorical["kind"]) - 1)
    with torch.no_grad():
        embedding = model.entity_embedding(batch)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    return {"shapes": shapes, "embedding": [round(x, 5) for x in embedding.flatten().tolist()]}


NAMES = sorted(p.stem for p in (ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("name", NAMES)
def test_a_shipped_config_builds_the_recorded_encoder(name: str) -> None:
    want, got = json.loads(RECORD.read_text())[name], describe(name)
    assert got["shapes"] == want["shapes"]
    torch.testing.assert_close(
        torch.tensor(got["embedding"]), torch.tensor(want["embedding"]), atol=2e-5, rtol=1e-4
    )


if __name__ == "__main__":
    RECORD.write_text(json.dumps({name: describe(name) for name in NAMES}, indent=0) + "\n")
    print(f"wrote {RECORD}", file=sys.stderr)

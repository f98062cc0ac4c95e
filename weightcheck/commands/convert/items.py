"""What a conversion makes, before it is made: :class:`Plan` (the output's tensors, shards and
config) and its :class:`Item` s (one output tensor each, and where its bytes come from). plan.py
fills a Plan, config.py writes its config, gate.py checks it, produce.py and publish.py write it.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from weightcheck.model.drafter import Drafter
from weightcheck.record import record
from weightcheck.storage.header import tensor_nbytes

__all__ = ["Item", "ItemKind", "Plan"]


# where an output tensor's bytes come from: copied as a byte range, cast, read from a pickle, or
# the target's embedding / lm_head
ItemKind = Literal[
    "copy", "cast", "pickle", "embed-from-target", "head-from-target", "reindex", "vocab-map"
]


@record
class Item:
    """One output tensor and where its bytes come from."""

    out_name: str
    canonical: str
    dtype: str
    shape: tuple
    kind: ItemKind
    src_name: str | None = None  # name in the source (drafter or target)
    src_dtype: str | None = None
    shard: int = 0
    # a part of a fused source tensor (Drafter.parts_of): its bytes start here within src_name's
    src_offset: int = 0
    data: object = None  # vocab-map: the bytes; reindex: where each row comes from (model/vocab.py)

    @property
    def nbytes(self) -> int:
        return tensor_nbytes(self.dtype, self.shape)


@record
class Plan:
    src: Drafter
    to: str
    out: str
    items: list = field(default_factory=list)
    shards: int = 1
    config: dict = field(default_factory=dict)
    config_changes: list = field(default_factory=list)  # human-readable lines
    notes: list = field(default_factory=list)
    target: object | None = None  # --target: the model the drafter serves (aux-id family)
    embed_target: object | None = None  # --embeddings from=TARGET
    head_target: object | None = None  # --lm-head-from TARGET
    metadata: dict = field(default_factory=dict)
    target_family: str | None = None  # the target model type the aux ids were written for
    verifier: str | None = None  # --verifier: speculators_config.verifier.name_or_path, as given
    reindex: dict | None = None  # --vocab-from: the map and the rows kept, moved, from the target

    def shard_name(self, i: int) -> str:
        return (
            "model.safetensors"
            if self.shards == 1
            else f"model-{i + 1:05d}-of-{self.shards:05d}.safetensors"
        )

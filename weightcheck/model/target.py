"""The target model a drafter serves beside — read from its config and a header or two.

``load_target(TARGET)`` reads config.json (the text model's fields nested under ``text_config`` for
multimodal targets such as Kimi-K2.5, ``KimiK25ForConditionalGeneration``), and only the headers of
the shards that hold the embedding and lm_head (a 1 TB target costs one index and one or two
headers). It yields hidden size, vocab, layer count (for aux layer ids), dtype, model type, and the
embedding/lm_head tensors.
"""

from __future__ import annotations

from weightcheck.errors import WeightcheckError
from weightcheck.model import config as config_mod
from weightcheck.record import record
from weightcheck.sources import Source, TensorRecord, open_source

# where targets keep their input embedding and output head (docs/formats.md §1: Kimi-K2.5 prefixes
# the text model with `language_model.`)
EMBED_NAMES = (
    "model.embed_tokens.weight",
    "language_model.model.embed_tokens.weight",
    "model.language_model.embed_tokens.weight",
    "embed_tokens.weight",
)
HEAD_NAMES = ("lm_head.weight", "language_model.lm_head.weight", "model.lm_head.weight")


@record
class Target:
    source: Source
    config: dict
    normalized: config_mod.NormalizedConfig
    model_type: str | None  # the target's own (kimi_k25 for Kimi-K2.5)
    architectures: list
    embed: TensorRecord | None
    lm_head: TensorRecord | None
    text_model_type: str | None = None  # text_config.model_type of a multimodal target (kimi_k2)

    @property
    def hidden_size(self):
        return self.normalized.get("hidden_size")

    @property
    def vocab_size(self):
        return self.normalized.get("vocab_size")

    @property
    def num_layers(self):
        return self.normalized.get("num_hidden_layers")

    @property
    def dtype(self):
        return self.normalized.get("dtype")

    def summary(self) -> dict:
        return {
            "spec": self.source.spec,
            "commit": self.source.commit,
            "model_type": self.model_type,
            "text_model_type": self.text_model_type,
            "architectures": self.architectures,
            "hidden_size": self.hidden_size,
            "vocab_size": self.vocab_size,
            "num_hidden_layers": self.num_layers,
            "dtype": self.dtype,
            # a folder or repo with config.json and no weights (read where only its config is)
            "config_only": self.source.layout == "config only",
            "embed": {
                "name": self.embed.name,
                "shape": list(self.embed.shape),
                "dtype": self.embed.dtype,
            }
            if self.embed
            else None,
            "lm_head": {
                "name": self.lm_head.name,
                "shape": list(self.lm_head.shape),
                "dtype": self.lm_head.dtype,
            }
            if self.lm_head
            else None,
        }


def load_target(spec: str, token: str | None = None, config_only: bool = True) -> Target:
    """``config_only``: a target folder or repo holding config.json and no weights is read for
    its config (embed/lm_head None): every use but the embedding's and head's shapes needs only
    the config (issue #23)."""
    src = open_source(
        spec, token=token, only=set(EMBED_NAMES) | set(HEAD_NAMES), config_only=config_only
    )
    if src.config is None:
        raise WeightcheckError(spec, "target has no config.json")
    cfg = src.config
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else {}
    norm = config_mod.normalize(cfg)
    embed = next((src.tensors[n] for n in EMBED_NAMES if n in src.tensors), None)
    head = next((src.tensors[n] for n in HEAD_NAMES if n in src.tensors), None)
    return Target(
        source=src,
        config=cfg,
        normalized=norm,
        model_type=cfg.get("model_type") or text.get("model_type"),
        architectures=list(cfg.get("architectures") or []),
        embed=embed,
        lm_head=head,
        text_model_type=text.get("model_type"),
    )

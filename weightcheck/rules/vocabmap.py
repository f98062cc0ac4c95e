"""WC311: SRC's vocabulary map against the training run's (--training-vocab)."""

from __future__ import annotations

from weightcheck.model import vocab
from weightcheck.record import record
from weightcheck.rules.base import rule


@record(frozen=True)
class VocabGate:
    """What --training-vocab found: SRC's map and the training run's, and how they differ."""

    src: vocab.VocabMap
    training: vocab.VocabMap
    overlap: dict  # vocab.overlap(src, training)
    misread: int  # SRC's head rows the training map reads as other tokens
    missing: int  # tokens of the training map SRC's head lacks

    def report(self) -> dict:
        return {
            "map": self.training.where,
            **self.overlap,
            "misread_rows": self.misread,
            "missing_tokens": self.missing,
        }


def gate(src: vocab.VocabMap, training: vocab.VocabMap) -> VocabGate:
    ov = vocab.overlap(src, training)
    return VocabGate(
        src, training, ov, vocab.misread_rows(src, training), training.size - ov["shared"]
    )


@rule("WC311", needs="training_vocab")
def training_vocab_differs(ctx, finding):
    g = ctx.training_vocab
    if g is None or (g.misread == 0 and g.src.size == g.training.size):
        return
    o = g.overlap
    to = ctx.engine or "sglang"
    options = [f"--vocab-from {g.training.where}"]
    if g.missing:
        options.append("--lm-head-from TARGET")
    fix = ctx.fix_command(to, *options)
    why = (
        f" ({g.missing:,} of the map's tokens are not in SRC's head: their rows come from the "
        "target's lm_head)"
        if g.missing
        else ""
    )
    yield finding(
        f"the training map differs from SRC's: {g.misread:,} head rows would be read as other "
        "tokens; re-index SRC",
        "d2t",
        fix=fix,
        detail=f"the training map ({g.training.where}: {o['b_draft']:,} draft tokens) and SRC's "
        f"({o['a_draft']:,}) share {o['shared']:,} tokens, {o['same_index']:,} at the same "
        f"index" + (f"; re-index SRC first: `{fix}`{why}" if fix else ""),
    )

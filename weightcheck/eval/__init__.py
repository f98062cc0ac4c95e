"""``weightcheck eval``: how well a drafter predicts a target, from saved hidden states, on a CPU.

data.py reads the trainers' offline hidden-state files (docs/eval.md §1), one sample at a time;
forward.py runs the drafter's own forward with test-time unrolling (its attention: llama.py or
mla.py; its rotation: rope.py); target.py gives the target's top-1 from its lm_head (and final
norm) read by ranges; metric.py turns per-position hits into per-step accuracies, the expected
acceptance length, the acceptance length walked cycle by cycle as an engine drafts, and their
confidence intervals; run.py ties them. torch is imported only inside this package (and only
when ``eval`` runs).
"""

"""``weightcheck eval``: how well a drafter predicts a target, from saved hidden states, on a
CPU or a GPU.

data.py reads the trainers' offline hidden-state files (docs/eval.md §1; a SpecForge file's
tensors located through sources/torchzip.py, not loaded), stream.py reads them ahead into bounded
buffers (readahead.py: torch's libraries, then the data, into the page cache from the moment
they are listed);
upload.py puts the weights on a GPU; device.py says where it runs and how much fits (interrupt.py
holds Ctrl-C over torch's import); forward.py runs the drafter's own forward with
test-time unrolling over packed batches (packed.py: the layout and the attention; its attention:
llama.py or mla.py; its rotation: rope.py); target.py gives the target's top-1 from its lm_head
(and final norm); metric.py turns hits into per-step accuracies, the expected acceptance length,
the acceptance length walked cycle by cycle as an engine drafts, and their intervals; loop.py is
the pass over the data, run.py ties it together. torch is imported only inside this package (and
only when ``eval`` runs).
"""

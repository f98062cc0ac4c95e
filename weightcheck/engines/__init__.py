"""What SGLang and vLLM do with a drafter: their loaders replayed from data (mappings/engines/,
each rule citing the engine's source), and the aux-layer-id conventions (aux.py)."""

"""Bytes on disk: the safetensors format read strictly (header.py), written (writer.py), and every
written byte checked against its source (verify.py). Knows nothing of drafters."""

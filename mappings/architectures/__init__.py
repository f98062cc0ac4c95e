"""Data, not code: the TOML files beside this file are read with importlib.resources."""

"""Sources: one string argument (a Hub repo id, a folder, a file) -> a checkpoint's config and
tensor index, without its weights; and the tensors' bytes, by range, when a command needs them."""

from __future__ import annotations

import os
import re

from weightcheck.errors import WeightcheckError
from weightcheck.sources.base import Source, TensorRecord, WeightFile
from weightcheck.sources.local import open_local
from weightcheck.sources.pickled import PICKLE_EXT

__all__ = ["Source", "TensorRecord", "WeightFile", "open_source", "is_local", "HUB_ID"]

HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[\w.\-/]+))?$")


def is_local(spec: str) -> bool:
    """Whether SRC names an existing local path (else it is read as a Hub repo id)."""
    return bool(spec) and os.path.exists(os.path.expanduser(spec))


def open_source(
    spec: str,
    revision: str | None = None,
    token: str | None = None,
    only: set[str] | None = None,
    config_only: bool = False,
) -> Source:
    """Resolve SRC: an existing local path first, else a Hub repo id. ``config_only``: a folder or
    repo with config.json and no weight file is a source without tensors (a target read for its
    config), not an error."""
    if not spec:
        raise WeightcheckError(None, "empty source")
    expanded = os.path.expanduser(spec)
    if os.path.exists(expanded):
        if revision:
            raise WeightcheckError(spec, "a revision was given for a local path")

        return open_local(spec, expanded, only, config_only)
    m = HUB_ID.match(spec)
    # a missing `dir/model.safetensors` is a mistyped path, not a Hub repo id
    looks_like_file = spec.endswith((".safetensors", ".json") + PICKLE_EXT)
    if m and not spec.startswith((".", "/", "~")) and not looks_like_file:
        rev = m.group("rev")
        if rev and revision and rev != revision:
            raise WeightcheckError(spec, f"two revisions given: @{rev} and {revision}")
        from weightcheck.sources.hub import (
            open_hub,  # huggingface_hub is imported only for a Hub id
        )

        return open_hub(spec, m.group("repo"), rev or revision, token, only, config_only)
    raise WeightcheckError(
        spec, "path not found (and not a Hub repo id of the form org/name[@revision])"
    )

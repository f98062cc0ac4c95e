"""Loading the data files in mappings/. The repository's top-level mappings/ is linked into the
package as ``weightcheck/_mappings`` (a symlink), so the wheel ships it as package data and a
source tree or an editable install reads it in place.

A user's own file (``--mapping FILE``) is read with :func:`load_toml_file` and validated the same
way as the bundled ones.
"""

from __future__ import annotations

import functools
import tomllib
from importlib import resources

from weightcheck.errors import WeightcheckError


def load_toml_file(path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as e:
        raise WeightcheckError(str(path), f"cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise WeightcheckError(str(path), f"not valid TOML: {e}") from None


@functools.lru_cache(maxsize=None)
def root():
    """The mappings folder."""
    return resources.files("weightcheck") / "_mappings"


@functools.lru_cache(maxsize=None)
def load(relpath: str) -> dict:
    """Load ``mappings/<relpath>`` (e.g. ``"config.toml"``, ``"dialects/speculators.toml"``)."""
    node = root().joinpath(*relpath.split("/"))
    with node.open("rb") as f:
        return tomllib.load(f)


@functools.lru_cache(maxsize=None)
def list_dir(sub: str) -> tuple[str, ...]:
    """Names of the .toml files in ``mappings/<sub>/``, sorted."""
    d = root().joinpath(sub)
    return tuple(sorted(p.name for p in d.iterdir() if p.name.endswith(".toml")))

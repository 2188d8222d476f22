"""Ember: an embedded key-value and embedding-cache store (docs/python.md).

``ember.Store`` is the key-value store; ``ember.EmbeddingCache`` the embedding cache;
every error is an ``ember.Error`` (``ember.errors``).
"""

from . import _ember
from .errors import *  # noqa: F401,F403
from .errors import Error, from_code  # noqa: F401
from .store import Store  # noqa: F401

__version__ = _ember.version()


def _optional(name: str) -> None:
    """Import the layer module `name` and its public names when it is built."""
    import importlib

    try:
        mod = importlib.import_module("." + name, __name__)
    except ModuleNotFoundError as e:
        if e.name != __name__ + "." + name:
            raise
        return
    for attr in getattr(mod, "__all__", ()):
        globals()[attr] = getattr(mod, attr)


_optional("cache")
del _optional

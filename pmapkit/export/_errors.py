"""The one error a bad artifact raises."""
from __future__ import annotations


class DeserializationError(ValueError):
    """A blob is not a valid pmapkit export artifact (what is wrong is in the
    message); raised before any part of it is used."""


def fail(message):
    raise DeserializationError(f"pmapkit.export.deserialize: {message}")

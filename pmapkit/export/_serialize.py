"""``serialize``/``deserialize``: Exported <-> pmapkit's checked container.

Built on ``_exported`` (the data) and ``_container`` (the bytes); gives
``Exported`` its ``serialize`` method (jax.export's spelling).
"""
from __future__ import annotations

import operator

from pmapkit.export import _container
from pmapkit.export._exported import Exported


def serialize(exported, vjp_order=0) -> bytes:
    """The artifact bytes of ``exported``: jax.export's serialization inside
    pmapkit's container (magic, container version, producer versions, payload
    length and CRC-32).

    Args:
      exported: a ``pmapkit.export.Exported``.
      vjp_order: how many orders of VJP to include (``1`` lets the loaded
        function be differentiated once, ``2`` twice, ...).
    """
    if not isinstance(exported, Exported):
        raise TypeError("serialize: 'exported' must be a pmapkit.export.Exported, "
                        f"got {type(exported).__name__}.")
    try:
        vjp_order = operator.index(vjp_order)
    except TypeError:
        raise TypeError("serialize: 'vjp_order' must be an int >= 0, got "
                        f"{vjp_order!r}.") from None
    if vjp_order < 0:
        raise ValueError(f"serialize: 'vjp_order' must be >= 0, got {vjp_order}.")
    jax_exp = exported._jax
    if vjp_order > 0 and not jax_exp.has_vjp():
        raise ValueError(
            f"serialize: vjp_order={vjp_order} asks for the VJP of "
            f"'{exported.fun_name}', which has none (it was loaded from an "
            "artifact without one).")
    payload = jax_exp.serialize(vjp_order=vjp_order)
    summary = {"fun_name": jax_exp.fun_name, "platforms": list(jax_exp.platforms),
               "nr_devices": jax_exp.nr_devices, "vjp_order": vjp_order,
               "strict_checks": exported.strict_checks}
    return _container.pack(
        payload, calling_convention_version=jax_exp.calling_convention_version,
        summary=summary)


def deserialize(data) -> Exported:
    """Load an artifact written by ``serialize``, checking it first.

    Raises ``pmapkit.export.DeserializationError`` (a ValueError) for an
    empty, foreign, truncated, corrupted or unsupported blob, saying which.
    """
    unpacked = _container.unpack(data)
    exported = Exported(_container.parse_payload(unpacked))
    exported._unparsed = True  # the first call parses it (and says if it can't)
    return exported


def artifact_info(data) -> dict:
    """The checked header of an artifact: producer versions, payload length
    and checksum, and a summary of the exported function (nothing is loaded)."""
    unpacked = _container.unpack(data)
    info = dict(unpacked.header)
    info["container_version"] = unpacked.container_version
    return info


def _serialize_method(self, vjp_order=0) -> bytes:
    """pmapkit's checked container bytes (``pmapkit.export.serialize``)."""
    return serialize(self, vjp_order=vjp_order)


_serialize_method.__name__, _serialize_method.__qualname__ = "serialize", "Exported.serialize"
Exported.serialize = _serialize_method

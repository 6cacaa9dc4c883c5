"""``pmapkit.export``: the classic exported-function API over ``jax.export``,
with self-checking artifacts.

Classic names: ``export(fun, *, lowering_platform=None, strict_checks=True)``,
``Exported``, ``poly_spec``/``poly_specs``, ``call_exported``,
``default_lowering_platform``. Modern spellings beside them: ``platforms=``,
``Exported.call``, ``symbolic_shape``, ``serialize``/``deserialize``
(``Exported.serialize``). Interop: ``to_jax``/``from_jax``.

``serialize`` writes jax.export's payload inside pmapkit's container (magic,
container version, producer versions, payload length and SHA-256);
``deserialize`` checks all of it first and raises ``DeserializationError``
saying what is wrong with an empty, foreign, truncated or corrupted blob.

Multi-process runs: an artifact serialized in one process deserializes and
runs in every process of a run with the devices it was lowered for. A
``pmapkit.pmap`` exported there spans every process's devices (specs give
this process's slice, as a call would); a multi-device artifact takes global
values (a global ``jax.Array``, or the whole host value, the same on every
process) and returns global arrays.
"""
from pmapkit.export._call import call_exported
from pmapkit.export._container import CONTAINER_VERSION, SUPPORTED_CONTAINER_VERSIONS
from pmapkit.export._errors import DeserializationError
from pmapkit.export._export import default_lowering_platform, export
from pmapkit.export._exported import Exported, from_jax, to_jax
from pmapkit.export._poly import poly_spec, poly_specs, symbolic_shape
from pmapkit.export._serialize import artifact_info, deserialize, serialize

__all__ = ["CONTAINER_VERSION", "DeserializationError", "Exported",
           "SUPPORTED_CONTAINER_VERSIONS", "artifact_info", "call_exported",
           "default_lowering_platform", "deserialize", "export", "from_jax",
           "poly_spec", "poly_specs", "serialize", "symbolic_shape", "to_jax"]

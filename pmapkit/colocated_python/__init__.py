"""Colocated Python: run Python functions and objects on the host of the
devices that hold their jax.Array arguments (the API of
``jax.experimental.colocated_python``).

- ``colocated_python(fun)``: a callable with
  ``specialize(in_specs=, out_specs_fn=, devices=)``
- ``colocated_python_class(cls)``: a class whose objects live next to the devices
- ``colocated_cpu_devices(devs)``: the CPU devices on the same hosts as ``devs``

Where the backend compiles colocated Python programs (jaxlib's IFRT program
API) the function runs there; on PjRt backends (CPU, GPU) it runs in-process,
on the calling thread, with the same specs, errors and caching.

Multi-process runs (``jax.distributed``, ``pmapkit launch``): on PjRt
backends each process runs a colocated function itself, for its addressable
devices — it only sees this process's devices and arrays (an array spanning
processes arrives as the global ``jax.Array``, whose addressable shards are
this process's; every process must then make the same call, as with jit).
Objects of a colocated class live in the process that made them. Specializing
for devices that all belong to other processes raises ``ValueError``: run the
call from the process owning them.
"""
from pmapkit.colocated_python.devices import colocated_cpu_devices
from pmapkit.colocated_python.function import colocated_python
from pmapkit.colocated_python.objects import colocated_python_class

__all__ = ["colocated_cpu_devices", "colocated_python", "colocated_python_class"]

"""Colocated Python: run Python functions and objects on the host of the
devices that hold their jax.Array arguments (the API of
``jax.experimental.colocated_python``).

  colocated_python(fun)        a callable with ``specialize(in_specs=,
                               out_specs_fn=, devices=)``
  colocated_python_class(cls)  a class whose objects live next to the devices
  colocated_cpu_devices(devs)  the CPU devices on the same hosts as ``devs``

Where the backend compiles colocated Python programs (jaxlib's IFRT program
API) the function runs there; on PjRt backends (CPU, GPU) it runs in-process,
on the calling thread, with the same specs, errors and caching.
"""
from pmapkit.colocated_python.devices import colocated_cpu_devices
from pmapkit.colocated_python.function import colocated_python
from pmapkit.colocated_python.objects import colocated_python_class

__all__ = ["colocated_cpu_devices", "colocated_python", "colocated_python_class"]

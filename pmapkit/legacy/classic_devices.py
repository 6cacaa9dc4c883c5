"""``jaxlib.xla_extension`` / ``jax.lib.xla_extension`` as classic programs
used them: the module jaxlib 0.10 renamed (``jaxlib._jax``: the same objects,
found by name), with the device classes it no longer has.

Classic jaxlib had one device class per platform (``CpuDevice``,
``GpuDevice``, ``TpuDevice``, subclasses of ``Device``) and programs tested
devices with ``isinstance``; jaxlib 0.10 has one ``Device`` class for every
platform. Each classic class here answers ``isinstance`` by the device's
``platform``, as the classic class did by its type: a CPU device is a
``CpuDevice`` and not a ``GpuDevice``.
"""
from __future__ import annotations

import types

import jax

from pmapkit import _jax_private as jp

__all__ = ["CpuDevice", "GpuDevice", "TpuDevice", "xla_extension_module"]


class _PlatformDevice(type):
    """The metaclass of a classic per-platform device class."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, jax.Device) and obj.platform in cls.platforms

    def __subclasscheck__(cls, sub):
        return isinstance(sub, _PlatformDevice) and set(sub.platforms) <= set(cls.platforms)

    def __call__(cls, *args, **kwargs):
        raise TypeError(f"{cls.__name__} cannot be instantiated: devices come from "
                        "jax.devices()")


class CpuDevice(metaclass=_PlatformDevice):
    """A CPU device (``device.platform == "cpu"``), as classic jaxlib's class."""
    platforms = ("cpu",)


class GpuDevice(metaclass=_PlatformDevice):
    """A GPU device (``device.platform`` "gpu", "cuda" or "rocm")."""
    platforms = ("gpu", "cuda", "rocm")


class TpuDevice(metaclass=_PlatformDevice):
    """A TPU device (``device.platform == "tpu"``)."""
    platforms = ("tpu",)


for _cls in (CpuDevice, GpuDevice, TpuDevice):
    _cls.__module__ = "jaxlib.xla_extension"

# Classic names whose object jaxlib 0.10 holds under another name.
_RENAMED = {"DeviceArray": lambda: jax.Array, "Buffer": lambda: jax.Array,
            "Device": lambda: jax.Device,
            "XlaRuntimeError": lambda: jax.errors.JaxRuntimeError}


def _jax_jit_module(name):
    """``jax_jit`` as classic jaxlib had it (0.1.66 to 0.4.6): jaxlib 0.10's
    module, with ``CompiledFunction``, the class of what ``jax.jit`` returned
    (its C++ jit), which ``jax.jit``'s results are now ``PjitFunction``s of:
    ``isinstance(jax.jit(f), jax_jit.CompiledFunction)`` holds as it did."""
    module = types.ModuleType(f"{name}.jax_jit", f"{name}.jax_jit as classic jaxlib had it.")
    module.CompiledFunction = jp.xla_extension.PjitFunction

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(jp.xla_extension.jax_jit, attr)

    module.__getattr__ = __getattr__
    return module


def xla_extension_module(name="jaxlib.xla_extension"):
    """The classic module ``name``: the device classes above, the renamed
    names (``DeviceArray`` is ``jax.Array``), and every other name
    ``jaxlib._jax`` has (the same object)."""
    module = types.ModuleType(name, f"{name} as classic jaxlib had it: jaxlib._jax's "
                              "objects, with the per-platform device classes.")
    module.CpuDevice, module.GpuDevice, module.TpuDevice = CpuDevice, GpuDevice, TpuDevice
    for attr, make in _RENAMED.items():
        setattr(module, attr, make())
    module.jax_jit = _jax_jit_module(name)

    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        try:
            return getattr(jp.xla_extension, attr)
        except AttributeError:
            raise AttributeError(
                f"{name}.{attr}: jaxlib {jax.__version__} has no {attr} "
                "(xla_extension became jaxlib._jax, without it)") from None

    module.__getattr__ = __getattr__
    return module

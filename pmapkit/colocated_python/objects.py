"""``colocated_python_class(cls)``: objects that live on the devices' host.

Constructing the wrapper builds nothing; the first method call creates the
real object (``cls(*init_args, **init_kwargs)``) in the host's object store,
keyed by the wrapper's id, and every method call after that (any method, any
device set of that host) finds the same object, so its state carries over.
When the last reference to the wrapper goes, the host drops the object.

Methods are colocated functions (``specialize`` works on them); what travels
to the host is a small caller naming the object id, the class, the
constructor arguments and the method.
"""
from __future__ import annotations

import inspect
import random
import threading
import weakref

from pmapkit.colocated_python import execution
from pmapkit.colocated_python.function import ColocatedFunction

_SKIPPED = frozenset({"__init__", "__del__", "__reduce__", "__reduce_ex__"})


class _Failed:
    def __init__(self, exc):
        self.exc = exc


class _ObjectStore:
    """This host's colocated objects: id -> object (created once, on demand)."""

    def __init__(self):
        self._objects: dict[int, object] = {}
        self._cond = threading.Condition()
        self._creating: dict[int, int] = {}  # id -> creating thread

    def get_or_create(self, uid, create):
        obj = self._objects.get(uid)
        if obj is None:
            obj = self._create(uid, create)
        if type(obj) is _Failed:
            raise obj.exc
        return obj

    def _create(self, uid, create):
        me = threading.get_ident()
        with self._cond:
            while uid in self._creating:
                if self._creating[uid] == me:
                    raise RuntimeError(
                        "a colocated_python object's method was called from "
                        "its own constructor")
                self._cond.wait()
            obj = self._objects.get(uid)
            if obj is not None:
                return obj
            self._creating[uid] = me
        try:
            obj = create()
        except Exception as exc:  # later calls see the same failure
            obj = _Failed(exc)
        with self._cond:
            del self._creating[uid]
            self._objects[uid] = obj
            self._cond.notify_all()
        return obj

    def release(self, uid):
        with self._cond:
            obj = self._objects.pop(uid, None)
        del obj  # the object's own __del__ runs here, outside the lock

    def __contains__(self, uid):
        return uid in self._objects


OBJECTS = _ObjectStore()


def _release_on_host(uid):
    OBJECTS.release(uid)
    return ()


class _MethodCaller:
    """Host side of one method: find (or make) the object, call the method."""

    def __init__(self, uid, cls, init_args, init_kwargs, method):
        self.uid, self.cls, self.method = uid, cls, method
        self.init_args, self.init_kwargs = init_args, init_kwargs
        self.__name__ = method

    def _create(self):
        return self.cls(*self.init_args, **self.init_kwargs)

    def __call__(self, *args, **kwargs):
        obj = OBJECTS.get_or_create(self.uid, self._create)
        return getattr(obj, self.method)(*args, **kwargs)


class _Lifetime:
    """Tracks where an object may live; releases it there when the wrapper goes."""

    def __init__(self, uid):
        self.uid = uid
        self.device_lists = set()
        self._lock = threading.Lock()

    def used_on(self, devices):
        with self._lock:
            self.device_lists.add(devices)

    def release(self):
        OBJECTS.release(self.uid)  # this host
        with self._lock:
            remote = [d for d in self.device_lists
                      if execution._CLIENT_RUNS_PROGRAMS.get(d[0].client)]
        for devices in remote:  # hosts reached through IFRT programs
            try:
                ColocatedFunction(_RemoteRelease(self.uid)).specialize(
                    devices=devices, out_specs_fn=lambda: ())()
            except Exception:  # best effort: the wrapper is gone already
                pass


class _RemoteRelease:
    def __init__(self, uid):
        self.uid = uid
        self.__name__ = "release_colocated_object"

    def __call__(self):
        return _release_on_host(self.uid)


def _methods(cls):
    for name in dir(cls):
        if name in _SKIPPED:
            continue
        member = getattr(cls, name)
        if inspect.isfunction(member):
            yield name, member


def colocated_python_class(cls):
    """Wrap ``cls`` so that its objects live on the host of the devices their
    methods' jax.Array arguments are on (see the module docstring)."""
    if not isinstance(cls, type):
        raise TypeError("colocated_python_class expects a class, got "
                        f"{type(cls).__name__}: {cls!r}")
    methods = list(_methods(cls))

    def __init__(self, *init_args, **init_kwargs):
        uid = random.getrandbits(63)
        lifetime = _Lifetime(uid)
        self._colocated_python_uid = uid
        for name, member in methods:
            method = ColocatedFunction(
                _MethodCaller(uid, cls, init_args, init_kwargs, name),
                on_devices=lifetime.used_on)
            method.__wrapped__ = member
            method.__name__, method.__doc__ = member.__name__, member.__doc__
            method.__qualname__ = member.__qualname__
            object.__setattr__(self, name, method)
        weakref.finalize(self, lifetime.release)

    try:
        __init__.__signature__ = inspect.signature(cls)
    except (TypeError, ValueError):
        pass
    __init__.__doc__ = cls.__init__.__doc__
    wrapper = type(cls.__name__, (), {
        "__init__": __init__, "__doc__": cls.__doc__,
        "__module__": cls.__module__, "__qualname__": cls.__qualname__,
        "__repr__": lambda self: f"<colocated_python {cls.__qualname__} object>",
    })
    wrapper.__wrapped__ = cls
    return wrapper

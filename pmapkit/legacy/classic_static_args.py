"""``jax.jit`` static arguments that cannot be hashed, keyed by identity as
the releases of 2019–2020 keyed them.

Up to JAX 0.2.5 (October 2020) a static argument ``hash()`` refused (a list,
a numpy array) was part of the cache key by its identity: the same object
again reused the compiled function, an equal new one traced again (0.2.5
logged a warning; 0.2.6 made it a ValueError, "Non-hashable static arguments
are not supported"). Programs of that time pass lists as static arguments
(``x_limits = [-2, 2]`` in JAX's own ADVI example).

Under ``pmapkit run`` (``install()``), ``jax.jit(..., static_argnums=...)``
keeps that contract: JAX's own jitted function runs every call it accepts,
and a call it refuses for an unhashable positional static argument runs a
second jit of the same function in which that argument is keyed by identity
(the function receives the object itself). ``static_argnames`` came after
that time and keeps JAX 0.10's rule; a jit without ``static_argnums`` is
JAX's own object, untouched. The frame over JAX's call costs about 5,000
instructions a call (callgrind: 42,345 against 37,317 for a cached call of a
jit with one static argument).
"""
from __future__ import annotations

import functools
import operator
import types

import jax

_MARK = "_pmapkit_classic_static_args"
_NOT_GIVEN = object()


class _ByIdentity:
    """An unhashable static argument as a cache key: its identity."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __hash__(self):
        return id(self.value)

    def __eq__(self, other):
        return type(other) is _ByIdentity and other.value is self.value

    def __repr__(self):
        return f"{type(self.value).__name__} object at {id(self.value):#x} (by identity)"


def _hashable(value) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _is_index(value) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _unboxing(fun):
    """``fun`` called with each boxed argument's object."""
    @functools.wraps(fun)
    def unboxed(*args, **kwargs):
        return fun(*[a.value if type(a) is _ByIdentity else a for a in args], **kwargs)
    return unboxed


class ClassicStaticJit:
    """What ``jax.jit(fun, static_argnums=...)`` returns under ``pmapkit
    run``: JAX's jitted ``fun``, and for calls with an unhashable static
    argument a jit of ``fun`` keying it by identity (made on first need)."""

    def __init__(self, modern_jit, fun, static_argnums, options):
        self._jitted = modern_jit(fun, static_argnums=static_argnums, **options)
        self._boxing_jit = None
        self._make_boxing_jit = functools.partial(
            modern_jit, _unboxing(fun), static_argnums=static_argnums, **options)
        # JAX has checked them: indices (an int or a sequence of them)
        self._static = tuple(operator.index(i) for i in (
            (static_argnums,) if _is_index(static_argnums) else static_argnums))
        functools.update_wrapper(self, fun)

    def _boxed(self, args):
        """``args`` with each unhashable static argument boxed, or None when
        there is none (JAX's refusal was for something else)."""
        n = len(args)
        boxed = list(args)
        found = False
        for i in self._static:
            if -n <= i < n and not _hashable(args[i]):
                boxed[i] = _ByIdentity(args[i])
                found = True
        return boxed if found else None

    def _boxing(self):
        if self._boxing_jit is None:
            self._boxing_jit = self._make_boxing_jit()
        return self._boxing_jit

    def _either(self, method, args, kwargs):
        try:
            return getattr(self._jitted, method)(*args, **kwargs)
        except ValueError:
            boxed = self._boxed(args)
            if boxed is None:
                raise
        return getattr(self._boxing(), method)(*boxed, **kwargs)

    def __call__(self, *args, **kwargs):
        # the call path: one frame over JAX's own jitted function
        try:
            return self._jitted(*args, **kwargs)
        except ValueError:
            boxed = self._boxed(args)
            if boxed is None:
                raise
        return self._boxing()(*boxed, **kwargs)

    def lower(self, *args, **kwargs):
        return self._either("lower", args, kwargs)

    def trace(self, *args, **kwargs):
        return self._either("trace", args, kwargs)

    def eval_shape(self, *args, **kwargs):
        return self._either("eval_shape", args, kwargs)

    def clear_cache(self):
        self._jitted.clear_cache()
        if self._boxing_jit is not None:
            self._boxing_jit.clear_cache()

    def __get__(self, instance, owner=None):
        # a jitted method binds as JAX's jitted functions do
        return self if instance is None else types.MethodType(self, instance)

    def __getattr__(self, name):
        # _cache_size, _fun, ...: JAX's jitted function's
        jitted = self.__dict__.get("_jitted")
        if jitted is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(jitted, name)


def classic_unhashable_statics() -> bool:
    """Install the classic ``jax.jit`` on ``jax`` (once per process); True
    when this call did."""
    modern = jax.jit
    if getattr(modern, _MARK, False):
        return False

    @functools.wraps(modern)
    def jit(fun=_NOT_GIVEN, /, *, static_argnums=None, **options):
        if fun is _NOT_GIVEN:
            # the decorator factory: jax.jit(static_argnums=0)(f)
            return functools.partial(jit, static_argnums=static_argnums, **options)
        if static_argnums is None or static_argnums == ():
            return modern(fun, static_argnums=static_argnums, **options)
        return ClassicStaticJit(modern, fun, static_argnums, options)

    setattr(jit, _MARK, True)
    jax.jit = jit
    return True

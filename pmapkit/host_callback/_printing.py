"""The tap function of ``id_print``: keyword arguments, then the value."""
from __future__ import annotations

import threading

import numpy as np

_WIDTH = 80
# Taps from several devices run on several threads: one printout at a time.
_print_lock = threading.Lock()


def _layout(opening, parts, closing):
    one_line = f"{opening} {' '.join(parts)} {closing}"
    if len(one_line) <= _WIDTH and not any("\n" in p for p in parts):
        return one_line
    # Too long: one element per line, continuation lines indented by two.
    body = "\n".join(p.replace("\n", "\n  ") for p in parts)
    return f"{opening} {body.replace(chr(10), chr(10) + '  ')} {closing}"


def format_value(value, threshold):
    """Tuples ``( a b )``, lists ``[ a b ]``, dicts ``{ k=v }`` (sorted keys),
    arrays through ``numpy.array2string``, anything else through ``str``."""
    if isinstance(value, tuple):
        return _layout("(", [format_value(v, threshold) for v in value], ")")
    if isinstance(value, list):
        return _layout("[", [format_value(v, threshold) for v in value], "]")
    if isinstance(value, dict):
        return _layout("{", [f"{k}={format_value(value[k], threshold)}"
                             for k in sorted(value)], "}")
    if isinstance(value, np.ndarray):
        return np.array2string(value, threshold=threshold)
    return str(value)


class Printer:
    """``id_print``'s tap function. Equal printers (same stream, threshold
    and keyword arguments) compare equal, so re-tracing an ``id_print``
    reuses compiled programs."""

    def __init__(self, output_stream, threshold, kwargs):
        self.output_stream = output_stream
        self.threshold = threshold
        self.kwargs = kwargs

    def _key(self):
        return (id(self.output_stream), self.threshold,
                tuple(sorted((k, repr(v)) for k, v in self.kwargs.items())))

    def __eq__(self, other):
        return (type(other) is Printer and self.output_stream is other.output_stream
                and self._key() == other._key())

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return "id_print"

    def __call__(self, arg, transforms, *, device=None):
        shown = dict(self.kwargs)
        if transforms:
            shown["transforms"] = [(name, params) if params else name
                                   for name, params in transforms]
        if device is not None:
            shown["device"] = device
        lines = []
        if shown:
            lines.append(" ".join(f"{k}: {shown[k]}" for k in sorted(shown)))
        lines.append(format_value(arg, self.threshold))
        with _print_lock:
            for line in lines:
                if self.output_stream is not None:
                    self.output_stream.write(line + "\n")
                else:
                    print(line)

"""``%load_ext pmapkit`` in IPython or Jupyter: the classic layer on for the
kernel (and the Python processes it starts), as ``pmapkit run`` turns it on
for a program; ``%pmapkit [--route-pmap] [--modern-prng] [--report[=FORM]]``
turns it on with ``pmapkit run``'s options. Where jax is imported already it
is installed at once, else when the kernel imports jax.
"""
import shlex

__all__ = ["load_ipython_extension", "pmapkit_magic", "parse_options"]

USAGE = "%pmapkit [--route-pmap] [--modern-prng] [--report[=wide|json|PATH.json]]"


def parse_options(line):
    """``pmapkit run``'s options from a magic's line, as keyword arguments
    of ``activation.activate``; a ValueError names what it cannot take."""
    opts = {"route_pmap": False, "report": None, "classic_prng": True}
    for word in shlex.split(line or ""):
        if word == "--route-pmap":
            opts["route_pmap"] = True
        elif word == "--modern-prng":
            opts["classic_prng"] = False
        elif word == "--report":
            opts["report"] = True
        elif word.startswith("--report="):
            form = word.partition("=")[2]
            if form not in ("wide", "json") and not form.endswith(".json"):
                raise ValueError(f"--report= takes wide, json or a path ending in .json; "
                                 f"got {form!r} (usage: {USAGE})")
            opts["report"] = form
        else:
            raise ValueError(f"unknown option {word!r} (usage: {USAGE})")
    return opts


def pmapkit_magic(line=""):
    """The ``%pmapkit`` line magic."""
    from pmapkit.legacy import activation
    try:
        opts = parse_options(line)
    except ValueError as exc:
        print(f"%pmapkit: {exc}")
        return
    activation.activate(**opts)


def load_ipython_extension(ipython):
    """IPython's entry (``%load_ext pmapkit``): registers ``%pmapkit`` and
    turns the layer on with the default options."""
    ipython.register_magic_function(pmapkit_magic, magic_kind="line", magic_name="pmapkit")
    pmapkit_magic("")

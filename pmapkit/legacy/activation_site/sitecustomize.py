"""pmapkit's process-start hook: ``pmapkit run`` puts this folder first on
PYTHONPATH, so every Python process of the run imports this module at
start-up (``site``), and the classic layer is armed there with the options
the run put in ``PMAPKIT_RUN`` (pmapkit/legacy/activation.py). Then the
``sitecustomize`` this one shadows, if any, runs as it would have."""


def _arm():
    import importlib.util
    import os
    if os.environ.get("PMAPKIT_RUN") and importlib.util.find_spec("pmapkit") is not None:
        # An interpreter without pmapkit (another Python) runs without the layer.
        from pmapkit.legacy import activation
        activation.start_from_environment()


def _run_the_shadowed_one():
    import importlib.machinery
    import importlib.util
    import os
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules[__name__] = module
    spec.loader.exec_module(module)


_arm()
_run_the_shadowed_one()

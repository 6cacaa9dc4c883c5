"""pmapkit's commands: ``cli`` (the ``pmapkit`` entry point), ``run`` (a
classic script as ``__main__`` with the classic surface installed),
``migrate`` (classic source to plain modern JAX), ``bench`` (side-by-side
benchmarks) and ``demo``. Nothing in the package imports them."""

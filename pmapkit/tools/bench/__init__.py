"""pmapkit's benchmarks: ``pmapkit bench`` and the ``bench/`` pytest-benchmark
suite run them, side by side with the JAX equivalent, in one process.

``engine``             cases, runners, measurement (caller-thread CPU and wall
                       time per call), the memory check
``cases_dispatch``     JAX's api_benchmark dispatch cases
``cases_inputs``       what real programs feed (input origins, pjit call forms,
                       AOT calls, ``out_axes=None``, a training loop)
``features``           feature cases (one ``features_<system>`` module each)
``cli``                ``pmapkit bench``

Nothing outside this package imports it (``import pmapkit`` loads none of it).
"""

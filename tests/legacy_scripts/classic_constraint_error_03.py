"""A JAX 0.2/0.3 program that calls with_sharding_constraint eagerly, with no
mesh declared, and catches the classic ValueError."""
import numpy as np
from jax.experimental.pjit import with_sharding_constraint
from jax.experimental import PartitionSpec

x = np.ones((8, 4), np.float32)
try:
    with_sharding_constraint(x, PartitionSpec("data_parallel", None))
except ValueError as e:
    print("caught ValueError:", "resource axis data_parallel is undefined" in str(e),
          "Did you forget to declare the mesh?" in str(e))
try:
    with_sharding_constraint(x, PartitionSpec("data_parallel", None))
except NotImplementedError as e:
    print("also the 0.4 NotImplementedError:",
          "should only be called inside pjit()" in str(e))

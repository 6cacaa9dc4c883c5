"""The classic sharding-spec types and their conversions (defined in the
core's sharding room)."""
from pmapkit.core.sharding import sharding_specs as _sharding_specs
from pmapkit.core.sharding.sharding_specs import *  # noqa: F401,F403 (its __all__)

__all__ = list(_sharding_specs.__all__)
__doc__ = _sharding_specs.__doc__

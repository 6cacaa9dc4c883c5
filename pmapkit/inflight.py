"""The bound on collective programs in flight on XLA:CPU (defined in the
core's programs room)."""
from pmapkit.core.programs import inflight as _inflight
from pmapkit.core.programs.inflight import cpu_collectives_in_flight, set_cpu_collectives_in_flight

__all__ = ["cpu_collectives_in_flight", "set_cpu_collectives_in_flight"]
__doc__ = _inflight.__doc__

"""Shardings and specs: parsing in_axes and PartitionSpecs (``specs``), the
mesh and its classic context (``mesh``), the classic sharding-spec types
(``sharding_specs``), one object per distinct sharding (``interning``)."""

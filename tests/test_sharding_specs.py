"""Classic ShardingSpec family and the conversions in pmapkit.core.sharding.sharding_specs."""
import copy
import math
import pickle

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from pmapkit.core.sharding.axis_names import mesh_name
from pmapkit.core.sharding import sharding_specs as ss
from pmapkit.core.sharding.sharding_specs import (
    REPLICATED,
    Chunked,
    HloSharding,
    NoSharding,
    OpSharding,
    ParsedPartitionSpec,
    Replicated,
    ShardedAxis,
    ShardingSpec,
    Unstacked,
)


def make_mesh(shape, names):
    devices = np.array(jax.devices()[:math.prod(shape)]).reshape(shape)
    return Mesh(devices, names)


@pytest.fixture(scope="module")
def meshes():
    return {
        "1x8": make_mesh((1, 8), ("x", "y")),
        "2x4": make_mesh((2, 4), ("x", "y")),
        "4x2": make_mesh((4, 2), ("x", "y")),
        "8": make_mesh((8,), ("d",)),
        "2x2x2": make_mesh((2, 2, 2), ("a", "b", "c")),
    }


# --- the types ---------------------------------------------------------------------

@pytest.mark.parametrize("value, text", [
    (NoSharding(), "NoSharding()"),
    (Chunked([2]), "Chunked(2)"),
    (Chunked([2, 4]), "Chunked(2,4)"),
    (Chunked([]), "Chunked()"),
    (Unstacked(8), "Unstacked(8)"),
    (ShardedAxis(1), "ShardedAxis(axis=1)"),
    (Replicated(4), "Replicated(replicas=4)"),
    (ShardingSpec([Chunked([2]), NoSharding()], [ShardedAxis(0), Replicated(4)]),
     ("ShardingSpec((Chunked(2), NoSharding()), "
      "(ShardedAxis(axis=0), Replicated(replicas=4)))")),
    (ShardingSpec((Unstacked(8),), (ShardedAxis(0),)),
     "ShardingSpec((Unstacked(8),), (ShardedAxis(axis=0),))"),
])
def test_repr(value, text):
    assert repr(value) == text


def _equal_pairs():
    return [
        (NoSharding(), NoSharding()),
        (Chunked([2, 4]), Chunked((2, 4))),
        (Chunked([np.int64(2)]), Chunked([2])),
        (Unstacked(8), Unstacked(8)),
        (ShardedAxis(0), ShardedAxis(0)),
        (Replicated(2), Replicated(2)),
        (ShardingSpec([Chunked([2])], [ShardedAxis(0)]),
         ShardingSpec((Chunked((2,)),), (ShardedAxis(0),))),
    ]


@pytest.mark.parametrize("a, b", _equal_pairs())
def test_equal_and_same_hash(a, b):
    assert a == b and not (a != b)  # noqa: SIM202 (both operators)
    assert hash(a) == hash(b)
    assert len({a, b}) == 1


@pytest.mark.parametrize("a, b", [
    (NoSharding(), Chunked([])),
    (Chunked([2, 4]), Chunked([4, 2])),
    (Chunked([2]), Unstacked(2)),
    (Unstacked(2), Unstacked(4)),
    (ShardedAxis(0), ShardedAxis(1)),
    (ShardedAxis(2), Replicated(2)),
    (Replicated(2), Replicated(4)),
    (Chunked([2]), (2,)),
    (NoSharding(), None),
    (ShardingSpec([Chunked([2])], [ShardedAxis(0)]),
     ShardingSpec([Unstacked(2)], [ShardedAxis(0)])),
    (ShardingSpec([NoSharding()], [Replicated(2)]),
     ShardingSpec([NoSharding()], [Replicated(4)])),
])
def test_not_equal(a, b):
    assert a != b and not (a == b)  # noqa: SIM201 (both operators)


@pytest.mark.parametrize("value", [v for pair in _equal_pairs() for v in pair])
def test_immutable_picklable_copyable(value):
    for field in ("chunks", "size", "axis", "replicas", "sharding", "mesh_mapping"):
        if hasattr(value, field):
            with pytest.raises(AttributeError):
                setattr(value, field, 3)
    with pytest.raises(AttributeError):
        value.new_attribute = 1
    assert pickle.loads(pickle.dumps(value)) == value
    assert copy.deepcopy(value) == value


def test_fields_are_tuples_and_validated():
    spec = ShardingSpec([Chunked([2, 2]), NoSharding()], [ShardedAxis(1), ShardedAxis(0)])
    assert spec.sharding == (Chunked([2, 2]), NoSharding())
    assert spec.mesh_mapping == (ShardedAxis(1), ShardedAxis(0))
    assert Chunked([2, 4]).chunks == (2, 4)
    assert spec.mesh_shape == (2, 2)
    with pytest.raises(TypeError):
        ShardingSpec([ShardedAxis(0)], [ShardedAxis(0)])
    with pytest.raises(TypeError):
        ShardingSpec([NoSharding()], [NoSharding()])
    with pytest.raises(TypeError):
        Chunked(["2"])
    with pytest.raises(ValueError):
        Chunked([0])
    with pytest.raises(ValueError):
        ShardedAxis(-1)
    with pytest.raises(ValueError):
        _ = ShardingSpec([Chunked([2])], [ShardedAxis(1)]).mesh_shape


# --- indices -----------------------------------------------------------------------

def test_indices_pmap_style_unstacked():
    spec = ShardingSpec((Unstacked(4), NoSharding()), (ShardedAxis(0),))
    assert ss.sharding_spec_indices(spec, (4, 3)) == tuple(
        (i, slice(None)) for i in range(4))
    assert ss.spec_to_indices((4, 3), spec) == ss.sharding_spec_indices(spec, (4, 3))
    # Replicated over an outer mesh axis: the inner axis walks the shards.
    spec = ShardingSpec((Unstacked(2),), (Replicated(3), ShardedAxis(0)))
    assert ss.sharding_spec_indices(spec, (2,)) == ((0,), (1,)) * 3
    with pytest.raises(ValueError):
        ss.sharding_spec_indices(spec, (3,))


def test_indices_mesh_mapping_order():
    # dim 0 in 2 chunks walked by mesh axis 1, dim 1 in 4 chunks by mesh axis 0.
    spec = ShardingSpec((Chunked([2]), Chunked([4])), (ShardedAxis(1), ShardedAxis(0)))
    assert spec.mesh_shape == (4, 2)
    idx = spec.indices((4, 8))
    assert idx.shape == (4, 2)
    assert idx[3, 1] == (slice(2, 4), slice(6, 8))
    assert idx[1, 0] == (slice(0, 2), slice(2, 4))
    with pytest.raises(ValueError):
        spec.indices((3, 8))


def test_indices_fully_replicated():
    spec = ShardingSpec((NoSharding(), NoSharding()), (Replicated(8),))
    assert ss.sharding_spec_indices(spec, (3, 5)) == ((slice(None),) * 2,) * 8


# --- PartitionSpec parsing -----------------------------------------------------------

def test_parsed_partition_spec_from_user_input():
    p = ParsedPartitionSpec.from_user_input(P("x", None, ("y", "z")), "in_axis_resources")
    assert p.partitions == (("x",), (), ("y", "z"))
    assert p.user_spec == P("x", None, ("y", "z"))
    assert len(p) == 3 and p[2] == ("y", "z") and list(p) == list(p.partitions)
    assert ParsedPartitionSpec.from_user_input(None, "a") == REPLICATED
    assert REPLICATED.partitions == ()
    assert p == ParsedPartitionSpec("other text", [["x"], [], ["y", "z"]])
    assert hash(p) == hash(ParsedPartitionSpec(None, p.partitions))
    assert p != ParsedPartitionSpec(None, (("x",), ("y", "z")))
    assert p.normalized() == p
    assert (ParsedPartitionSpec.from_user_input(P("x", None), "a")
            != ParsedPartitionSpec.from_user_input(P("x"), "a"))
    assert (ParsedPartitionSpec.from_user_input(P("x", None), "a").normalized()
            == ParsedPartitionSpec.from_user_input(P(("x",)), "a"))
    assert p.to_partition_spec() == P("x", None, ("y", "z"))
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError):
        p.partitions = ()


def test_parsed_partition_spec_errors():
    with pytest.raises(TypeError, match="in_axis_resources leaf specifications are "
                       "expected to be PartitionSpec instances or None, but got"):
        ParsedPartitionSpec.from_user_input(("x",), "in_axis_resources")
    # Any hashable but a tuple names a mesh axis (classic meshes took them):
    # read as the string its mesh names it by.
    assert ParsedPartitionSpec.from_user_input(P(1), "in_axis_resources").partitions \
        == ((mesh_name(1),),)
    assert ParsedPartitionSpec.from_user_input(P(("x", 2)), "in_axis_resources").partitions \
        == (("x", mesh_name(2)),)
    # (PartitionSpec itself refuses unhashable and nested entries.)
    with pytest.raises(TypeError, match="mesh axis name"):
        ss._parse_entry({"a": 1}, "P({'a': 1})", "in_axis_resources")
    with pytest.raises(TypeError, match="mesh axis name"):
        ss._parse_entry(("x", ("y",)), "P(('x', ('y',)))", "in_axis_resources")
    with pytest.raises(ValueError, match=r"A single in_axis_resources specification "
                       r"can map every mesh axis to at most one positional "
                       r"dimension, but PartitionSpec\('x', 'y', \('x', 'y'\)\) has duplicate "
                       r"entries for `x`, `y`"):
        ParsedPartitionSpec.from_user_input(P("x", "y", ("x", "y")), "in_axis_resources")
    with pytest.raises(ValueError, match="UNCONSTRAINED"):
        ParsedPartitionSpec.from_user_input(P(P.UNCONSTRAINED), "a")


def test_normalization_and_canonical_pspec(meshes):
    mesh = meshes["1x8"]
    parsed = ParsedPartitionSpec.from_user_input(P(("x", "y"), None, "x2"), "a")
    assert parsed.normalized().partitions == (("x", "y"), (), ("x2",))
    assert ss.normalize_partitions([("x",), ("y",), ()], mesh) == ((), ("y",))
    assert ss.canonical_pspec(P(("y",), None)) == P("y")
    assert ss.canonical_pspec(P("x", ("y",)), mesh) == P(None, "y")
    assert ss.canonical_pspec(None) == P()
    assert ss.canonical_pspec((("x", "y"), None)) == P(("x", "y"))
    assert ss.array_mapping(P(None, ("y", "x"))) == {"y": 1, "x": 1}
    assert list(ss.array_mapping(P(None, ("y", "x")))) == ["y", "x"]


def test_check_shape_classic_messages(meshes):
    mesh = meshes["2x4"]
    p = ParsedPartitionSpec.from_user_input(P("x", "y"), "in_axis_resources")
    p.check_shape((4, 8), mesh)
    with pytest.raises(ValueError, match="implies that it has a rank of at least 2, but it is 1"):
        p.check_shape((4,), mesh, "pjit arguments")
    with pytest.raises(ValueError, match="dimension 1 should be divisible by 4, but it is equal to 6"):
        p.check_shape((4, 6), mesh)
    q = ParsedPartitionSpec.from_user_input(P("z"), "in_axis_resources")
    with pytest.raises(ValueError, match="resource axis z is undefined. Did you forget"):
        q.check_shape((4,), mesh)


# --- conversions on concrete cases -----------------------------------------------------

CONCRETE = [
    ("1x8", P("y"), (8, 2),
     ShardingSpec((Chunked([8]), NoSharding()), (Replicated(1), ShardedAxis(0)))),
    ("1x8", P("x", "y"), (3, 8),
     ShardingSpec((Chunked([1]), Chunked([8])), (ShardedAxis(0), ShardedAxis(1)))),
    ("2x4", P("x", "y"), (4, 8),
     ShardingSpec((Chunked([2]), Chunked([4])), (ShardedAxis(0), ShardedAxis(1)))),
    ("2x4", P("y", "x"), (4, 8),
     ShardingSpec((Chunked([4]), Chunked([2])), (ShardedAxis(1), ShardedAxis(0)))),
    ("2x4", P(None, ("y", "x")), (3, 8),
     ShardingSpec((NoSharding(), Chunked([4, 2])), (ShardedAxis(1), ShardedAxis(0)))),
    ("2x4", P("y"), (8, 3),
     ShardingSpec((Chunked([4]), NoSharding()), (Replicated(2), ShardedAxis(0)))),
    ("4x2", P(("x", "y")), (16,),
     ShardingSpec((Chunked([4, 2]),), (ShardedAxis(0), ShardedAxis(1)))),
    ("4x2", P(None, None, "y"), (1, 2, 6),
     ShardingSpec((NoSharding(), NoSharding(), Chunked([2])),
                  (Replicated(4), ShardedAxis(0)))),
    ("4x2", P(), (5,), ShardingSpec((NoSharding(),), (Replicated(4), Replicated(2)))),
    ("8", P("d"), (8,), ShardingSpec((Chunked([8]),), (ShardedAxis(0),))),
    ("2x2x2", P("c", None, ("a", "b")), (2, 1, 4),
     ShardingSpec((Chunked([2]), NoSharding(), Chunked([2, 2])),
                  (ShardedAxis(1), ShardedAxis(2), ShardedAxis(0)))),
]


@pytest.mark.parametrize("mesh_key, pspec, shape, expected", CONCRETE)
def test_concrete_conversions(meshes, mesh_key, pspec, shape, expected):
    mesh = meshes[mesh_key]
    spec = ss.sharding_spec_from_pspec(mesh, pspec, shape)
    assert spec == expected
    assert ss.sharding_spec_from_pspec(mesh, pspec, len(shape)) == expected
    assert spec.mesh_shape == tuple(mesh.shape.values())
    ns = NamedSharding(mesh, pspec)
    assert ss.named_sharding_to_sharding_spec(ns, len(shape)) == expected
    back = ss.sharding_spec_to_named_sharding(spec, mesh)
    assert back.spec == ss.canonical_pspec(pspec)
    assert back.is_equivalent_to(ns, len(shape))
    # indices, in mesh device order, agree with JAX's
    jax_map = ns.devices_indices_map(shape)
    ours = ss.sharding_spec_indices(spec, shape)
    assert ours == tuple(jax_map[d] for d in mesh.devices.flat)
    # OpSharding: same as JAX lowers to, same indices, parses back
    op = ss.to_op_sharding(ns, len(shape))
    assert isinstance(op, OpSharding)
    assert HloSharding.from_proto(op) == ns._to_xla_hlo_sharding(len(shape))
    assert ss.op_sharding_to_indices(op, shape, mesh.size) == ours
    parsed = ss.parse_op_sharding(op, mesh)
    assert parsed == ParsedPartitionSpec.from_user_input(pspec, "x").normalized(mesh)
    assert parsed.user_spec == ss.canonical_pspec(pspec, mesh)


def test_parse_op_sharding_classic_examples(meshes):
    mesh = meshes["2x4"]
    # devices=[4,1,2]: dim 0 over y; x replicated
    op = OpSharding()
    op.type = OpSharding.Type.OTHER
    op.tile_assignment_dimensions = [4, 1, 2]
    op.tile_assignment_devices = [0, 4, 1, 5, 2, 6, 3, 7]
    op.replicate_on_last_tile_dim = True
    assert ss.parse_op_sharding(op, mesh).partitions == (("y",),)
    # the same thing in HloSharding's iota form
    hlo = HloSharding.iota_tile(dims=[4, 1, 2], reshape_dims=[2, 4],
                                transpose_perm=[1, 0],
                                subgroup_types=[OpSharding.Type.REPLICATED])
    assert ss.parse_op_sharding(hlo, mesh).partitions == (("y",),)
    assert ss.parse_op_sharding(HloSharding.replicate(), mesh) == REPLICATED
    tup = OpSharding()
    tup.type = OpSharding.Type.TUPLE
    tup.tuple_shardings = [HloSharding.replicate().to_proto(), op]
    assert [p.partitions for p in ss.parse_op_sharding(tup, mesh)] == [(), (("y",),)]
    # not a transposition of the mesh: refused
    bad = OpSharding()
    bad.type = OpSharding.Type.OTHER
    bad.tile_assignment_dimensions = [8]
    bad.tile_assignment_devices = [0, 2, 1, 3, 4, 6, 5, 7]
    with pytest.raises(NotImplementedError):
        ss.parse_op_sharding(bad, mesh)


def test_conversion_errors(meshes):
    mesh = meshes["2x4"]
    with pytest.raises(ValueError, match="undefined"):
        ss.sharding_spec_from_pspec(mesh, P("z"), 1)
    with pytest.raises(ValueError, match="rank of at least 2"):
        ss.sharding_spec_from_pspec(mesh, P("x", "y"), 1)
    with pytest.raises(ValueError, match="divisible by 4"):
        ss.sharding_spec_from_pspec(mesh, P("y"), (6,))
    with pytest.raises(ValueError, match="duplicate"):
        ss.sharding_spec_from_pspec(mesh, P("x", "x"), 2)
    unstacked = ShardingSpec((Unstacked(2),), (ShardedAxis(0), Replicated(4)))
    with pytest.raises(ValueError, match="unstack"):
        ss.sharding_spec_to_named_sharding(unstacked, mesh)
    with pytest.raises(ValueError):
        ss.sharding_spec_to_op_sharding(unstacked)
    wrong_size = ShardingSpec((Chunked([4]),), (ShardedAxis(0), Replicated(4)))
    with pytest.raises(ValueError, match="size"):
        ss.sharding_spec_to_named_sharding(wrong_size, mesh)
    wrong_rank = ShardingSpec((Chunked([8]),), (ShardedAxis(0),))
    with pytest.raises(ValueError, match="mesh axes"):
        ss.sharding_spec_to_named_sharding(wrong_rank, mesh)


# --- properties ------------------------------------------------------------------------

MESH_SHAPES = [(8,), (4,), (2,), (1,), (1, 8), (8, 1), (2, 4), (4, 2), (2, 2),
               (2, 2, 2), (1, 2, 4), (2, 1, 4), (4, 1, 2), (1, 1, 8), (2, 2, 1, 2)]
NAMES = ("a", "b", "c", "x", "y", "z")
_MESH_CACHE = {}


def _mesh(shape, names):
    key = (shape, names)
    if key not in _MESH_CACHE:
        _MESH_CACHE[key] = make_mesh(shape, names)
    return _MESH_CACHE[key]


@st.composite
def mesh_pspec_shape(draw):
    """A mesh of <= 8 devices, a valid user-style PartitionSpec for it (with
    the spellings users write: bare names, 1-tuples, trailing Nones), a rank
    <= 4 and a shape divisible as the spec needs."""
    mesh_shape = draw(st.sampled_from(MESH_SHAPES))
    names = tuple(draw(st.permutations(NAMES))[:len(mesh_shape)])
    mesh = _mesh(mesh_shape, names)
    ndim = draw(st.integers(0, 4))
    # each mesh axis goes to one dimension or stays unused; the drawn order of
    # the axes is their order inside a dimension
    order = draw(st.permutations(names))
    dims = [[] for _ in range(ndim)]
    for name in order:
        target = draw(st.integers(-1, ndim - 1))
        if target >= 0:
            dims[target].append(name)
    used = max((i + 1 for i, d in enumerate(dims) if d), default=0)
    length = draw(st.integers(used, ndim))
    entries = []
    for axes in dims[:length]:
        if not axes:
            entries.append(draw(st.sampled_from([None, ()])))
        elif len(axes) == 1:
            entries.append(draw(st.sampled_from([axes[0], (axes[0],)])))
        else:
            entries.append(tuple(axes))
    pspec = P(*entries)
    shape = tuple(math.prod(mesh.shape[a] for a in axes) * draw(st.integers(1, 3))
                  for axes in dims)
    return mesh, pspec, shape


@settings(max_examples=50, deadline=None)
@given(mesh_pspec_shape())
def test_property_sharding_spec_named_sharding_round_trip(case):
    mesh, pspec, shape = case
    ndim = len(shape)
    spec = ss.sharding_spec_from_pspec(mesh, pspec, shape)
    assert spec.mesh_shape == tuple(mesh.shape.values())
    ns = NamedSharding(mesh, pspec)
    assert ss.named_sharding_to_sharding_spec(ns, ndim) == spec
    back = ss.sharding_spec_to_named_sharding(spec, mesh)
    # ShardingSpec -> NamedSharding -> ShardingSpec is exact
    assert ss.named_sharding_to_sharding_spec(back, ndim) == spec
    # NamedSharding -> ShardingSpec -> NamedSharding is exact up to spelling
    assert back.spec == ss.canonical_pspec(pspec)
    assert back.is_equivalent_to(ns, ndim)
    assert hash(spec) == hash(ss.sharding_spec_from_pspec(mesh, ss.canonical_pspec(pspec), ndim))


@settings(max_examples=50, deadline=None)
@given(mesh_pspec_shape())
def test_property_op_sharding_round_trip(case):
    mesh, pspec, shape = case
    ndim = len(shape)
    ns = NamedSharding(mesh, pspec)
    op = ss.to_op_sharding(ns, ndim)
    assert HloSharding.from_proto(op) == ns._to_xla_hlo_sharding(ndim)
    expected = ParsedPartitionSpec.from_user_input(pspec, "pspec").normalized(mesh)
    assert ss.parse_op_sharding(op, mesh) == expected
    # JAX's own lowering (iota form) parses to the same spec
    assert ss.parse_op_sharding(ns._to_xla_hlo_sharding(ndim), mesh) == expected
    # and the parsed spec gives back an equivalent sharding
    again = NamedSharding(mesh, ss.canonical_pspec(ss.parse_op_sharding(op, mesh)))
    assert again.is_equivalent_to(ns, ndim)


@settings(max_examples=50, deadline=None)
@given(mesh_pspec_shape())
def test_property_indices_match_jax(case):
    mesh, pspec, shape = case
    ns = NamedSharding(mesh, pspec)
    jax_map = ns.devices_indices_map(shape)
    expected = tuple(jax_map[d] for d in mesh.devices.flat)
    spec = ss.sharding_spec_from_pspec(mesh, pspec, shape)
    assert ss.sharding_spec_indices(spec, shape) == expected
    assert spec.indices(shape).shape == mesh.devices.shape
    op = ss.to_op_sharding(ns, len(shape))
    assert ss.op_sharding_to_indices(op, shape, mesh.size) == expected

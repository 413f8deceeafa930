"""Tests for praxis.py_utils (NestedMap included)."""

import copy
import dataclasses
import pickle
import threading
from typing import Any, NamedTuple

from absl.testing import absltest
from absl.testing import parameterized
import fiddle as fdl
import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np

from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
P = jax.sharding.PartitionSpec


class Pair(NamedTuple):
  first: int
  second: int


def _sample_map():
  """foo.bar is a list; 'a' holds a tuple (a leaf); z is a plain dict."""
  return NestedMap(
      foo=NestedMap(bar=[1, NestedMap(baz=2)]),
      a=(3, 4),
      z={'y': 5, 'x': 6},
  )


class NestedMapBasicsTest(parameterized.TestCase):

  def test_attribute_and_item_access(self):
    m = NestedMap(x=1)
    m.y = 2
    m['z'] = 3
    self.assertEqual(m.y, m['y'])
    self.assertEqual(dict(m), {'x': 1, 'y': 2, 'z': 3})
    del m.x
    self.assertNotIn('x', m)
    self.assertIs(pytypes.NestedMap, NestedMap)

  def test_missing_attribute_raises_attribute_error(self):
    m = NestedMap(a=1)
    with self.assertRaisesRegex(AttributeError, r"'b'.*\['a'\]"):
      _ = m.b
    with self.assertRaises(AttributeError):
      del m.b
    self.assertFalse(hasattr(m, 'b'))

  @parameterized.parameters('1abc', '', '-x', ' a', 3, None)
  def test_invalid_keys(self, key):
    with self.assertRaisesRegex(ValueError, 'Invalid NestedMap key'):
      NestedMap({key: 1})
    with self.assertRaisesRegex(ValueError, 'Invalid NestedMap key'):
      NestedMap()[key] = 1

  @parameterized.parameters('items', 'keys', 'get', 'pop', '__class__')
  def test_reserved_keys(self, key):
    with self.assertRaisesRegex(ValueError, f'{key!r} is reserved'):
      NestedMap(**{key: 1})
    m = NestedMap()
    with self.assertRaisesRegex(ValueError, 'reserved'):
      setattr(m, key, 1)
    with self.assertRaisesRegex(ValueError, 'reserved'):
      m.update({key: 1})
    with self.assertRaisesRegex(ValueError, 'reserved'):
      m.setdefault(key, 1)
    with self.assertRaisesRegex(ValueError, 'reserved'):
      m |= {key: 1}

  def test_keys_only_need_an_identifier_prefix(self):
    # As in lingvo: SeqIO provenance keys contain '/'.
    m = NestedMap({py_utils.SHARD_INDEX_KEY: 0, 'a_1': 2})
    self.assertEqual(m[py_utils.SHARD_INDEX_KEY], 0)

  def test_check_key_and_square_bracket_index(self):
    NestedMap.CheckKey('abc_1')
    with self.assertRaises(ValueError):
      NestedMap.CheckKey('9')
    self.assertEqual(NestedMap.SquareBracketIndex('abc[12]'), ('abc', 12))
    self.assertEqual(NestedMap.SquareBracketIndex('abc'), ('abc', None))
    self.assertEqual(NestedMap.SquareBracketIndex('a[x]'), ('a[x]', None))

  def test_copy_is_shallow_nested_map(self):
    m = NestedMap(a=NestedMap(b=1))
    for c in (m.copy(), copy.copy(m)):
      self.assertIsInstance(c, NestedMap)
      self.assertIsNot(c, m)
      self.assertIs(c.a, m.a)

  def test_deepcopy_copies_structure_and_shares_leaves(self):
    leaf1, leaf2 = object(), [object()]
    m = NestedMap(a=[leaf1], b=NestedMap(c=leaf2[0]), t=(leaf1,))
    for c in (copy.deepcopy(m), m.DeepCopy()):
      self.assertEqual(c, m)
      self.assertIsInstance(c.b, NestedMap)
      self.assertIsNot(c.a, m.a)
      self.assertIsNot(c.b, m.b)
      self.assertIs(c.a[0], leaf1)
      self.assertIs(c.b.c, leaf2[0])
      self.assertIs(c.t, m.t)  # Tuples are leaves.

  def test_from_and_to_nested_dict(self):
    plain = {'a': {'b': [{'c': 1}, (2, {'d': 3})]}, 'p': Pair(4, {'e': 5})}
    m = NestedMap.FromNestedDict(plain)
    self.assertIsInstance(m, NestedMap)
    self.assertIsInstance(m.a, NestedMap)
    self.assertIsInstance(m.a.b[0], NestedMap)
    self.assertIsInstance(m.a.b[1], tuple)
    self.assertIsInstance(m.a.b[1][1], NestedMap)
    self.assertIsInstance(m.p, Pair)
    self.assertIsInstance(m.p.second, NestedMap)
    back = m.ToNestedDict()
    self.assertEqual(back, plain)
    self.assertIs(type(back['a']), dict)
    self.assertIs(type(back['a']['b'][0]), dict)
    self.assertIs(type(back['p'].second), dict)
    self.assertEqual(NestedMap.FromNestedDict(7), 7)

  def test_from_nested_dataclass(self):

    @dataclasses.dataclass
    class Inner:
      ids: Any
      extra: dict[str, Any]

    @dataclasses.dataclass(slots=True)
    class Outer:
      x: Any
      inner: Inner

    leaf = np.arange(3)
    m = NestedMap.FromNestedDataclass(
        Outer(x=leaf, inner=Inner(ids=[1, 2], extra={'w': 5})))
    self.assertIsInstance(m, NestedMap)
    self.assertIsInstance(m.inner, NestedMap)
    self.assertIsInstance(m.inner.extra, NestedMap)
    self.assertIs(m.x, leaf)  # Leaves are shared, not copied.
    self.assertEqual(m.inner.ids, [1, 2])
    self.assertEqual(m.inner.extra.w, 5)
    with self.assertRaisesRegex(ValueError, 'dataclass instance'):
      NestedMap.FromNestedDataclass({'a': 1})

  def test_pickle_round_trip(self):
    m = _sample_map()
    data = pickle.dumps(m)
    self.assertIn(b'praxis.py_utils', data)  # The public path is recorded.
    restored = pickle.loads(data)
    self.assertEqual(restored, m)
    self.assertIsInstance(restored.foo, NestedMap)

  def test_dir_lists_flattened_keys(self):
    names = dir(_sample_map())
    for name in ('a', 'foo.bar[0]', 'foo.bar[1].baz', 'z.x', 'items'):
      self.assertIn(name, names)


class NestedMapPathsTest(absltest.TestCase):

  def test_get_item(self):
    m = _sample_map()
    self.assertEqual(m.GetItem('foo.bar[1].baz'), 2)
    self.assertEqual(m.GetItem('z.y'), 5)
    self.assertEqual(m.GetItem('a'), (3, 4))
    with self.assertRaises(KeyError):
      m.GetItem('foo.missing')
    with self.assertRaises(IndexError):
      m.GetItem('foo.bar[5]')

  def test_get_with_default(self):
    m = _sample_map()
    self.assertEqual(m.Get('foo.bar[0]'), 1)
    self.assertIsNone(m.Get('nope.nope'))
    self.assertEqual(m.Get('foo.bar[9]', 'dflt'), 'dflt')
    self.assertEqual(m.Get('foo.bar.baz', 'dflt'), 'dflt')  # TypeError path.

  def test_set_creates_intermediate_maps_and_lists(self):
    m = NestedMap()
    m.Set('a.b[0].c', 1)
    m.Set('a.b[1]', 2)
    m.Set('a.d', 3)
    m.Set('a.b[0].e', 4)
    expected = NestedMap(a=NestedMap(b=[NestedMap(c=1, e=4), 2], d=3))
    self.assertEqual(m, expected)
    self.assertIsInstance(m.a, NestedMap)
    self.assertIsInstance(m.a.b[0], NestedMap)

  def test_set_errors(self):
    m = NestedMap(x=1, l=[])
    with self.assertRaisesRegex(ValueError, 'past the end'):
      m.Set('l[1]', 5)
    with self.assertRaisesRegex(ValueError, 'not a dict'):
      m.Set('x.y', 5)
    with self.assertRaisesRegex(ValueError, 'Invalid NestedMap key'):
      m.Set('a.9b', 5)
    with self.assertRaisesRegex(ValueError, 'not a list'):
      m.Set('x[0]', 5)


class NestedMapTraversalTest(absltest.TestCase):

  def test_flatten_items_sorted_recursing_dicts_and_lists_not_tuples(self):
    self.assertEqual(
        _sample_map().FlattenItems(),
        [
            ('a', (3, 4)),
            ('foo.bar[0]', 1),
            ('foo.bar[1].baz', 2),
            ('z.x', 6),
            ('z.y', 5),
        ],
    )
    self.assertEqual(_sample_map().Flatten(), [(3, 4), 1, 2, 6, 5])
    self.assertEqual(
        _sample_map().ListKeys(),
        ['a', 'foo.bar[0]', 'foo.bar[1].baz', 'z.x', 'z.y'],
    )

  def test_pack_round_trip_and_wrong_length(self):
    m = _sample_map()
    packed = m.Pack(['A', 'B', 'C', 'D', 'E'])
    self.assertEqual(
        packed,
        NestedMap(
            a='A', foo=NestedMap(bar=['B', NestedMap(baz='C')]),
            z={'x': 'D', 'y': 'E'},
        ),
    )
    self.assertIs(type(packed.z), dict)
    with self.assertRaisesRegex(ValueError, 'needs 5 values'):
      m.Pack([1, 2])

  def test_transform_and_transform_with_key(self):
    m = NestedMap(a=1, b=NestedMap(c=[2, 3]))
    self.assertEqual(
        m.Transform(lambda v: v * 10), NestedMap(a=10, b=NestedMap(c=[20, 30]))
    )
    self.assertEqual(
        m.TransformWithKey(lambda k, v: f'{k}={v}'),
        NestedMap(a='a=1', b=NestedMap(c=['b.c[0]=2', 'b.c[1]=3'])),
    )

  def test_is_compatible(self):
    m = NestedMap(a=1, b=NestedMap(c=[2, 3]))
    self.assertTrue(m.IsCompatible(NestedMap(a='x', b={'c': ['y', 'z']})))
    self.assertFalse(m.IsCompatible(NestedMap(a=1, b=NestedMap(c=[2]))))
    self.assertFalse(m.IsCompatible(NestedMap(a=1, d=NestedMap(c=[2, 3]))))
    self.assertFalse(m.IsCompatible([1, 2, 3]))

  def test_filter_drops_emptied_containers_keeps_originally_empty(self):
    m = NestedMap(
        a=1, b=NestedMap(c=2, d=NestedMap(e=3)), f=[], g=[4, 5], h=NestedMap()
    )
    self.assertEqual(
        m.Filter(lambda v: v in (1, 5)),
        NestedMap(a=1, f=[], g=[5], h=NestedMap()),
    )
    self.assertEqual(
        m.FilterKeyVal(lambda k, _: k.startswith('b.d')),
        NestedMap(b=NestedMap(d=NestedMap(e=3)), f=[], h=NestedMap()),
    )
    self.assertEqual(NestedMap(a=1, b=[2]).Filter(lambda v: False), NestedMap())

  def test_list_keys_debug_string_and_vlog(self):
    m = NestedMap(bb=NestedMap(c='x'), a=1)
    self.assertEqual(m.DebugString(), 'a       1\nbb.c    x')
    with self.assertLogs(level='INFO') as logs:
      m.VLog(0, prefix='P:')
    self.assertEqual(
        [r.getMessage() for r in logs.records], ['P: a       1', 'P: bb.c    x']
    )


class NestedMapRegistrationTest(absltest.TestCase):

  def test_jax_key_paths_in_sorted_order(self):
    m = NestedMap(b=1, a=NestedMap(d=[2, 3], c=4))
    leaves, treedef = jax.tree_util.tree_flatten_with_path(m)
    dk, sk = jax.tree_util.DictKey, jax.tree_util.SequenceKey
    self.assertEqual(
        leaves,
        [
            ((dk('a'), dk('c')), 4),
            ((dk('a'), dk('d'), sk(0)), 2),
            ((dk('a'), dk('d'), sk(1)), 3),
            ((dk('b'),), 1),
        ],
    )
    rebuilt = jax.tree.unflatten(treedef, [40, 20, 30, 10])
    self.assertEqual(rebuilt, NestedMap(b=10, a=NestedMap(d=[20, 30], c=40)))
    self.assertIsInstance(rebuilt.a, NestedMap)

  def test_jit_and_tree_map_keep_nested_map(self):
    m = NestedMap(x=jnp.arange(3.0), y=NestedMap(z=jnp.ones(2)))
    out = jax.jit(lambda t: jax.tree.map(lambda v: v * 2, t))(m)
    self.assertIsInstance(out, NestedMap)
    self.assertIsInstance(out.y, NestedMap)
    np.testing.assert_array_equal(out.x, [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(out.y.z, [2.0, 2.0])

  def test_flax_state_dict_round_trip(self):
    m = NestedMap(b=np.array([1, 2]), a=NestedMap(c=np.float32(3.0)))
    state = flax.serialization.to_state_dict(m)
    self.assertIs(type(state), dict)
    self.assertIs(type(state['a']), dict)
    self.assertEqual(sorted(state), ['a', 'b'])
    new_state = {'a': {'c': np.float32(7.0)}, 'b': np.array([8, 9])}
    restored = flax.serialization.from_state_dict(m, new_state)
    self.assertIsInstance(restored, NestedMap)
    self.assertIsInstance(restored.a, NestedMap)
    self.assertEqual(restored.a.c, 7.0)
    np.testing.assert_array_equal(restored.b, [8, 9])
    data = flax.serialization.to_bytes(m)
    restored = flax.serialization.from_bytes(m, data)
    np.testing.assert_array_equal(restored.b, [1, 2])

  def test_fiddle_builds_configs_inside_nested_map(self):
    cfg = fdl.Config(dict, x=NestedMap(a=fdl.Config(int), b=[fdl.Config(str)]))
    built = fdl.build(cfg)
    self.assertEqual(built, {'x': {'a': 0, 'b': ['']}})
    self.assertIsInstance(built['x'], NestedMap)
    copied = copy.deepcopy(cfg)
    self.assertIsInstance(copied.x, NestedMap)
    self.assertEqual(fdl.build(copied), built)


class SequenceHelpersTest(parameterized.TestCase):

  def test_sequence_mask_and_paddings_match_numpy_loop(self):
    lengths = np.array([[0, 3], [5, 1]])
    maxlen = 4
    expected = np.zeros((2, 2, maxlen), np.float32)
    for i in range(2):
      for j in range(2):
        for t in range(maxlen):
          expected[i, j, t] = 1.0 if t < lengths[i, j] else 0.0
    mask = py_utils.sequence_mask(lengths, maxlen, jnp.float32)
    np.testing.assert_array_equal(mask, expected)
    self.assertEqual(py_utils.sequence_mask([2], 3).dtype, jnp.bool_)
    paddings = py_utils.sequence_paddings(lengths, maxlen)
    self.assertEqual(paddings.dtype, jnp.float32)
    np.testing.assert_array_equal(paddings, 1.0 - expected)

  @parameterized.parameters(True, False)
  def test_apply_padding(self, use_select):
    x = jnp.array([[1.0, 2.0], [3.0, 4.0]])
    pad = jnp.array([[0.0, 1.0], [1.0, 0.0]])
    out = py_utils.apply_padding(x, pad, use_select=use_select)
    np.testing.assert_array_equal(out, [[1.0, 0.0], [0.0, 4.0]])
    out = py_utils.apply_padding(
        x, pad, pad_value=jnp.array(-1.0), use_select=use_select
    )
    np.testing.assert_array_equal(out, [[1.0, -1.0], [-1.0, 4.0]])

  def test_apply_padding_axis_aligns_leading_dims(self):
    x = jnp.ones((2, 3, 4))
    pad = jnp.array([[0, 0, 1], [0, 1, 1]])
    out = py_utils.apply_padding(x, pad, axis=0)
    expected = np.ones((2, 3, 4)) * (1 - np.array(pad))[:, :, None]
    np.testing.assert_array_equal(out, expected)

  def test_large_negative_number_and_mask_logits(self):
    f32 = py_utils.get_large_negative_number(jnp.float32)
    self.assertEqual(f32.dtype, jnp.float32)
    expected = np.float32(-0.7 * np.finfo(np.float32).max)
    self.assertEqual(float(f32), float(expected))
    i32 = py_utils.get_large_negative_number(jnp.int32)
    self.assertEqual(int(i32), int(-0.7 * np.iinfo(np.int32).max))
    # Without x64, int64 is int32 and the number fits it.
    i64 = py_utils.get_large_negative_number(jnp.int64)
    self.assertEqual(i64.dtype, jnp.int32)
    self.assertEqual(int(i64), int(-0.7 * np.iinfo(np.int32).max))
    with self.assertRaises(ValueError):
      py_utils.get_large_negative_number(jnp.bool_)
    logits = jnp.array([1.0, 2.0, 3.0])
    mask = jnp.array([0.0, f32, 0.0])
    np.testing.assert_array_equal(
        py_utils.apply_mask_to_logits(logits, mask), [1.0, f32, 3.0]
    )

  def test_flip_sequence(self):
    x = jnp.array([[1, 2, 3, 0], [4, 5, 6, 7], [8, 0, 0, 0]])
    out = py_utils.flip_sequence(x, jnp.array([3, 4, 1]))
    np.testing.assert_array_equal(
        out, [[3, 2, 1, 0], [7, 6, 5, 4], [8, 0, 0, 0]]
    )

  def test_concat_sequences_with_padding(self):
    in0 = jnp.array([[1, 2, 0], [5, 0, 0]])
    pad0 = jnp.array([[0, 0, 1], [0, 1, 1]])
    in1 = jnp.array([[3, 9], [6, 7]])
    pad1 = jnp.array([[0, 1], [0, 0]])
    out, pad = py_utils.concat_sequences_with_padding(in0, pad0, in1, pad1)
    np.testing.assert_array_equal(out, [[1, 2, 3, 9, 0], [5, 6, 7, 0, 0]])
    np.testing.assert_array_equal(pad, [[0, 0, 0, 1, 1], [0, 0, 0, 1, 1]])

  def test_pad_or_trim_to(self):
    x = jnp.array([[1, 2, 3], [4, 5, 6]])
    np.testing.assert_array_equal(
        py_utils.pad_or_trim_to(x, [3, 2], pad_val=-1),
        [[1, 2], [4, 5], [-1, -1]],
    )
    self.assertIsNone(py_utils.pad_or_trim_to(None, [1]))
    with self.assertRaisesRegex(ValueError, 'rank'):
      py_utils.pad_or_trim_to(x, [3])

  def test_append_eos(self):
    x = jnp.array([[5, 6, 0, 0], [5, 6, 7, 8], [5, 2, 0, 0]])
    paddings = jnp.array(
        [[0, 0, 1, 1], [0, 0, 0, 0], [0, 0, 1, 1]], jnp.float32
    )
    out, out_pad = py_utils.append_eos(x, paddings, eos_id=2)
    np.testing.assert_array_equal(
        out, [[5, 6, 2, 2, 2], [5, 6, 7, 8, 2], [5, 2, 2, 2, 2]]
    )
    np.testing.assert_array_equal(
        out_pad, [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0], [0, 0, 1, 1, 1]]
    )
    self.assertEqual(out_pad.dtype, jnp.float32)
    out, out_pad = py_utils.append_eos(
        x, paddings, eos_id=2, extend_if_overflow=False
    )
    np.testing.assert_array_equal(
        out, [[5, 6, 2, 2], [5, 6, 7, 8], [5, 2, 2, 2]]
    )
    np.testing.assert_array_equal(
        out_pad, [[0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 1, 1]]
    )

  def test_l2_normalize(self):
    x = np.array([[3.0, 4.0], [0.0, 2.0]], np.float32)
    expected = x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-12)
    np.testing.assert_allclose(py_utils.l2_normalize(x), expected, rtol=1e-6)


class TreeHelpersTest(absltest.TestCase):

  def test_extract_prefixed_keys(self):
    tree = NestedMap(
        a=[1, (2, 3)],
        b={'c': Pair(4, 5)},
        spec=P('x', None),
        skip=None,
    )
    self.assertEqual(
        py_utils.extract_prefixed_keys_from_nested_map(tree),
        NestedMap(
            a=['a[0]', ('a[1][0]', 'a[1][1]')],
            b={'c': Pair('b/c/first', 'b/c/second')},
            spec='spec',
            skip='skip',
        ),
    )
    self.assertEqual(
        py_utils.extract_prefixed_keys_from_nested_map(
            {'a': [1]}, prefix='p', key_separator='.', left_separator='<',
            right_separator='>', is_leaf=lambda x: isinstance(x, list),
        ),
        {'a': None},
    )
    self.assertIsNone(py_utils.extract_prefixed_keys_from_nested_map(3))

  def test_match_and_update_matched_variables(self):
    old = NestedMap(enc=NestedMap(w=1, b=2), dec=NestedMap(w=3))
    new = NestedMap(enc=NestedMap(w=10, b=20), dec=NestedMap(w=30))
    self.assertEqual(
        py_utils.match_variable_names(old, r'.*/w'),
        NestedMap(enc=NestedMap(w=True, b=False), dec=NestedMap(w=True)),
    )
    self.assertEqual(
        py_utils.update_matched_variables(old, new, [r'enc/.*']),
        NestedMap(enc=NestedMap(w=10, b=20), dec=NestedMap(w=3)),
    )
    self.assertEqual(
        py_utils.update_matched_variables(old, new, r'enc/.*', invert=True),
        NestedMap(enc=NestedMap(w=1, b=2), dec=NestedMap(w=30)),
    )

  def test_total_num_vars_and_tree_unstack(self):
    tree = NestedMap(a=np.zeros((2, 3)), b=[jnp.zeros((2, 5))])
    self.assertEqual(py_utils.total_num_vars(tree), 16)
    parts = py_utils.tree_unstack(
        NestedMap(a=np.arange(6).reshape(2, 3), b=[np.array([7, 8])]), 0
    )
    self.assertLen(parts, 2)
    np.testing.assert_array_equal(parts[1].a, [3, 4, 5])
    self.assertEqual(int(parts[1].b[0]), 8)
    self.assertEqual(py_utils.tree_unstack(NestedMap(), 0), [])
    with self.assertRaisesRegex(ValueError, 'shape'):
      py_utils.tree_unstack([np.zeros((2,)), np.zeros((3,))], 0)

  def test_concat_nested_maps(self):
    m1 = NestedMap(x=jnp.array([[1, 2]]), n=NestedMap(y=jnp.array([1])), s='a')
    m2 = NestedMap(x=jnp.array([[3, 4]]), n=NestedMap(y=jnp.array([2])), s='b')
    out = py_utils.concat_nested_maps([m1, m2], axis=0)
    np.testing.assert_array_equal(out.x, [[1, 2], [3, 4]])
    np.testing.assert_array_equal(out.n.y, [1, 2])
    self.assertEqual(out.s, 'a')
    self.assertIs(py_utils.concat_nested_maps([m1], axis=0), m1)

  def test_merge_dict(self):
    shared = object()
    self.assertEqual(
        py_utils.merge_dict({'a': shared, 'b': 1}, {'a': shared, 'c': 2}),
        {'a': shared, 'b': 1, 'c': 2},
    )
    with self.assertRaisesRegex(ValueError, "'a'"):
      py_utils.merge_dict({'a': [1]}, {'a': [1]})

  def test_filter_by_matching_keys_and_enumeration_id(self):
    batch = NestedMap(ids=1, ids_len=2, labels=3)
    matching, rest = py_utils.filter_by_matching_keys(batch, ['ids'])
    self.assertEqual(matching, NestedMap(ids=1, ids_len=2))
    self.assertEqual(rest, NestedMap(labels=3))
    example = {
        py_utils.INDEX_WITHIN_SHARD_KEY: np.int64(3),
        py_utils.SHARD_INDEX_KEY: 1,
        py_utils.NUM_SHARDS_KEY: 4,
        'x': 0,
    }
    self.assertEqual(
        py_utils.get_enumeration_id(example),
        '_seqio_provenance/index_within_shard=3/'
        '_seqio_provenance/shard_index=1/_seqio_provenance/num_shards=4',
    )
    self.assertLen(example, 4)
    py_utils.get_enumeration_id(example, pop=True)
    self.assertEqual(example, {'x': 0})
    self.assertIsNone(py_utils.get_enumeration_id(example))

  def test_bprop_masked_node(self):
    self.assertTrue(py_utils.is_bprop_masked_node(py_utils.BpropMaskedNode()))
    self.assertFalse(py_utils.is_bprop_masked_node(()))


class MiscHelpersTest(absltest.TestCase):

  def test_thread_local_stack(self):
    stack = py_utils.ThreadLocalStack()
    stack.stack.append('main')
    seen = []
    thread = threading.Thread(target=lambda: seen.append(list(stack.stack)))
    thread.start()
    thread.join()
    self.assertEqual(seen, [[]])
    self.assertEqual(stack.stack, ['main'])

  def test_timeit(self):
    with py_utils.timeit(min_elapsed=0.5) as period:
      self.assertIsNone(period.end)
    self.assertGreaterEqual(period.end, period.start)
    self.assertEqual(period.elapsed, 0.5)  # Clamped to min_elapsed.

  def test_benchmark_logs_first_n_calls(self):
    @py_utils.benchmark(prefix='[bm] ', first_n=2)
    def add(a, b):
      return a + b

    with self.assertLogs(level='INFO') as logs:
      results = [add(1, 2), add(3, 4), add(5, 6)]
    self.assertEqual(results, [3, 7, 11])
    messages = [r.getMessage() for r in logs.records]
    self.assertLen([m for m in messages if m.startswith('[bm] Elapsed')], 2)
    self.assertIn('add', messages[0])
    self.assertEqual(add.__name__, 'add')

  def test_sharded_file_pattern_to_glob(self):
    self.assertEqual(
        py_utils.sharded_file_pattern_to_glob('/d/f@12'), '/d/f-?????-of-00012'
    )
    self.assertEqual(
        py_utils.sharded_file_pattern_to_glob('/d/f@*'), '/d/f-?????-of-*'
    )
    self.assertEqual(py_utils.sharded_file_pattern_to_glob('/d/f'), '/d/f')
    with self.assertRaises(ValueError):
      py_utils.sharded_file_pattern_to_glob('a@1,b@2')

  def test_platform_flags(self):
    self.assertFalse(py_utils.pmap_use_tensorstore())
    self.assertEqual(py_utils.is_tpu(), jax.devices()[0].platform == 'tpu')


class DeviceHelpersTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    if jax.device_count() != 8:
      self.skipTest('needs the 8 virtual CPU devices set up by conftest.py')

  def test_create_device_mesh(self):
    mesh = py_utils.create_device_mesh([2, 4])
    self.assertEqual(mesh.shape, (2, 4))
    self.assertEqual(
        sorted(d.id for d in mesh.flat), sorted(d.id for d in jax.devices())
    )
    mesh = py_utils.create_device_mesh([1, 4], dcn_mesh_shape=[2, 1])
    self.assertEqual(mesh.shape, (2, 4))
    with self.assertRaisesRegex(ValueError, 'needs 6 devices'):
      py_utils.create_device_mesh([2, 3])

  def test_with_sharding_constraint(self):
    x = jnp.arange(32.0).reshape(8, 4)
    self.assertFalse(py_utils.global_mesh_defined())
    self.assertIs(py_utils.with_sharding_constraint(x, P('data')), x)
    mesh = jax.sharding.Mesh(py_utils.create_device_mesh([8]), ('data',))
    with jax.set_mesh(mesh):
      self.assertTrue(py_utils.global_mesh_defined())
      eager = py_utils.with_sharding_constraint(x, P('data', None))
      jitted = jax.jit(
          lambda v: py_utils.with_sharding_constraint(v, P('data', None))
      )(x)
      self.assertIs(py_utils.with_sharding_constraint(x, None), x)
    expected = jax.sharding.NamedSharding(mesh, P('data', None))
    for out in (eager, jitted):
      self.assertTrue(out.sharding.is_equivalent_to(expected, x.ndim))
      self.assertEqual(out.addressable_shards[1].data.shape, (1, 4))
      np.testing.assert_array_equal(out, x)

  def test_uneven_sharding_pad_and_slice(self):
    self.assertEqual(
        py_utils.get_uneven_sharding_paddings(
            P('a', None), [5, 3], [2, 4], ['a', 'b']
        ),
        [1, 0],
    )
    self.assertEqual(
        py_utils.get_uneven_sharding_paddings(
            P(('a', 'b')), [10], [2, 4], ['a', 'b']
        ),
        [6],
    )
    xs = NestedMap(w=jnp.ones((5, 3)))
    specs = NestedMap(w=P('a', None))
    shapes = NestedMap(w=(5, 3))
    padded = py_utils.maybe_pad_uneven_sharding(
        xs, specs, shapes, [2, 4], ['a', 'b']
    )
    self.assertEqual(padded.w.shape, (6, 3))
    np.testing.assert_array_equal(padded.w[5], [0.0, 0.0, 0.0])
    sliced = py_utils.maybe_slice_uneven_sharding(padded, specs, shapes)
    self.assertEqual(sliced.w.shape, (5, 3))

  def test_put_to_devices_and_make_array(self):
    host = np.arange(16).reshape(8, 2)
    pieces = py_utils.put_to_devices(host, jax.devices())
    self.assertLen(pieces, 8)
    self.assertEqual(pieces[3].devices(), {jax.devices()[3]})
    np.testing.assert_array_equal(pieces[3], [[6, 7]])
    with self.assertRaisesRegex(ValueError, 'Cannot split'):
      py_utils.put_to_devices(np.zeros((3, 2)), jax.devices())
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    arrays = py_utils.make_array(
        NestedMap(x=host),
        NestedMap(x=jax.ShapeDtypeStruct(host.shape, host.dtype)),
        mesh,
        pspecs=NestedMap(x=P('data')),
    )
    self.assertIsInstance(arrays, NestedMap)
    np.testing.assert_array_equal(arrays.x, host)
    self.assertEqual(arrays.x.sharding.spec, P('data'))
    with self.assertRaisesRegex(ValueError, 'exactly one'):
      py_utils.make_array(host, host, mesh)

  def test_reshard_unshard_unreplicate_and_sync(self):
    x = np.arange(48).reshape(16, 3)
    sharded = py_utils.reshard(x)
    self.assertEqual(sharded.shape, (8, 2, 3))
    np.testing.assert_array_equal(py_utils.unshard(sharded), x)
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    replicated = jax.device_put(
        jnp.arange(3), jax.sharding.NamedSharding(mesh, P())
    )
    first = py_utils.maybe_unreplicate_for_fully_replicated({'r': replicated})
    np.testing.assert_array_equal(first['r'], [0, 1, 2])
    self.assertLen(first['r'].devices(), 1)
    spec = py_utils.get_global_input_shape_dtype(np.zeros((4, 2), np.int8))
    self.assertEqual(spec, jax.ShapeDtypeStruct((4, 2), np.int8))
    py_utils.sync_global_devices('py_utils_test')  # One process: returns.

  def test_outer_batches(self):
    x = np.arange(24).reshape(6, 4)
    outer = py_utils.reshape_with_outer_batch_size(x, 3)
    self.assertEqual(outer.shape, (3, 2, 4))
    np.testing.assert_array_equal(outer[1, 0], x[2])
    np.testing.assert_array_equal(
        py_utils.combine_inner_and_outer_batches(outer), x)
    with self.assertRaisesRegex(ValueError, 'outer_bs=4 must divide .* 6'):
      py_utils.reshape_with_outer_batch_size(x, 4)

  def test_replicated_to_global_and_pmap_arrays(self):
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ('data',))
    value = np.arange(6.0).reshape(2, 3)
    replicated = jax.device_put(value, jax.sharding.NamedSharding(mesh, P()))
    # As a pmap input: one row per local device, each on its device.
    per_device = py_utils.convert_fully_replicated_array_to_pmap_array(
        replicated)
    self.assertEqual(per_device.shape, (8, 2, 3))
    for shard in per_device.addressable_shards:
      np.testing.assert_array_equal(shard.data[0], value)
    doubled = jax.pmap(lambda v: v * 2)(per_device)
    np.testing.assert_array_equal(doubled[5], value * 2)
    # Back to one global array, from a pmap output (a row per device) or a
    # replicated array.
    for arr in (doubled, replicated):
      global_array = py_utils.convert_host_local_array_to_global_array(arr)
      self.assertEqual(global_array.shape, (2, 3))
      self.assertTrue(global_array.sharding.is_fully_replicated)
      self.assertLen(global_array.devices(), 8)
      np.testing.assert_array_equal(
          global_array, value * (2 if arr is doubled else 1))

  def test_small_pax_helpers(self):
    py_utils.assert_same_shape_and_dtype(np.zeros((2, 3)), np.ones((2, 3)))
    with self.assertRaisesRegex(AssertionError, 'int32'):
      py_utils.assert_same_shape_and_dtype(np.zeros(2, np.float32),
                                           np.zeros(2, np.int32))
    self.assertFalse(py_utils.is_mock_tpu_backend())
    tree = NestedMap(a=NestedMap(b=1), c=[2, 3])
    self.assertEqual(
        py_utils.extract_keys(tree, 'x', '.', '(', ')', None),
        py_utils.extract_prefixed_keys_from_nested_map(
            tree, 'x', key_separator='.', left_separator='(',
            right_separator=')'))


if __name__ == '__main__':
  absltest.main()

"""Tests of praxis.base_input: the input contract of seed 003."""

import os
import pickle
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
import numpy as np

from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils

NestedMap = py_utils.NestedMap
instantiate = base_hyperparams.instantiate


def _config(num_examples, **kwargs):
  """An InMemoryInput config: example i has ids=i and x=[10 * i, 10 * i + 1]."""
  ids = np.arange(num_examples, dtype=np.int32)
  kwargs.setdefault(
      'data', {'ids': ids, 'x': np.stack([10 * ids, 10 * ids + 1], axis=1)}
  )
  return pax_fiddle.Config(base_input.InMemoryInput, **kwargs)


def _make(num_examples, **kwargs):
  return instantiate(_config(num_examples, **kwargs))


def _run_eval(inp):
  """One eval run as Pax does it: the seed 003 table, written out."""
  if inp.reset_for_eval:
    inp.reset()
    batches = []
    while True:
      try:
        batches.append(inp.get_next())
      except StopIteration:
        return batches
  return [inp.get_next() for _ in range(inp.eval_loop_num_batches)]


def _valid_ids(batches):
  ids = [b.ids[b.eval_sample_weights > 0] for b in batches]
  return np.concatenate(ids).tolist() if ids else []


class HelpersTest(test_utils.TestCase):

  def test_eval_batch_indices(self):
    # 5 examples, 2 hosts, batch 2: host 0 owns 0, 2, 4 and host 1 owns 1, 3;
    # ceil(5 / (2 * 2)) = 2 batches each.
    host0 = base_input.eval_batch_indices(5, 2, 2, 0)
    host1 = base_input.eval_batch_indices(5, 2, 2, 1)
    self.assertEqual([b.tolist() for b in host0], [[0, 2], [4]])
    self.assertEqual([b.tolist() for b in host1], [[1, 3], []])
    self.assertEqual(base_input.eval_num_batches(8, 2, 2), 2)
    self.assertEqual(base_input.eval_num_batches(9, 2, 2), 3)

  def test_pad_batch(self):
    batch = NestedMap(x=np.array([[1., 2.], [3., 4.]]), n=np.array([7, 8]))
    padded = base_input.pad_batch(batch, 3)
    self.assertArraysEqual(padded.x, np.array([[1., 2.], [3., 4.], [0., 0.]]))
    self.assertArraysEqual(padded.n, np.array([7, 8, 0]))
    self.assertArraysEqual(padded.eval_sample_weights, np.array([1., 1., 0.]))
    self.assertEqual(padded.eval_sample_weights.dtype, np.float32)
    # An empty batch becomes all padding; an existing weight is kept.
    empty = NestedMap(x=np.zeros([0, 2]), eval_sample_weights=np.zeros([0]))
    padded = base_input.pad_batch(empty, 2)
    self.assertArraysEqual(padded.eval_sample_weights, np.zeros([2]))
    with self.assertRaisesRegex(ValueError, 'at most batch_size=1'):
      base_input.pad_batch(batch, 1)


class ConfigTest(test_utils.TestCase):

  def test_defaults_and_legacy_hparams(self):
    p = base_input.InMemoryInput.HParams(
        batch_size=2, data={'ids': np.arange(4)}
    )
    self.assertIsInstance(p, pax_fiddle.Config)
    inp = p.Instantiate()
    self.assertEqual(inp.name, 'input')
    self.assertEqual(inp.num_infeed_hosts, jax.process_count())
    self.assertEqual(inp.infeed_host_index, jax.process_index())
    self.assertEqual(inp.eval_loop_num_batches, 1)
    self.assertFalse(inp.reset_for_eval)
    self.assertEqual(_make(4, batch_size=2, is_training=True).name, 'train')
    self.assertEqual(inp.hparams.batch_size, 2)

  def test_batch_sizes(self):
    p = _config(8, batch_size=3, num_infeed_hosts=2)
    self.assertEqual(base_input.InMemoryInput.get_batch_size(p), 3)
    self.assertEqual(base_input.InMemoryInput.get_global_batch_size(p), 6)
    p = _config(8, batch_size=3)  # num_infeed_hosts=0: the process count.
    self.assertEqual(
        base_input.InMemoryInput.get_global_batch_size(p),
        3 * jax.process_count(),
    )

  @parameterized.named_parameters(
      ('no_batch_size', {'name': 'ev'}, "InMemoryInput 'ev': batch_size"),
      ('bad_name', {'batch_size': 2, 'name': 'a b'}, "'a b': name="),
      (
          'host_index',
          {'batch_size': 2, 'num_infeed_hosts': 2, 'infeed_host_index': 2},
          'infeed_host_index=2',
      ),
      (
          'zero_batches',
          {'batch_size': 2, 'eval_loop_num_batches': 0},
          "'input': eval_loop_num_batches=0 must be",
      ),
      ('no_data', {'batch_size': 2, 'data': {}}, "'input': data={}"),
      (
          'ragged_data',
          {'batch_size': 2, 'data': {'a': np.zeros(3), 'b': np.zeros(4)}},
          "'input': data=.* one shared leading",
      ),
      (
          'too_few_examples',
          {
              'batch_size': 1,
              'is_training': True,
              'num_infeed_hosts': 8,
              'infeed_host_index': 6,
          },
          "'train': data=.* 8 hosts",
      ),
  )
  def test_config_errors_name_input_and_field(self, kwargs, message):
    kwargs = {'num_examples': 4} | kwargs
    num_examples = kwargs.pop('num_examples')
    p = _config(num_examples, **kwargs)
    with self.assertRaisesRegex(ValueError, message):
      instantiate(p)


class EvalContractTest(test_utils.TestCase):
  """One test per cell of the seed 003 eval table."""

  def test_static_n_without_reset_rolls_over_the_data(self):
    inp = _make(10, batch_size=2, eval_loop_num_batches=2)
    first, second, third = _run_eval(inp), _run_eval(inp), _run_eval(inp)
    self.assertLen(first, 2)
    # Non-overlapping consecutive batches; the data repeats (never raises).
    self.assertEqual(_valid_ids(first), [0, 1, 2, 3])
    self.assertEqual(_valid_ids(second), [4, 5, 6, 7])
    self.assertEqual(_valid_ids(third), [8, 9, 0, 1])
    self.assertArraysEqual(first[0].x, np.array([[0, 1], [10, 11]]))

  @parameterized.named_parameters(('default_n', 1), ('minus_one', -1),
                                  ('none', None))
  def test_dynamic_with_reset_reads_one_padded_epoch(self, n):
    # 5 examples, batch 2, 2 hosts: host 0 owns 0, 2, 4 and host 1 owns 1, 3;
    # both emit ceil(5 / 4) = 2 batches, then StopIteration.
    hosts = [
        _make(5, batch_size=2, num_infeed_hosts=2, infeed_host_index=h,
              reset_for_eval=True, eval_loop_num_batches=n)
        for h in range(2)
    ]
    for _ in range(2):  # Two eval runs: reset() restarts the epoch.
      runs = [_run_eval(inp) for inp in hosts]
      self.assertEqual([len(r) for r in runs], [2, 2])
      self.assertEqual(_valid_ids(runs[0]), [0, 2, 4])
      self.assertEqual(_valid_ids(runs[1]), [1, 3])
      self.assertArraysEqual(runs[0][1].eval_sample_weights, np.array([1., 0.]))
      self.assertArraysEqual(runs[1][1].eval_sample_weights, np.array([0., 0.]))
      self.assertArraysEqual(runs[0][1].x, np.array([[40, 41], [0, 0]]))
      self.assertArraysEqual(runs[1][1].ids, np.zeros([2], np.int32))
    with self.assertRaises(StopIteration):
      hosts[0].get_next()  # Stays exhausted until reset().

  def test_static_n_with_reset_is_rejected(self):
    with self.assertRaisesRegex(
        ValueError, "'input': eval_loop_num_batches=3 asks for the first N"):
      _make(8, batch_size=2, reset_for_eval=True, eval_loop_num_batches=3)

  @parameterized.named_parameters(('minus_one', -1), ('none', None))
  def test_dynamic_without_reset_is_rejected(self, n):
    with self.assertRaisesRegex(
        ValueError, 'eval_loop_num_batches=.* needs reset_for_eval=True'):
      _make(8, batch_size=2, eval_loop_num_batches=n)

  def test_training_input_must_not_reset(self):
    with self.assertRaisesRegex(
        ValueError, "InMemoryInput 'train': reset_for_eval=True .* training"):
      _make(8, batch_size=2, is_training=True, reset_for_eval=True)


class ShardingTest(test_utils.TestCase):

  @parameterized.named_parameters(('eval', False), ('train', True))
  def test_hosts_emit_disjoint_batches(self, is_training):
    # 12 examples, 2 hosts, batch 3: one epoch is 2 batches per host.
    ids = []
    for h in range(2):
      inp = _make(12, batch_size=3, num_infeed_hosts=2, infeed_host_index=h,
                  is_training=is_training, input_random_seed=5)
      ids.append(_valid_ids([inp.get_next() for _ in range(2)]))
    self.assertEmpty(set(ids[0]) & set(ids[1]))
    self.assertCountEqual(ids[0] + ids[1], range(12))

  def test_training_hosts_never_emit_identical_batches(self):
    hosts = [
        _make(10, batch_size=2, num_infeed_hosts=2, infeed_host_index=h,
              is_training=True, input_random_seed=7)
        for h in range(2)
    ]
    streams = [[tuple(inp.get_next().ids) for _ in range(10)]
               for inp in hosts]
    self.assertEmpty(set(streams[0]) & set(streams[1]))
    # Each epoch (5 examples, over 2.5 batches) is a permutation of the
    # host's examples, shuffled differently from one epoch to the next.
    flat = np.concatenate(streams[0]).reshape(-1, 5)
    for epoch in flat:
      self.assertCountEqual(epoch.tolist(), [0, 2, 4, 6, 8])
    self.assertGreater(len({tuple(e) for e in flat}), 1)

  def test_training_seed_is_deterministic(self):
    def stream(seed):
      inp = _make(10, batch_size=3, is_training=True, input_random_seed=seed)
      return np.stack([inp.get_next().ids for _ in range(6)])

    self.assertArraysEqual(stream(1), stream(1))
    self.assertNotAllClose(stream(1), stream(2))


class StateTest(test_utils.TestCase):

  @parameterized.named_parameters(('seeded', 3), ('unseeded', None))
  def test_set_state_resumes_the_exact_stream(self, seed):
    kwargs = {'batch_size': 3, 'is_training': True, 'input_random_seed': seed}
    original = _make(7, **kwargs)
    for _ in range(2):
      original.get_next()
    state = original.get_state()
    expected = [original.get_next().ids for _ in range(6)]  # Crosses epochs.
    resumed = _make(7, **kwargs)
    resumed.set_state(state)
    self.assertArraysEqual(
        np.stack([resumed.get_next().ids for _ in range(6)]),
        np.stack(expected),
    )

  def test_save_restore_and_peek(self):
    inp = _make(6, batch_size=2, eval_loop_num_batches=1)
    inp.get_next()
    peeked = inp.peek_padded()
    path = os.path.join(tempfile.mkdtemp(), 'input_state')
    inp.save(path)  # The state before the peeked batch.
    self.assertArraysEqual(inp.get_next_padded().ids, peeked.ids)
    self.assertArraysEqual(peeked.ids, np.array([2, 3]))
    other = _make(6, batch_size=2, eval_loop_num_batches=1)
    other.restore(path)
    self.assertArraysEqual(other.get_next().ids, np.array([2, 3]))
    with self.assertRaisesRegex(ValueError, 'cannot read state'):
      other.set_state(b'not json')

  def test_inputs_without_state_say_so(self):
    class Plain(base_input.BaseInput):

      def get_next(self):
        return NestedMap(x=np.zeros([self.batch_size]))

    inp = instantiate(pax_fiddle.Config(Plain, batch_size=2, name='plain'))
    with self.assertRaisesRegex(NotImplementedError,
                                "Plain 'plain' cannot be checkpointed"):
      inp.get_state()
    with self.assertRaisesRegex(NotImplementedError, 'cannot be checkpointed'):
      inp.set_state(b'')
    self.assertArraysEqual(inp.peek_padded().x, np.zeros([2]))
    with self.assertRaisesRegex(NotImplementedError, 'ids_to_strings'):
      inp.ids_to_strings(np.zeros([1, 2], np.int32), np.ones([1]))


class _Stream(base_input.BaseInput):
  """Batch k holds k; reads a generator, which pickle cannot copy."""

  def __post_init__(self):
    super().__post_init__()
    self._set_state_internal(b'0')

  def _batches(self, start):
    for k in range(start, 1000):
      yield NestedMap(ids=np.full([self.batch_size], k))

  def get_next(self):
    self._pos += 1
    return next(self._it)

  def _get_state_internal(self):
    return str(self._pos).encode()

  def _set_state_internal(self, state):
    self._pos = int(state)
    self._it = self._batches(self._pos)


class PickleAndPeekTest(test_utils.TestCase):

  def test_pickled_input_continues_the_stream(self):
    inp = instantiate(pax_fiddle.Config(_Stream, batch_size=2, name='eval'))
    self.assertArraysEqual(inp.get_next().ids, np.array([0, 0]))
    self.assertArraysEqual(inp.get_next().ids, np.array([1, 1]))
    copy = pickle.loads(pickle.dumps(inp))
    self.assertEqual((copy.name, copy.batch_size), ('eval', 2))
    self.assertArraysEqual(copy.get_next().ids, np.array([2, 2]))
    self.assertArraysEqual(inp.get_next().ids, np.array([2, 2]))
    # A peeked batch is read again by the copy.
    self.assertArraysEqual(inp.peek_padded().ids, np.array([3, 3]))
    copy = pickle.loads(pickle.dumps(inp))
    self.assertArraysEqual(copy.get_next_padded().ids, np.array([3, 3]))
    self.assertArraysEqual(copy.get_next_padded().ids, np.array([4, 4]))

  def test_get_state_after_peek_without_state(self):

    class Counter(base_input.BaseInput):
      count: int = 0

      def get_next(self):
        self.count += 1
        return NestedMap(x=np.full([self.batch_size], self.count))

    inp = instantiate(pax_fiddle.Config(Counter, batch_size=2))
    self.assertArraysEqual(inp.peek_padded().x, np.array([1, 1]))
    with self.assertRaisesRegex(ValueError, 'get_state.. after peek_padded'):
      inp.get_state()
    self.assertArraysEqual(inp.get_next_padded().x, np.array([1, 1]))
    self.assertArraysEqual(inp.get_next_padded().x, np.array([2, 2]))
    with self.assertRaisesRegex(NotImplementedError, 'cannot be checkpointed'):
      inp.get_state()

  def test_batch_size_must_be_set(self):
    with self.assertRaisesRegex(ValueError, r'specify self\.batch_size'):
      _make(4)


class _FakeShape(tuple):
  """A tf.TensorShape stand-in."""

  def is_fully_defined(self):
    return None not in self


class _FakeSpec:
  """A tf.TensorSpec stand-in: `shape` and `dtype.as_numpy_dtype`."""

  def __init__(self, shape, dtype):
    self.shape = _FakeShape(shape)
    self.dtype = type('DType', (), {'as_numpy_dtype': dtype})


class _WithDataset(base_input.InMemoryInput):
  """An InMemoryInput whose `dataset` carries a (fake) element spec."""

  spec_shape: tuple[int | None, ...] = (5, 3)

  def __post_init__(self):
    super().__post_init__()
    spec = {'ids': _FakeSpec(self.spec_shape, np.int64)}
    self.dataset = type('Dataset', (), {'element_spec': spec})()


class PaddingAndSpecsTest(test_utils.TestCase):

  def test_specs_from_a_dataset_element_spec(self):
    input_p = _config(8, batch_size=4).set(cls=_WithDataset)
    provider = instantiate(pax_fiddle.Config(
        base_input.DatasetInputSpecsProvider, input_p=input_p))
    self.assertEqual(provider.get_input_specs(),
                     {'ids': jax.ShapeDtypeStruct((5, 3), np.int64)})
    # A partly unknown shape: the first batch is read instead.
    provider = instantiate(pax_fiddle.Config(
        base_input.DatasetInputSpecsProvider,
        input_p=input_p.clone().set(spec_shape=(None, 3))))
    self.assertEqual(provider.get_input_specs().ids,
                     jax.ShapeDtypeStruct((4,), np.int32))

  def test_get_next_padded(self):
    inp = _make(6, batch_size=2, batch_padding_size=1)
    batch = inp.get_next_padded()
    self.assertArraysEqual(batch.ids, np.array([0, 1, 0]))
    self.assertArraysEqual(batch.eval_sample_weights, np.array([1., 1., 0.]))
    self.assertArraysEqual(batch.x, np.array([[0, 1], [10, 11], [0, 0]]))

  def test_dataset_input_specs_provider(self):
    provider = instantiate(
        pax_fiddle.Config(
            base_input.DatasetInputSpecsProvider,
            input_p=_config(8, batch_size=4, num_infeed_hosts=2,
                            batch_padding_size=2),
        )
    )
    specs = provider.get_input_specs()
    self.assertEqual(set(specs), {'ids', 'x', 'eval_sample_weights'})
    self.assertEqual(specs.ids, jax.ShapeDtypeStruct((6,), np.int32))
    self.assertEqual(specs.x, jax.ShapeDtypeStruct((6, 2), np.int32))
    self.assertEqual(specs.eval_sample_weights,
                     jax.ShapeDtypeStruct((6,), np.float32))


class MultiInputTest(test_utils.TestCase):

  def _multi(self, **kwargs):
    return pax_fiddle.Config(
        base_input.MultiInput,
        input_to_params={'a': _config(8, batch_size=2),
                         'b': _config(8, batch_size=4)},
        num_infeed_hosts=2,
        infeed_host_index=1,
        **kwargs,
    )

  def test_combines_children(self):
    p = self._multi(name='mix', default_input='a')
    self.assertEqual(base_input.MultiInput.get_batch_size(p), 2)  # gcd(2, 4)
    inp = instantiate(p)
    self.assertEqual(inp.get_child('b').name, 'mix_b')
    self.assertEqual(inp.get_child('b').infeed_host_index, 1)
    batch = inp.get_next()
    # Host 1 of 2 owns the odd examples; leaves are [outer=2, inner, ...].
    self.assertArraysEqual(batch.a.ids, np.array([[1], [3]]))
    self.assertArraysEqual(batch.b.ids, np.array([[1, 3], [5, 7]]))
    self.assertEqual(batch.b.x.shape, (2, 2, 2))
    state = inp.get_state()
    after = inp.get_next()
    inp.set_state(state)
    self.assertArraysEqual(inp.get_next().b.ids, after.b.ids)

  def test_errors(self):
    with self.assertRaisesRegex(ValueError, "MultiInput 'input': batch_size"):
      instantiate(self._multi(batch_size=2))
    with self.assertRaisesRegex(ValueError, 'reset_for_eval=True allows only'):
      instantiate(self._multi(reset_for_eval=True))
    with self.assertRaisesRegex(ValueError, 'default_input=.c. is not one'):
      instantiate(self._multi(default_input='c'))


class ReshardTest(test_utils.TestCase):

  def test_reshard_for_spmd(self):
    devices = np.asarray(jax.devices())
    mesh = jax.sharding.Mesh(devices, ('data',))
    n = devices.size
    host = NestedMap(x=np.arange(2 * n).reshape(n, 2))
    inp = _make(n, batch_size=n)
    out = inp.reshard_for_spmd(host, mesh, jax.sharding.PartitionSpec('data'))
    self.assertEqual(out.x.shape, (n * jax.process_count(), 2))
    self.assertArraysEqual(out.x, host.x)
    # custom_device_order: device order[i] holds row i.
    order = list(range(n))[::-1]
    inp = _make(n, batch_size=n, custom_device_order=order)
    out = inp.reshard_for_spmd(host, mesh, None)
    for shard in out.x.addressable_shards:
      row = order.index(list(devices).index(shard.device))
      self.assertArraysEqual(shard.data, host.x[row:row + 1])


if __name__ == '__main__':
  absltest.main()

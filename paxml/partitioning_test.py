"""Tests of the partitioner: SPMD sharding and data parallelism on 8 devices."""

import dataclasses
import threading

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import executors
from paxml import learners
from paxml import partitioning
from paxml import programs
from paxml import tasks_lib
from paxml import trainer_lib
from praxis import base_layer
from praxis import base_model
from praxis import optimizers
from praxis import pax_fiddle
from praxis import py_utils
from praxis import schedules
from praxis.layers import checkpoint_policy
from praxis.layers import linears
from praxis.layers import models
from praxis.layers import normalizations
from praxis.layers import transformer_models
from praxis.layers import transformers

NestedMap = py_utils.NestedMap
P = jax.sharding.PartitionSpec
_AXES = ('replica', 'data', 'mdl')


class MlpModel(base_model.BaseModel):
  """x -> BatchNorm -> Linear(8, 16) -> relu -> Linear(16, 4); MSE.

  Attributes:
    l1_sharding: weight_split_dims_mapping.wt of the first Linear.
    l2_sharding: weight_split_dims_mapping.wt of the second Linear.
  """

  l1_sharding: tuple[str | None, ...] | None = None
  l2_sharding: tuple[str | None, ...] | None = None

  def setup(self):
    self.create_child('bn', pax_fiddle.Config(
        normalizations.BatchNorm, dim=8, decay=0.5))
    l1 = pax_fiddle.Config(linears.Linear, input_dims=8, output_dims=16)
    l1.weight_split_dims_mapping.wt = self.l1_sharding
    l2 = pax_fiddle.Config(linears.Linear, input_dims=16, output_dims=4)
    l2.weight_split_dims_mapping.wt = self.l2_sharding
    self.create_child('l1', l1)
    self.create_child('l2', l2)

  def compute_predictions(self, input_batch):
    x = self.bn(input_batch.inputs)
    return self.l2(jax.nn.relu(self.l1(x)))

  def compute_loss(self, predictions, input_batch):
    mse = jnp.mean((predictions - input_batch.targets) ** 2)
    return NestedMap(loss=(mse, jnp.array(1.0))), NestedMap()


def _task(mesh_shape=None, train_fields=None, **model_fields):
  task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='t')
  model = pax_fiddle.Config(MlpModel, name='model',
                            params_init=base_layer.WeightInit.Gaussian(0.3),
                            **model_fields)
  if mesh_shape is not None:
    model.ici_mesh_shape = mesh_shape
    model.mesh_axis_names = _AXES
  task_p.model = model
  task_p.train.learner = pax_fiddle.Config(
      learners.Learner, loss_name='loss',
      optimizer=pax_fiddle.Config(
          optimizers.Adam, learning_rate=0.01,
          lr_schedule=pax_fiddle.Config(schedules.Constant)))
  for name, value in (train_fields or {}).items():
    setattr(task_p.train, name, value)
  task = base_layer.instantiate(task_p)
  return task


def _batches(n, batch=16, seed=0):
  rng = np.random.default_rng(seed)
  for _ in range(n):
    yield NestedMap(
        inputs=rng.normal(size=(batch, 8)).astype(np.float32) * 3 + 1,
        targets=rng.normal(size=(batch, 4)).astype(np.float32))


def _spec(batch):
  return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), batch)


def _partitioner(task, devices=None):
  """The task's partitioner on `devices` (shaped like its mesh), set up."""
  if task.model.ici_mesh_shape is None:
    partitioner = partitioning.PmapPartitioner(False, device_mesh=devices)
  else:
    partitioner = partitioning.PjitPartitioner(False, True, task,
                                               device_mesh=devices)
  partitioner.setup(task, jax.random.PRNGKey(0), _spec(next(_batches(1))))
  return partitioner


def _init(partitioner):
  return partitioner.initialize_prng_key_and_train_state(
      jax.random.PRNGKey(0), None, None)[1]


def _first_step_flops(partitioner, batch):
  """The train step's FLOP count (`CompiledStep.flops`) after one step."""
  step, specs = partitioner.partition(trainer_lib.train_step_single_learner,
                                      _spec(batch), False)
  step(_init(partitioner), jax.random.PRNGKey(0),
       partitioner.preprocess_inputs(None, batch, specs))
  return step.flops


def _train(task, devices, steps, host_batches=False):
  partitioner = _partitioner(task, devices)
  state = _init(partitioner)
  step, specs = partitioner.partition(trainer_lib.train_step_single_learner,
                                      _spec(next(_batches(1))), False)
  losses = []
  for i, batch in enumerate(_batches(steps)):
    if not host_batches:  # Global arrays placed beforehand.
      batch = jax.tree.map(
          lambda x, s: jax.device_put(
              x, jax.sharding.NamedSharding(partitioner.global_mesh, s)),
          batch, specs)
    state, out = step(state, jax.random.PRNGKey(i),
                      partitioner.preprocess_inputs(None, batch, specs))
    losses.append(float(out.loss))
  return state, losses


class SpmdTest(absltest.TestCase):

  def test_sharded_run_matches_one_device_and_weights_follow_annotations(self):
    task = _task([1, 2, 4], l1_sharding=('data', 'mdl'),
                 l2_sharding=('mdl', None))
    partitioner = partitioning.create_partitioner(task)
    self.assertIsInstance(partitioner, partitioning.PjitPartitioner)
    self.assertEqual(dict(partitioner.global_mesh.shape),
                     {'replica': 1, 'data': 2, 'mdl': 4})
    state, losses = _train(task, None, 10)

    one = np.array(jax.devices()[:1]).reshape(1, 1, 1)
    _, single_losses = _train(task, one, 10)
    rel = np.abs(np.array(losses) - single_losses) / np.abs(single_losses)
    self.assertLess(rel.max(), 1e-4)
    self.assertLess(losses[-1], losses[0])
    # Numpy batches, placed by the compiled step itself, train alike.
    _, host_losses = _train(task, None, 10, host_batches=True)
    np.testing.assert_array_equal(host_losses, losses)

    params = state.mdl_vars['params']
    self.assertEqual(params['l1']['w'].sharding.spec, P('data', 'mdl'))
    self.assertEqual(params['l2']['w'].sharding.spec, P('mdl', None))
    self.assertEqual(params['bn']['beta'].sharding.spec, P(None))
    # Adam's moments follow their weights.
    mu = [x for x in jax.tree.leaves(state.opt_states)
          if getattr(x, 'shape', None) == (8, 16)]
    self.assertNotEmpty(mu)
    for leaf in mu:
      self.assertEqual(leaf.sharding.spec, P('data', 'mdl'))


class StepVariantsTest(absltest.TestCase):

  def test_variant_reuses_the_trace_and_computes_the_same_step(self):
    # The loss-only variant (`trace_from` the summary variant) is compiled
    # from the summary variant's trace: the model is traced once, whichever
    # variant runs first, and both give the same new state and loss.
    task = _task([1, 2, 4], l1_sharding=('data', 'mdl'))
    partitioner = _partitioner(task)
    traces = []

    def counted_step(*args, **kwargs):
      traces.append(kwargs['static_args'])
      return trainer_lib.train_step_single_learner(*args, **kwargs)

    full = programs._TrainStepStaticArgs(16)
    lean = dataclasses.replace(full, with_summaries=False,
                               with_per_example_out=False, trace_from=full)
    batch = next(_batches(1))
    for first, second in ((lean, full), (full, lean)):
      traces.clear()
      step, specs = partitioner.partition(counted_step, _spec(batch), False)
      inputs = partitioner.preprocess_inputs(None, batch, specs)
      out = {}
      for static_args in (first, second):
        state = _init(partitioner)  # Each call donates its state.
        out[static_args] = step(state, jax.random.PRNGKey(1), inputs,
                                static_args)
      self.assertEqual(traces, [full])
      (lean_state, lean_out), (full_state, full_out) = out[lean], out[full]
      self.assertIsNone(lean_out.weighted_scalars)
      self.assertIsNone(lean_out.per_example_out)
      self.assertEqual(float(lean_out.loss), float(full_out.loss))
      self.assertIn('loss', full_out.weighted_scalars)
      jax.tree.map(np.testing.assert_array_equal,
                   jax.device_get(lean_state.mdl_vars),
                   jax.device_get(full_state.mdl_vars))
      self.assertEqual(lean_state.mdl_vars['params']['l1']['w'].sharding.spec,
                       P('data', 'mdl'))


class CompileAheadTest(absltest.TestCase):
  """`CompiledStep.compile_ahead`: the step compiled from shapes, elsewhere."""

  def setUp(self):
    super().setUp()
    self.task = _task([1, 2, 4], l1_sharding=('data', 'mdl'))
    self.partitioner = _partitioner(self.task)
    self.traces = []

  def _step(self):
    def counted_step(*args, **kwargs):
      self.traces.append(threading.current_thread().name)
      return trainer_lib.train_step_single_learner(*args, **kwargs)
    return self.partitioner.partition(counted_step, None, False)[0]

  def _run(self, step, batch):
    state, out = step(_init(self.partitioner), jax.random.PRNGKey(1), batch,
                      programs._TrainStepStaticArgs(len(batch.inputs)))
    return jax.device_get((state.mdl_vars, out.loss))

  def test_the_call_runs_what_was_compiled_ahead(self):
    batch = next(_batches(1))
    expected = self._run(self._step(), batch)
    self.traces.clear()
    step = self._step()
    step.compile_ahead(executors.abstract_train_state(self.partitioner),
                       jax.ShapeDtypeStruct((2,), jnp.uint32), _spec(batch),
                       programs._TrainStepStaticArgs(16))
    got = self._run(step, batch)
    self.assertEqual(self.traces, ['compile_ahead'])  # Traced there, once.
    jax.tree.map(np.testing.assert_array_equal, got, expected)

  def test_inputs_of_other_shapes_compile_at_the_call(self):
    step = self._step()
    step.compile_ahead(executors.abstract_train_state(self.partitioner),
                       jax.ShapeDtypeStruct((2,), jnp.uint32),
                       _spec(next(_batches(1, batch=16))),
                       programs._TrainStepStaticArgs(16))
    got = self._run(step, next(_batches(1, batch=8)))
    self.assertEqual(sorted(self.traces), ['MainThread', 'compile_ahead'])
    self.traces.clear()
    expected = self._run(self._step(), next(_batches(1, batch=8)))
    jax.tree.map(np.testing.assert_array_equal, got, expected)

  def test_an_error_compiling_ahead_is_raised_by_the_call(self):
    step = self._step()
    odd = next(_batches(1, batch=3))  # The data axis has 2 devices.
    step.compile_ahead(executors.abstract_train_state(self.partitioner),
                       jax.ShapeDtypeStruct((2,), jnp.uint32), _spec(odd),
                       programs._TrainStepStaticArgs(3))
    with self.assertRaisesRegex(ValueError, 'divisible|divide'):
      self._run(step, odd)


class DataParallelTest(absltest.TestCase):

  def test_batch_not_divisible_by_the_data_devices_is_named(self):
    task = _task(None)
    partitioner = _partitioner(task)
    state = _init(partitioner)
    step, _ = partitioner.partition(trainer_lib.train_step_single_learner,
                                    None, False)
    batch = next(_batches(1, batch=12))
    with self.assertRaisesRegex(
        ValueError, r"shape \(12, 8\) has a dim of 12, not divisible by the "
        r"8 devices of mesh axes \('data',\)"):
      step(state, jax.random.PRNGKey(0),
           partitioner.preprocess_inputs(None, batch, None))

  def test_pmap_style_matches_one_device_and_syncs_batch_norm(self):
    task = _task(None)  # No mesh on the model: data parallel on 8 devices.
    partitioner = partitioning.create_partitioner(task)
    self.assertIsInstance(partitioner, partitioning.PmapPartitioner)
    self.assertEqual(partitioner.global_mesh.devices.size, 8)
    state, losses = _train(task, None, 4)
    _, single = _train(task, np.array(jax.devices()[:1]), 4)
    np.testing.assert_allclose(losses, single, rtol=1e-5)

    # After step 1 the moving mean is 0.5 * 0 + 0.5 * (mean of the global
    # batch), not of one device's shard; after 4 steps, the recursion.
    expected = np.zeros(8)
    for batch in _batches(4):
      expected = 0.5 * expected + 0.5 * batch.inputs.mean(axis=0)
    moving = np.asarray(state.mdl_vars['non_trainable']['bn']['moving_mean'])
    np.testing.assert_allclose(moving, expected, rtol=1e-5, atol=1e-6)

  def test_flops_count_the_whole_step_on_any_number_of_devices(self):
    # MFU divides the step's FLOPs by the peak of all the devices, so the
    # count must be of the whole step, not of one device's share of it.
    task = _task(None)
    counts = [_first_step_flops(_partitioner(task, devices), next(_batches(1)))
              for devices in (None, np.array(jax.devices()[:1]))]  # 8, 1.
    # Forward: [16, 8] x [8, 16] and [16, 16] x [16, 4]; the backward's two
    # products per matmul (weights, inputs) double it.
    matmuls = 3 * 2 * 16 * (8 * 16 + 16 * 4)
    self.assertGreater(counts[1], matmuls)
    self.assertAlmostEqual(counts[0] / counts[1], 1.0, delta=0.02)


class FlopsTest(absltest.TestCase):

  def test_repeated_layers_count_as_the_same_layers_unrolled(self):
    # XLA counts a loop's body once; the step's count adds the other
    # iterations, so a scanned stack counts as the unrolled one.
    def lm_task(repeated):
      stack = pax_fiddle.Config(
          transformers.StackedTransformer, model_dims=16, hidden_dims=32,
          num_heads=2, num_layers=1 if repeated else 4,
          mask_self_attention=True)
      if repeated:
        stack = pax_fiddle.Config(  # Keeping all: no forward recomputed.
            transformers.StackedTransformerRepeated, block=stack, x_times=4,
            checkpoint_policy=checkpoint_policy.AutodiffCheckpointType
            .SAVE_EVERYTHING)
      task_p = pax_fiddle.Config(tasks_lib.SingleTask, name='t')
      task_p.model = pax_fiddle.Config(
          models.LanguageModel, name='lm', lm_tpl=pax_fiddle.Config(
              transformer_models.TransformerLm, model_dims=16, vocab_size=32,
              stacked_transformer_tpl=stack))
      task_p.train.learner = pax_fiddle.Config(
          learners.Learner, loss_name='total_loss',
          optimizer=pax_fiddle.Config(
              optimizers.Sgd, lr_schedule=pax_fiddle.Config(
                  schedules.Constant)))
      return base_layer.instantiate(task_p)

    ids = np.arange(64, dtype=np.int32).reshape(8, 8) % 32
    batch = NestedMap(ids=ids, labels=ids, weights=np.ones((8, 8), np.float32),
                      paddings=np.zeros((8, 8), np.float32))
    counts = []
    for repeated in (False, True):
      task = lm_task(repeated)
      partitioner = partitioning.PmapPartitioner(False)
      partitioner.setup(task, jax.random.PRNGKey(0), _spec(batch))
      counts.append(_first_step_flops(partitioner, batch))
    # A layer's matmuls alone: 8 x 8 tokens x (4 projections of 16 x 16 +
    # 2 of 16 x 32) x 2 FLOPs, x 3 with the backward, x 4 layers.
    self.assertGreater(counts[0], 4 * 3 * 2 * 64 * (4 * 256 + 2 * 512))
    self.assertAlmostEqual(counts[1] / counts[0], 1.0, delta=0.05)


class LmCloudSpmdMeshTest(absltest.TestCase):
  """Pax's LmCloudSpmdTest LM on a [1, 2, 4] mesh against one device."""

  def test_first_ten_losses_match_one_device_and_shardings_follow_specs(self):
    from paxml import experiment_registry  # pylint: disable=g-import-not-at-top
    from paxml.tasks.lm.params import lm_cloud  # pylint: disable=g-import-not-at-top

    class Exp(lm_cloud.LmCloudSpmdTest):
      ICI_MESH_SHAPE = (1, 2, 4)
      PERCORE_BATCH_SIZE = 1  # Global batch 8.
      MAX_SEQ_LEN = 32
      VOCAB_SIZE = 128
      ENABLE_BFLOAT16 = False  # Compare in float32: bf16 rounds per layout.
      FPROP_DTYPE = jnp.float32

    del experiment_registry
    exp = Exp()
    task = base_layer.instantiate(exp.task())
    inp = base_layer.instantiate(exp.training_dataset())
    batches = [inp.get_next() for _ in range(10)]
    spec = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype),
                        batches[0])

    def run(devices):
      partitioner = partitioning.PjitPartitioner(False, True, task,
                                                 device_mesh=devices)
      partitioner.setup(task, None, spec)
      state = _init(partitioner)
      step, specs = partitioner.partition(
          trainer_lib.train_step_single_learner, spec, False)
      losses = []
      for i, batch in enumerate(batches):
        state, out = step(state, jax.random.PRNGKey(i),
                          partitioner.preprocess_inputs(None, batch, specs))
        losses.append(float(out.loss))
      return partitioner, state, np.array(losses)

    partitioner, state, losses = run(None)
    self.assertEqual(dict(partitioner.global_mesh.shape),
                     {'replica': 1, 'data': 2, 'mdl': 4})
    _, _, single = run(np.array(jax.devices()[:1]).reshape(1, 1, 1))
    self.assertLess(np.max(np.abs(losses - single) / np.abs(single)), 1e-4)
    self.assertLess(losses[-1], losses[0])

    # Every weight sits on the mesh as its annotation says, and some are
    # really split (the model is not just replicated).
    specs = partitioner.get_train_state_metadata().partition_specs.mdl_vars
    flat_specs = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))
    flat_vars = jax.tree.leaves(state.mdl_vars)
    self.assertLen(flat_vars, len(flat_specs))
    for var, want in zip(flat_vars, flat_specs):
      self.assertEqual(var.sharding.spec, want)
    self.assertTrue(any('mdl' in str(s) for s in flat_specs))


class PaxProtocolTest(absltest.TestCase):

  def test_filter_nestedmap_keeps_the_partial_structure_and_types(self):
    full = NestedMap(a=1, b={'c': [P('x'), {'d': 2, 'e': 3}], 'f': 4})
    got = partitioning.filter_nestedmap(full, {'b': {'c': [0, {'e': 0}]}})
    self.assertIsInstance(got, NestedMap)
    self.assertIsInstance(got['b'], dict)
    self.assertEqual(got, {'b': {'c': [P('x'), {'e': 3}]}})
    with self.assertRaisesRegex(ValueError, 'list of 2 items'):
      partitioning.filter_nestedmap([1, 2], [0])

  def test_get_step_fn_names_the_step_of_each_mode(self):
    mode = trainer_lib.RunningMode
    self.assertEqual(partitioning.get_step_fn(mode.TRAIN),
                     (trainer_lib.train_step_single_learner, False))
    self.assertEqual(partitioning.get_step_fn(mode.EVAL),
                     (trainer_lib.eval_step_single_learner, True))
    self.assertEqual(partitioning.get_step_fn(mode.DECODE),
                     (trainer_lib.decode_step_for_partitioner, True))
    with self.assertRaisesRegex(ValueError, 'exactly one'):
      partitioning.get_step_fn(mode.TRAIN | mode.EVAL)

  def test_eval_step_takes_the_eval_state_and_matches_numpy(self):
    task = _task(None)
    partitioner = _partitioner(task)
    metadata = partitioner.get_train_state_metadata(discard_opt_states=True)
    self.assertEqual(metadata.partition_specs.opt_states, [])
    self.assertNotEmpty(
        partitioner.get_train_state_metadata().partition_specs.opt_states)
    root = jax.random.PRNGKey(3)
    key, state, provenance = partitioner.initialize_prng_key_and_train_state(
        root, None, None)
    np.testing.assert_array_equal(key, jax.random.split(root)[0])
    self.assertEqual(repr(provenance.mdl_vars['params']['l1']['w']),
                     '"(random_init)"')
    # A restored state is kept, with no provenance.
    _, same, none = partitioner.initialize_prng_key_and_train_state(
        root, state, None)
    self.assertIs(same, state)
    self.assertIsNone(none)

    batch = next(_batches(1))
    step, specs = partitioner.partition(trainer_lib.eval_step_single_learner,
                                        _spec(batch), True)
    self.assertEqual(specs.inputs, P(('data',), None))
    new_state, out = step(state.to_eval_state(), key,
                          partitioner.preprocess_inputs(None, batch, specs),
                          trainer_lib.BaseStepFnStaticArgs(16))
    self.assertIsNone(new_state)
    # Eval mode: BatchNorm normalises with its moving stats (0 mean, 1 var).
    p = jax.tree.map(np.asarray, state.mdl_vars['params'])
    x = batch.inputs / np.sqrt(1 + 1e-3) * (1 + p['bn']['gamma'])
    x = x + p['bn']['beta']
    h = np.maximum(x @ p['l1']['w'], 0)
    mse = np.mean((h @ p['l2']['w'] - batch.targets) ** 2)
    np.testing.assert_allclose(float(out.loss), mse, rtol=1e-4)

  def test_check_input_spec_names_a_mismatch(self):
    partitioner = _partitioner(_task(None))
    batch = next(_batches(1, batch=4))
    partitioner.check_input_spec(batch)  # Batch sizes may differ.
    batch.inputs = batch.inputs[:, :3]
    with self.assertRaisesRegex(ValueError, 'does not match the input specs'):
      partitioner.check_input_spec(batch)


if __name__ == '__main__':
  absltest.main()

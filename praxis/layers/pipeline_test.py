"""Tests of praxis.layers.pipeline: pipelines against the plain layer stack.

Each pipeline runs on a 'stage' mesh axis of the 8 virtual CPU devices and
must give the outputs, loss, gradients, auxiliary losses, summaries and
variable updates of the same layers applied one after another (a jnp loop
written here), with the stacked variables laid out as documented.
"""

from absl.testing import absltest
from absl.testing import parameterized
import jax
import jax.numpy as jnp
import numpy as np

from praxis import base_layer
from praxis import pax_fiddle
from praxis import test_utils
from praxis.layers import pipeline
from praxis.layers import transformers

PartitionSpec = jax.sharding.PartitionSpec
AUX_LOSS = base_layer.AUX_LOSS
SUMMARIES = base_layer.SUMMARIES
NON_TRAINABLE = base_layer.NON_TRAINABLE
AXES = ('stage', 'replica', 'data', 'mdl')
DIM, BATCH = 4, 16
instantiate = base_layer.instantiate


class TanhLayer(base_layer.BaseLayer):
  """tanh(x @ w + b), zeroed at padded rows; counts its calls.

  Adds sum(w) as an auxiliary loss and mean(x) as a summary.
  """

  dim: int = DIM

  def setup(self):
    self.create_variable('w', base_layer.WeightHParams(shape=[self.dim] * 2))
    self.create_variable('b', base_layer.WeightHParams(shape=[self.dim]))
    self.create_variable(
        'calls',
        base_layer.WeightHParams(shape=[], init=base_layer.WeightInit.Constant(
            0.0)),
        trainable=False,
    )

  def __call__(self, x, paddings):
    self.add_aux_loss('w_sum', jnp.sum(self.theta.w))
    self.add_summary('x_mean', jnp.mean(x))
    self.update_var('calls', self.get_var('calls') + 1.0)
    return jnp.tanh(x @ self.theta.w + self.theta.b) * (1.0 - paddings)[:, None]


def ref_layers(ws, bs, x, paddings):
  """The inputs of each layer and the final output, layer after layer."""
  inputs = []
  for w, b in zip(ws, bs):
    inputs.append(x)
    x = jnp.tanh(x @ w + b) * (1.0 - paddings)[:, None]
  return inputs, x


def stage_mesh(num_stages):
  devices = np.array(jax.devices()[:num_stages]).reshape(num_stages, 1, 1, 1)
  return jax.sharding.Mesh(devices, AXES)


def pipeline_config(num_stages, cls=pipeline.LayerwiseShardablePipelined,
                    **kwargs):
  cfg = pax_fiddle.Config(
      cls, name='pipe', num_stages=num_stages,
      single_stage_body=pax_fiddle.Config(TanhLayer),
      ici_mesh_shape=[num_stages, 1, 1, 1], mesh_axis_names=AXES, **kwargs)
  cfg.weight_split_dims_mapping.stages = ['stage']
  return cfg


def random_variables(rng, layer, *inputs, scale=0.5):
  """Random variables of `layer` (counters at zero) and their metadata."""
  meta = layer.abstract_init_with_metadata(*inputs)
  variables = jax.tree.map(
      lambda hp: (scale * rng.standard_normal(hp.full_shape)).astype(
          np.float32),
      meta, is_leaf=lambda v: isinstance(v, base_layer.WeightHParams))
  if NON_TRAINABLE in variables:
    variables[NON_TRAINABLE] = jax.tree.map(np.zeros_like,
                                            variables[NON_TRAINABLE])
  return variables, meta


def place(mesh, variables, meta):
  """`variables` put on the mesh as their metadata shards them."""
  specs = base_layer.var_partition_specs(meta, list(mesh.shape.values()),
                                         AXES)
  return jax.tree.map(
      lambda v, s: jax.device_put(v, jax.sharding.NamedSharding(mesh, s)),
      variables, specs)


class PipelineTest(test_utils.TestCase):

  def setUp(self):
    super().setUp()
    self.x = self.np_rng.standard_normal((BATCH, DIM)).astype(np.float32)
    self.paddings = (self.np_rng.random(BATCH) < 0.25).astype(np.float32)
    self.target = self.np_rng.standard_normal((BATCH, DIM)).astype(np.float32)

  @parameterized.named_parameters(
      ('gpipe_nan_bubbles', 4, 1, False, 8,
       {'num_microbatches': 8, 'polluting_bubbles_with_nan': True}),
      ('circular_stream_io', 2, 2, False, 4,
       {'microbatch_size': 4, 'stream_io': True,
        'pipeline_broadcast_inputs': True}),
      ('circular_shared', 2, 2, True, 8, {'num_microbatches': 8}),
  )
  def test_matches_layers_in_sequence(self, stages, repeat, share, m, kwargs):
    if repeat > 1:
      cfg = pipeline_config(
          stages, pipeline.CircularLayerwiseShardablePipelined,
          circular_repeat=repeat, share_weights=share, **kwargs)
    else:
      cfg = pipeline_config(stages, **kwargs)
    layer = instantiate(cfg)
    mesh = stage_mesh(stages)
    x, paddings, target = self.x, self.paddings, self.target
    variables, meta = random_variables(self.np_rng, layer, x, paddings)
    # Stacked as documented: [L, ...], or [R, L, ...] for circular layers.
    prefix = (stages,) if repeat == 1 or share else (repeat, stages)
    self.assertEqual(variables['params']['body']['w'].shape,
                     prefix + (DIM, DIM))
    num_layers = stages * repeat

    def in_layer_order(v):  # Layer r * L + s is stage s's layer r.
      if share:
        return jnp.concatenate([v] * repeat)
      return v.reshape((num_layers,) + v.shape[len(prefix):])

    def loss(params, non_trainable):
      y, updated = layer.apply(
          {'params': params, NON_TRAINABLE: non_trainable}, x, paddings,
          mutable=[AUX_LOSS, SUMMARIES, NON_TRAINABLE])
      return jnp.sum(y * target), (y, updated)

    def ref_loss(params):
      ws, bs = (in_layer_order(params['body'][k]) for k in ('w', 'b'))
      inputs, y = ref_layers(ws, bs, x, paddings)
      return jnp.sum(y * target), (y, inputs)

    with jax.set_mesh(mesh):
      placed = place(mesh, variables, meta)
      step = jax.jit(jax.value_and_grad(loss, has_aux=True)).lower(
          placed['params'], placed[NON_TRAINABLE]).compile()
      (value, (y, updated)), grads = step(placed['params'],
                                          placed[NON_TRAINABLE])
    self.assertIn('collective-permute', step.as_text())
    (ref_value, (ref_y, ref_inputs)), ref_grads = jax.jit(jax.value_and_grad(
        ref_loss, has_aux=True))(variables['params'])
    self.assertAllClose(y, ref_y, atol=1e-5)
    self.assertAllClose(value, ref_value, atol=1e-4)
    self.assertAllClose(grads, ref_grads, atol=1e-5)
    # Auxiliary losses: each layer's, averaged over the microbatches.
    aux = updated[AUX_LOSS]['body']['w_sum']
    ref_ws = in_layer_order(variables['params']['body']['w'])
    self.assertAllClose(aux.value, np.sum(ref_ws), atol=1e-4)
    self.assertAllClose(aux.weight, float(num_layers))
    # Summaries: the mean input of each layer (or stage, when shared).
    means = np.array([np.mean(h) for h in ref_inputs])
    summaries = updated[SUMMARIES]['body']
    for s in range(stages):
      if repeat == 1 or share:
        expected = np.mean(means[s::stages])
        got = summaries[f'x_mean.stage{s}_scalar']
        self.assertAllClose(got, expected, atol=1e-5)
      else:
        for r in range(repeat):
          got = summaries[f'x_mean.circular_layer{r}.stage{s}_scalar']
          self.assertAllClose(got, means[r * stages + s], atol=1e-5)
    # Each layer ran once per microbatch; the bubbles' updates are undone.
    calls = updated[NON_TRAINABLE]['body']['calls']
    self.assertArraysEqual(calls, np.full(prefix, m * (repeat if share else 1),
                                          np.float32))

  def test_metadata_shards_the_stage_dim(self):
    x, paddings = self.x, self.paddings
    gpipe = instantiate(pipeline_config(4, num_microbatches=8))
    w = gpipe.abstract_init_with_metadata(x, paddings)['params']['body']['w']
    self.assertEqual(w.repeat_prefix, [4])
    self.assertEqual(tuple(w.repeat_prefix_split_dims_mapping), ('stage',))
    circular = instantiate(pipeline_config(
        2, pipeline.CircularLayerwiseShardablePipelined, circular_repeat=3,
        num_microbatches=4))
    meta = circular.abstract_init_with_metadata(x, paddings)
    w = meta['params']['body']['w']
    self.assertEqual(w.repeat_prefix, [3, 2])
    self.assertEqual(w.full_shape, [3, 2, DIM, DIM])
    specs = base_layer.var_partition_specs(meta, [2, 1, 1, 1], AXES)
    self.assertEqual(specs['params']['body']['w'],
                     PartitionSpec(None, 'stage', None, None))

  def test_bad_configs_name_the_layer_and_field(self):
    x, paddings = self.x, self.paddings
    cases = [
        (pipeline_config(4, num_microbatches=3), 'pipe.*num_microbatches 3'),
        (pipeline_config(4, microbatch_size=5), 'pipe.*microbatch_size 5'),
        (pipeline_config(4, num_microbatches=2, microbatch_size=8),
         'pipe.*num_microbatches or microbatch_size'),
        (pipeline_config(4, num_microbatches=2, stream_io=True),
         'pipe.*stream_io.*num_stages'),
        (pipeline_config(4, pipeline.CircularLayerwiseShardablePipelined,
                         circular_repeat=2, num_microbatches=2),
         'pipe.*num_microbatches \\(2\\) >= num_stages'),
        (pipeline_config(0), 'pipe.*num_stages must be positive'),
    ]
    for cfg, message in cases:
      with self.assertRaisesRegex(ValueError, message):
        instantiate(cfg).init(jax.random.PRNGKey(0), x, paddings)
    with self.assertRaisesRegex(NotImplementedError,
                                'pipe.*collect_intermediate_outputs'):
      instantiate(pipeline_config(
          4, num_microbatches=4, collect_intermediate_outputs=True)).init(
              jax.random.PRNGKey(0), x, paddings)
    with self.assertRaisesRegex(ValueError, 'xformer: num_layers 6 .* 4'):
      pipeline.num_layers_per_stage(6, 4, name='xformer')
    self.assertEqual(pipeline.num_layers_per_stage(12, 2, 3), 2)
    bad = pax_fiddle.Config(transformers.PipelinedTransformer, name='pt')
    with self.assertRaisesRegex(ValueError, 'pt.*num_pipeline_stages'):
      instantiate(bad).init(jax.random.PRNGKey(0), x[:, None],
                            paddings[:, None])


class PipelinedTransformerTest(test_utils.TestCase):

  def test_matches_stacked_transformer(self):
    stages, b, t, d = 4, 8, 3, 8
    stage_p = pax_fiddle.Config(
        transformers.StackedTransformer, num_layers=1, model_dims=d,
        hidden_dims=16, num_heads=2, mask_self_attention=True)
    cfg = pax_fiddle.Config(
        transformers.PipelinedTransformer, name='xformer',
        pipeline_stage=stage_p, num_pipeline_stages=stages,
        num_pipeline_microbatches=4, ici_mesh_shape=[stages, 1, 1, 1],
        mesh_axis_names=AXES)
    cfg.weight_split_dims_mapping.stages = ['stage']
    pipelined = instantiate(cfg)
    stacked = instantiate(stage_p.clone().set(name='stack', num_layers=stages))
    x = self.np_rng.standard_normal((b, t, d)).astype(np.float32)
    paddings = np.zeros((b, t), np.float32)
    paddings[:3, -1] = 1.0
    variables, meta = random_variables(self.np_rng, pipelined, x, paddings,
                                       scale=0.2)
    stacked_params = {
        f'x_layers_{i}': jax.tree.map(
            lambda v, i=i: v[i],
            variables['params']['pipeline']['body']['x_layers_0'])
        for i in range(stages)
    }

    mesh = stage_mesh(stages)
    with jax.set_mesh(mesh):
      y = jax.jit(pipelined.apply)(place(mesh, variables, meta), x, paddings)
    ref_y = jax.jit(stacked.apply)({'params': stacked_params}, x, paddings)
    self.assertAllClose(y, ref_y, atol=1e-5)
    # The repeated stack with the pipeline's layout runs on its variables.
    compatible = instantiate(pax_fiddle.Config(
        transformers.PipelineCompatibleStackedTransformerRepeated,
        name='xformer', block=stage_p, x_times=stages))
    self.assertAllClose(jax.jit(compatible.apply)(variables, x, paddings),
                        ref_y, atol=1e-5)


if __name__ == '__main__':
  absltest.main()

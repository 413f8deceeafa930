"""Tests of NVIDIA's recipes: sizes, layer choices, and tiny CPU runs."""

import math
import pathlib
import tempfile

from absl.testing import absltest
from absl.testing import parameterized
import jax
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.lm.params import nvidia
from praxis import base_hyperparams
from praxis import base_layer
from praxis.layers import grouped_query_attention
from praxis.layers import normalizations

instantiate = base_hyperparams.instantiate

_RECIPES = [n for n in nvidia.__all__ if isinstance(getattr(nvidia, n), type)]


def _variables(exp):
  task = instantiate(exp.task())
  specs = instantiate(exp.get_input_specs_provider_params()).get_input_specs()
  return task.model.abstract_init_with_metadata(specs)


def _count(variables) -> int:
  leaves = jax.tree_util.tree_leaves(
      variables, is_leaf=lambda x: isinstance(x, base_layer.WeightHParams))
  return sum(math.prod(w.full_shape) for w in leaves)


class RecipesTest(parameterized.TestCase):

  def test_every_recipe_is_registered_under_paxs_name(self):
    self.assertLen(_RECIPES, 23)
    for name in _RECIPES:
      task_p = getattr(nvidia, name)().task()  # Full size (configs only).
      if name == 'GLaM64B64EProxy':  # As in Pax, not registered.
        self.assertNotIn(
            nvidia.GLaM64B64EProxy,
            experiment_registry._ExperimentRegistryHelper._registry.values())
        continue
      cls = experiment_registry.get(f'tasks.lm.params.nvidia.{name}')
      self.assertIs(cls, getattr(nvidia, name))
      optimizer = task_p.train.learner.optimizer
      self.assertEqual(optimizer.learning_rate,
                       1.6e-4 if name == 'NVIDIA_CIRCULAR_REPEAT' else 6e-4)
      if name == 'NVIDIA_CIRCULAR_REPEAT':
        continue
      self.assertEqual(task_p.train.learner.loss_name, 'total_loss')

  @parameterized.parameters(
      # (recipe, weights of its matrices by hand, from its attributes)
      # GPT: per layer the fused QKV and output projections (4 D^2) and the
      # feed-forward (2 D F); the 2048 x D position embedding; the softmax.
      ('NVIDIA1_3B', 24 * (4 * 2048**2 + 2 * 2048 * 8192)
       + (2048 + 51200) * 2048),
      # Llama 2: q, o of D x N H; k, v of D x K H; 3 D F (SwiGLU); RoPE.
      ('Llama2_7B', 32 * (2 * 4096 * 4096 + 2 * 4096 * 32 * 128
                          + 3 * 4096 * 11008) + 51200 * 4096),
      ('Llama2_70B', 80 * (2 * 8192 * 8192 + 2 * 8192 * 8 * 128
                           + 3 * 8192 * 28672) + 51200 * 8192),
  )
  def test_weight_matrices_have_the_announced_sizes(self, name, by_hand):
    variables = _variables(getattr(nvidia, name)())
    leaves = jax.tree_util.tree_leaves_with_path(
        variables, is_leaf=lambda x: isinstance(x, base_layer.WeightHParams))
    # Matrices only ('w', embedding tables): biases and norms are < 0.1%.
    count = sum(math.prod(w.full_shape) for path, w in leaves
                if jax.tree_util.keystr(path[-1:]) in ("['w']", "['emb_var']"))
    self.assertEqual(count, by_hand)

  def test_llama_layers(self):
    task_p = nvidia.Llama2_70B().task()
    layer_p = nvidia._layer(task_p)
    atten_p = layer_p.tr_atten_tpl
    self.assertIs(atten_p.cls, grouped_query_attention.GroupedQueryAttention)
    self.assertEqual(atten_p.num_kv_heads, 8)
    self.assertEqual(tuple(atten_p.rope_min_max_timescales), (1, 10000))
    self.assertIsNone(task_p.model.lm_tpl.position_emb_tpl)
    for ln in (layer_p.ln_tpl, layer_p.tr_fflayer_tpl.ln_tpl,
               task_p.model.lm_tpl.final_ln_tpl):
      self.assertIs(ln.cls, normalizations.RmsNorm)
    self.assertTrue(layer_p.tr_fflayer_tpl.use_gated_activation)

  def test_shrunk_is_tiny_and_keeps_the_recipe(self):
    tiny = nvidia.shrunk(nvidia.NVIDIA5B)
    self.assertEqual(tiny.__name__, 'NVIDIA5BTiny')
    self.assertTrue(issubclass(tiny, nvidia.NVIDIA5B))
    self.assertEqual(tiny.ICI_MESH_SHAPE, [2, 1, 1, 1])
    self.assertEqual((tiny.NUM_STAGES, tiny.NUM_LAYERS), (2, 2))
    count = _count(_variables(nvidia.shrunk(nvidia.Llama2_7B)()))
    d, f, n, k, h, v = 64, 128, 4, 2, 16, 128
    weights = 2 * d * n * h + 2 * d * k * h + 3 * d * f
    biases = (n * h + 2 * k * h + d) + (2 * f + d)  # Attention, feed-forward.
    norms = 2 * d  # Two RMSNorm scales per layer.
    self.assertEqual(count, 2 * (weights + biases + norms) + d + v * d + v)


class MoERecipesTest(parameterized.TestCase):
  """GLaM and Grok: meshes with a data_expert axis, their weights by hand."""

  @parameterized.parameters(
      ('GLaM64B64EProxy', ['replica', 'data', 'mdl'], [1, 128, 1]),
      ('GLaM64B64EProxy_EP', ['replica', 'data', 'data_expert', 'mdl'],
       [1, 16, 8, 1]),
      ('Grok', ['replica', 'data', 'data_expert', 'mdl'], [1, 1, 8, 1]),
      ('Grok_PP', ['stage', 'replica', 'data', 'data_expert', 'mdl'],
       [1, 1, 1, 8, 1]),
  )
  def test_meshes(self, name, axes, ici):
    task_p = getattr(nvidia, name)().task()
    self.assertEqual(task_p.model.mesh_axis_names, axes)
    self.assertEqual(task_p.model.ici_mesh_shape, ici)
    batch = tuple(a for a in axes if a != 'mdl')
    self.assertEqual(task_p.train.inputs_split_mapping.map_1d, (batch,))

  def test_grok_layers(self):
    task_p = nvidia.Grok_PP().task()
    self.assertEqual(
        task_p.model.lm_tpl.stacked_transformer_tpl.num_pipeline_stages, 8)
    atten_p = nvidia._layer(task_p).tr_atten_tpl
    self.assertTrue(atten_p.use_rotary_position_emb)
    self.assertEqual(atten_p.num_kv_heads, 8)
    self.assertIsNone(task_p.model.lm_tpl.position_emb_tpl)

  def test_shrunk_glam_weights(self):
    variables = _variables(nvidia.shrunk(nvidia.GLaM64B64EProxy_EP)())
    d, f, e, n, v = 64, 128, 2, 4, 128
    # One repeated block: an MoE layer (router, experts' wi and wo), then a
    # dense gated layer; each with 4 bias-free D x D attention projections,
    # a relative-position bias (32 buckets per head) and 2 RMSNorm scales.
    moe = d * e + 2 * e * d * f
    dense = 3 * d * f
    common = 4 * d * d + n * 32 + 2 * d
    self.assertEqual(_count(variables),
                     moe + dense + 2 * common + d + v * d)
    wi = variables['params']['lm']['transformer']['repeat']['sub'][
        'x_layers_0']['ff_layer']['wi_0']
    self.assertEqual(wi.tensor_split_dims_mapping,
                     ['data_expert', 'data', 'mdl'])

  def test_shrunk_grok_weights(self):
    variables = _variables(nvidia.shrunk(nvidia.Grok_Proxy)())
    d, f, e, n, k, h, v = 64, 128, 2, 4, 2, 16, 128
    # Every layer MoE with gated experts; multi-query attention with
    # biased projections (K key/value heads); 2 RMSNorm scales.
    moe = d * e + 3 * e * d * f
    atten = 2 * (d * n * h + n * h) + 2 * (d * k * h + k * h) - n * h + d
    self.assertEqual(_count(variables),
                     2 * (moe + atten + 2 * d) + d + v * d)


class TinyTrainingTest(parameterized.TestCase):
  """The shrunk recipes train a few steps on the CPU, loss falling."""

  @parameterized.parameters('Llama2_7B', 'MoELarge')
  def test_trains(self, name):
    # FSDP over the test's 8 virtual CPU devices (a laptop: [1, 1, 1]).
    exp = nvidia.shrunk(getattr(nvidia, name), LEARNING_RATE=1e-2,
                        ICI_MESH_SHAPE=[1, jax.device_count(), 1],
                        NUM_GROUPS=jax.device_count(),
                        NUM_EXPERTS=jax.device_count())()
    configs = train.ExperimentConfigs.from_experiment(exp, name)
    steps = 6
    configs.apply_overrides([
        f'task.train.num_train_steps={steps}',
        'task.train.summary_interval_steps=1',
        'task.train.learner.optimizer.lr_schedule.decay_end=1000',
    ])
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, eval_on_test=False, decode_during_train=False,
        enable_checkpoint_saving=False))
    acc = event_accumulator.EventAccumulator(
        str(job_dir / 'summaries' / 'train'))
    acc.Reload()
    tag = next(t for t in acc.Tags()['scalars'] if t.endswith('avg_xent'))
    xent = {e.step: e.value for e in acc.Scalars(tag)}
    self.assertEqual(sorted(xent), list(range(1, steps + 1)))
    self.assertTrue(all(math.isfinite(v) for v in xent.values()))
    # Pax's synthetic batches repeat one sequence (every token 1): the
    # cross-entropy falls to a small fraction of its start. (The MoE's
    # total loss, with the load-balancing loss of identical tokens routed to
    # one expert, rises, as in the real Pax.)
    self.assertLess(xent[steps], 0.2 * xent[1])

if __name__ == '__main__':
  absltest.main()

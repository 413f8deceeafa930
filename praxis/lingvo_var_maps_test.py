"""praxis.test_utils' Lingvo variable layouts, event-file readers and apply."""

import copy
import importlib.util
import os
import tempfile

from absl.testing import absltest
import jax
from jax import numpy as jnp
import numpy as np
from praxis import _lingvo_var_maps
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis import test_utils
from praxis.layers import conformers
from praxis.layers import embedding_softmax
from praxis.layers import transformers
import tensorboardX
from tensorboardX.proto import summary_pb2
from tensorboardX.proto import tensor_pb2
from tensorboardX.proto import tensor_shape_pb2
from tensorboardX.proto import types_pb2

NestedMap = py_utils.NestedMap
_HAS_TF = importlib.util.find_spec('tensorflow') is not None
_HAS_TENSORBOARD = importlib.util.find_spec('tensorboard') is not None


def _init(cfg, *inputs):
  layer = base_layer.instantiate(cfg)
  return jax.jit(layer.init)(jax.random.PRNGKey(0), *inputs)


def _paths(tree, prefix=''):
  """'a/b/0/c'-style paths of the leaves of dicts and lists."""
  if isinstance(tree, dict):
    items = tree.items()
  elif isinstance(tree, list):
    items = enumerate(tree)
  else:
    return {prefix[:-1]}
  out = set()
  for k, v in items:
    out |= _paths(v, f'{prefix}{k}/')
  if not out:  # An empty NestedMap or list: Lingvo's parameterless layer.
    out.add(prefix + '{}')
  return out


class LingvoLayoutTest(absltest.TestCase):

  def test_transformer_ffwd(self):
    v = _init(pax_fiddle.Config(transformers.TransformerFeedForward,
                                name='ff', input_dims=4, hidden_dims=6),
              jnp.ones((1, 2, 4)))['params']
    before = copy.deepcopy(v)
    tf_vars = test_utils.replace_jax_transformer_ffwd_vars_to_tf(
        NestedMap.FromNestedDict(v))
    self.assertEqual(_paths(tf_vars), {
        'fflayer/fc/0/w', 'fflayer/fc/0/b', 'fflayer/fc/1/w',
        'fflayer/fc/1/b', 'fflayer/dropout/0/{}', 'fflayer/dropout/1/{}',
        'layer_norm/bias', 'layer_norm/scale', 'residual_dropout/{}',
        'residual_droppath/{}'})
    self.assertIs(tf_vars.fflayer.fc[1].w, v['ffn_layer2']['linear']['w'])
    self.assertIs(tf_vars.fflayer.fc[0].b, v['ffn_layer1']['bias']['b'])
    jax.tree.map(np.testing.assert_array_equal, v, before)

  def test_attention_dense_and_cross(self):
    x = jnp.ones((1, 2, 4))
    v = _init(pax_fiddle.Config(transformers.Transformer, name='t',
                                input_dims=4, hidden_dims=6, num_heads=2,
                                use_cross_attention=True),
              x, jnp.zeros((1, 2)), jnp.zeros((1, 1, 2, 2)), x,
              jnp.zeros((1, 1, 1, 2)))['params']
    nmap = NestedMap.FromNestedDict(v)
    keys_before = _paths(nmap)
    tf_vars = test_utils.replace_jax_attention_vars_to_tf(
        nmap, cross_attention=True)
    self.assertEqual(_paths(nmap), keys_before)  # The argument is kept.
    paths = _paths(tf_vars)
    self.assertLessEqual(keys_before, paths)  # praxis' keys stay.
    self.assertLessEqual({
        'fflayer/fflayer/fc/0/w', 'fflayer/fflayer/fc/1/b',
        'fflayer/fflayer/dropout/0', 'fflayer/residual_dropout/{}',
        'self_atten/layer_norm/scale', 'self_atten/atten/query/w',
        'self_atten/atten/atten_dropout/{}', 'self_atten/residual_dropout',
        'cross_atten/atten/key/w', 'cross_atten/layer_norm/bias'}, paths)
    self.assertIs(tf_vars.cross_atten.atten.value.w,
                  v['cross_attention']['value']['w'])
    self.assertIs(tf_vars.fflayer.fflayer.fc[0].w,
                  v['ff_layer']['ffn_layer1']['linear']['w'])
    self.assertEqual(tf_vars.fflayer.fflayer.dropout, [1.0, 1.0])
    self.assertNotIn('cross_atten', test_utils.replace_jax_attention_vars_to_tf(
        NestedMap.FromNestedDict(v)))

  def test_attention_moe(self):
    x = jnp.ones((1, 2, 4))
    v = _init(pax_fiddle.Config(
        transformers.Transformer, name='t', input_dims=4, hidden_dims=6,
        num_heads=2, tr_fflayer_tpl=pax_fiddle.Config(
            transformers.TransformerFeedForwardMoe, num_experts=2)),
              x, jnp.zeros((1, 2)), jnp.zeros((1, 1, 2, 2)))['params']
    tf_vars = test_utils.replace_jax_attention_vars_to_tf(
        NestedMap.FromNestedDict(v))
    moe = tf_vars.fflayer.fflayer
    self.assertEqual(set(moe), {'layer_norm', 'gate', 'wi_0', 'wo_0'})
    self.assertIs(moe.wo_0, v['ff_layer']['wo_0'])
    self.assertIs(moe.layer_norm.scale, v['ff_layer']['layer_norm']['scale'])

  def test_softmaxes(self):
    v = _init(pax_fiddle.Config(embedding_softmax.FullSoftmax, name='s',
                                input_dims=4, num_classes=3),
              jnp.ones((2, 4)), jnp.ones((2, 1)),
              jnp.zeros((2, 1), jnp.int32))['params']
    simple = test_utils.replace_jax_simple_full_softmax_vars_to_tf(
        NestedMap.FromNestedDict(v))
    self.assertEqual(set(simple), {'weight_0', 'bias_0'})
    self.assertIs(simple.weight_0, v['logits_ffn']['linear']['w'])
    single = test_utils.replace_jax_single_shard_full_softmax_vars_to_tf(
        NestedMap.FromNestedDict(v))
    self.assertEqual(_paths(single), {'linear/w', 'bias/b'})
    self.assertIs(single.bias.b, v['logits_ffn']['bias']['b'])
    self.assertIn('logits_ffn', v)

  def test_res_net(self):
    conv = {'w': np.ones((3, 3, 1, 2)), 'beta': np.zeros(2)}
    v = {'entryflow_conv': conv,
         'stage_0_block_0': {'body_0': conv, 'body_10': conv, 'body_2': conv,
                             'shortcut': conv},
         'stage_0_block_1': {'body_0': conv},
         'stage_1_block_0': {'body_0': conv}}
    tf_vars = test_utils.replace_jax_res_net_vars_to_tf(v)
    self.assertEqual(_paths(tf_vars.entryflow_conv),
                     {'beta', 'conv/w', 'act/{}'})
    block = tf_vars.stage_0_block_0
    self.assertLen(block.body, 3)  # body_0, body_2, body_10 in that order.
    self.assertEqual(_paths(block.shortcut), {'beta', 'conv/w', 'act/{}'})
    self.assertEqual(block.postact, NestedMap())
    self.assertLen(tf_vars.stage_1_block_0.body, 1)
    self.assertEqual(tf_vars.output_spatial_pooling, NestedMap())
    self.assertIn('w', v['entryflow_conv'])  # The argument is kept.

  def _conformer_vars(self):
    x = jnp.ones((1, 4, 8))
    variables = _init(pax_fiddle.Config(
        conformers.Conformer, name='c', input_dims=8, model_dims=8,
        kernel_size=3, atten_num_heads=2), x, jnp.zeros((1, 4)))
    return variables['params'], variables['non_trainable']

  def test_light_conv_layout(self):
    params, stats = self._conformer_vars()
    lconv = _lingvo_var_maps._light_conv_numpy(params['lconv'],
                                               stats['lconv'])
    self.assertEqual(_paths(lconv), {
        'ln/bias', 'ln/scale', 'norm/beta', 'norm/gamma', 'norm/moving_mean',
        'norm/moving_variance', 'dropout/0/{}', 'dropout/1/{}',
        'depthwise_conv1d/w', 'linear_end/w', 'linear_end/b',
        'linear_start/w', 'linear_start/b'})
    gated = params['lconv']['linear_start_gated']['linear']['w']
    act = params['lconv']['linear_start_act']['linear']['w']
    np.testing.assert_array_equal(lconv.linear_start.w,
                                  np.concatenate([gated, act], axis=-1))
    self.assertEqual(lconv.depthwise_conv1d.w.shape,
                     params['lconv']['depthwise_conv1d']['w'].shape + (1,))

  @absltest.skipUnless(_HAS_TF, 'needs tensorflow')
  def test_conformer_as_tf_tensors(self):
    params, stats = self._conformer_vars()
    tf_vars = test_utils.replace_jax_conformer_layer_vars_to_tf(
        NestedMap.FromNestedDict(params), NestedMap.FromNestedDict(stats))
    self.assertEqual(
        set(tf_vars), {'lconv', 'final_ln', 'fflayer_start', 'fflayer_end',
                       'trans_atten'})
    np.testing.assert_array_equal(
        tf_vars.trans_atten.atten.query.w.numpy(),
        params['trans_atten']['self_atten']['query']['w'])
    np.testing.assert_array_equal(
        tf_vars.fflayer_end.fflayer.fc[1].b.numpy(),
        params['fflayer_end']['ffn_layer2']['bias']['b'])


@absltest.skipUnless(_HAS_TENSORBOARD, 'needs tensorboard (the test extra)')
class EventFilesTest(absltest.TestCase):

  def test_log_dirs_and_scalars(self):
    root = tempfile.mkdtemp()
    # tensorboardX's scalars (simple_value), as this project writes them.
    with tensorboardX.SummaryWriter(os.path.join(root, 'train')) as writer:
      writer.add_scalar('loss', 1.5, 1)
      writer.add_scalar('loss', 2.5, 2)
    # A TF2-style scalar (a tensor with the 'scalars' plugin), as Pax's.
    with tensorboardX.SummaryWriter(os.path.join(root, 'eval', 'test')) as w:
      for step, value in ((1, 0.5), (2, 0.75)):
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
            tag='acc',
            tensor=tensor_pb2.TensorProto(
                dtype=types_pb2.DT_FLOAT, float_val=[value],
                tensor_shape=tensor_shape_pb2.TensorShapeProto()),
            metadata=summary_pb2.SummaryMetadata(
                plugin_data=summary_pb2.SummaryMetadata.PluginData(
                    plugin_name='scalars')))])
        w.file_writer.add_summary(summary, step)
    os.makedirs(os.path.join(root, 'empty'))
    self.assertCountEqual(test_utils.get_tfevent_log_dirs(root),
                          ['train', os.path.join('eval', 'test')])
    # The last value written of each tag.
    self.assertEqual(test_utils.get_tfevent_scalars(root),
                     {'loss': 2.5, 'acc': 0.75})


class ApplyTest(absltest.TestCase):

  def test_pax_signature_and_context(self):
    cfg = pax_fiddle.Config(transformers.TransformerFeedForward, name='ff',
                            input_dims=2, hidden_dims=3,
                            residual_dropout_prob=0.5)
    layer = base_layer.instantiate(cfg)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 4, 2)),
                    jnp.float32)
    variables = layer.init(jax.random.PRNGKey(0), x)
    # apply(layer, vars, method, *inputs, context_p=...): in eval mode the
    # dropout is off, so the output is the dropout-free layer's.
    out = test_utils.apply(layer, variables, layer.__call__, x,
                           context_p=base_layer.JaxContext.HParams(
                               do_eval=True))
    no_dropout = base_layer.instantiate(
        cfg.clone().set(residual_dropout_prob=0.0))
    np.testing.assert_allclose(out, no_dropout.apply(variables, x),
                               rtol=1e-6)
    # In training (the default context) the dropout needs a random stream.
    with self.assertRaises(Exception):
      test_utils.apply(layer, variables, layer.__call__, x)

if __name__ == '__main__':
  absltest.main()

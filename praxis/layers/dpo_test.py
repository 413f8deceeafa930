"""Tests of the DPO models in praxis.layers.models (praxis/layers/_dpo.py)."""

import pickle

from absl.testing import absltest
import jax
from jax import numpy as jnp
import numpy as np
from praxis import base_layer
from praxis import pax_fiddle
from praxis.layers import embedding_softmax
from praxis.layers import models
from praxis.layers import transformer_models
from praxis.layers import transformers

_B, _T, _V, _D = 2, 4, 8, 8


def _lm_config():
  return pax_fiddle.Config(
      transformer_models.TransformerLm, model_dims=_D, vocab_size=_V,
      position_emb_tpl=pax_fiddle.Config(
          embedding_softmax.PositionalEmbedding),
      stacked_transformer_tpl=pax_fiddle.Config(
          transformers.StackedTransformer, model_dims=_D, hidden_dims=16,
          num_heads=2, num_layers=1))


def _batch(ids_w, ids_l):
  batch = {}
  for prefix, ids in (('y_w', ids_w), ('y_l', ids_l)):
    batch.update({
        f'{prefix}/inputs': ids,
        f'{prefix}/paddings': jnp.zeros((_B, _T)),
        f'{prefix}/labels/ids': jnp.roll(ids, -1, axis=1),
        f'{prefix}/labels/weights': jnp.ones((_B, _T)),
        f'{prefix}/segment_ids': jnp.ones((_B, _T), jnp.int32),
        f'{prefix}/segment_pos': jnp.tile(jnp.arange(_T), (_B, 1)),
        f'{prefix}/inputs_indicator': jnp.ones((_B, _T), jnp.int32),
    })
  return batch


def _log_sigmoid(x):
  return -np.log1p(np.exp(-x))


class LanguageModelDpoTest(absltest.TestCase):

  def _run(self, batch, beta):
    p = pax_fiddle.Config(models.LanguageModelDPO, name='dpo',
                          ref_mdl=_lm_config(), mdl=_lm_config(), beta=beta)
    layer = base_layer.instantiate(p)
    with base_layer.JaxContext.new_context():
      variables = layer.init(jax.random.PRNGKey(1), batch)
      preds = layer.apply(variables, batch,
                          method=layer.compute_predictions)
      (metrics, per_example), _ = layer.apply(
          variables, batch, mutable=[base_layer.SUMMARIES])
    return variables, preds, metrics, per_example

  def test_loss_matches_dpo_formula(self):
    ids_w = jnp.array([[1, 2, 3, 4], [5, 6, 7, 1]], jnp.int32)
    ids_l = jnp.array([[4, 4, 2, 0], [3, 1, 6, 2]], jnp.int32)
    beta = 0.5
    variables, preds, metrics, per_example = self._run(
        _batch(ids_w, ids_l), beta)
    self.assertEqual(set(variables['params']), {'ref_mdl', 'mdl'})
    self.assertEqual(per_example, {})
    logp = {k: -np.asarray(preds[k].per_sequence_xent, np.float64)
            for k in ('y_w_ref', 'y_w_pi', 'y_l_ref', 'y_l_pi')}
    delta = beta * ((logp['y_w_pi'] - logp['y_w_ref']) -
                    (logp['y_l_pi'] - logp['y_l_ref']))
    self.assertGreater(np.abs(delta).max(), 1e-4)  # The models differ.
    loss, weight = metrics.total_loss
    np.testing.assert_allclose(loss, -np.mean(_log_sigmoid(delta)),
                               rtol=1e-5)
    self.assertEqual(float(weight), _B)

  def test_identical_pair_gives_log_two(self):
    ids = jnp.array([[1, 2, 3, 4], [5, 6, 7, 1]], jnp.int32)
    _, _, metrics, _ = self._run(_batch(ids, ids), 0.1)
    np.testing.assert_allclose(metrics.total_loss[0], np.log(2.0),
                               rtol=1e-6)

  def test_missing_eval_sample_weights_is_named(self):
    ids = jnp.ones((_B, _T), jnp.int32)
    p = pax_fiddle.Config(models.LanguageModelDPO, name='dpo',
                          ref_mdl=_lm_config(), mdl=_lm_config(),
                          apply_eval_sample_weights=True)
    layer = base_layer.instantiate(p)
    with self.assertRaisesRegex(ValueError, 'eval_sample_weights'):
      layer.init(jax.random.PRNGKey(0), _batch(ids, ids))


class PublicPathTest(absltest.TestCase):

  def test_classes_live_in_models(self):
    half = models.Labels(class_ids=np.array([[1]]),
                         class_weights=np.array([[1.0]]))
    back = pickle.loads(pickle.dumps(half))
    np.testing.assert_array_equal(back.class_ids, [[1]])
    for cls in (models.LanguageModelDPO, models.SequenceModelDPO,
                models.DPOExample, models.DPOExampleHalf):
      self.assertEqual(cls.__module__, 'praxis.layers.models')


class FromFeatureConverterTest(absltest.TestCase):

  def test_seq2seq_halves_share_the_source(self):
    x = {'inputs': np.array([[1, 2]]), 'input_paddings': np.zeros((1, 2))}
    for key, ids in (('targets_w', [[3, 4]]), ('targets_l', [[5, 6]])):
      x.update({key: np.array(ids), f'{key}/paddings': np.zeros((1, 2)),
                f'{key}/labels/ids': np.array(ids) + 1,
                f'{key}/labels/weights': np.ones((1, 2))})
    ex = models.DPOExampleSeq2Seq.from_feature_converter(x)
    self.assertIs(ex.y_w.inputs, ex.y_l.inputs)
    kw = ex.y_l.as_xformer_encdec_input()
    self.assertEqual(set(kw), {'inputs', 'input_paddings', 'targets',
                               'target_paddings', 'labels'})
    np.testing.assert_array_equal(kw.targets, [[5, 6]])
    np.testing.assert_array_equal(kw.labels.class_ids, [[6, 7]])


if __name__ == '__main__':
  absltest.main()

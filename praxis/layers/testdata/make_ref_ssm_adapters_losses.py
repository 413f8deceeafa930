"""Writes ssm_ref.npz, adapters_ref.npz, losses_ref.npz from the real Pax 1.4.

Run under the reference environment (../shared/reference-pax), from a folder
where this project's praxis is not importable:

  cd /tmp && JAX_PLATFORMS=cpu /path/to/refpax/bin/python \
      /path/to/praxis/layers/testdata/make_ref_ssm_adapters_losses.py OUT_DIR

Each case stores its config (JSON), its variables (random normal values in
place of the initial ones, keyed 'collection/path/name'), its inputs and the
outputs of the real Pax layer. Pax's own tests compare adapters with Lingvo
and SSM layers only with themselves; these fixtures pin the numerics.
"""

import json
import os
import sys

from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import praxis
from praxis import base_layer
from praxis import pax_fiddle
from praxis import py_utils
from praxis.layers import adapters
from praxis.layers import attentions
from praxis.layers import losses
from praxis.layers import ssm
from praxis.layers import ssm_transformers

assert 'site-packages' in praxis.__file__, praxis.__file__

DECODE_CACHE = base_layer.DECODE_CACHE


def _randomize(rng, variables, skip=()):
  """Variables with random normal values (except collections in skip)."""
  flat = traverse_util.flatten_dict(jax.device_get(variables), sep='/')
  out = {}
  for k, v in flat.items():
    if k.split('/')[0] in skip:
      out[k] = np.asarray(v)
    else:
      out[k] = np.asarray(rng.normal(size=v.shape) * 0.5, v.dtype)
  return out


def _store(arrays, prefix, flat):
  for k, v in flat.items():
    arrays[f'{prefix}/vars/{k}'] = v


def ssm_cases(rng, arrays, configs):
  """SSM (three A initializations) and S5: sequence and step outputs."""
  x = rng.normal(size=(2, 5, 3)).astype(np.float32)
  arrays['x'] = x
  base = dict(nheads=4, dim=3, l_max=6, decode_num_samples=1, step_size=0.5)
  cases = {
      'ssm_legs': ('SSM', dict(hippo_type='ss4d-1d-legs')),
      'ssm_lagt': ('SSM', dict(hippo_type='ss4d-1d-lagt')),
      'ssm_lin': ('SSM', dict(hippo_type='ss4d-1d')),
      's5_legs': ('S5', dict(hippo_type='ss4d-1d-legs')),
      's5_lin': ('S5', dict(hippo_type='ss4d-1d')),
  }
  for name, (cls_name, extra) in cases.items():
    fields = dict(base, **extra)
    layer = base_layer.instantiate(pax_fiddle.Config(
        getattr(ssm, cls_name), name='ssm', **fields))
    init = layer.init(jax.random.PRNGKey(0), x)
    flat = _randomize(rng, {'params': init['params']})
    variables = traverse_util.unflatten_dict(flat, sep='/')
    out, state = layer.apply(variables, x, mutable=[DECODE_CACHE])
    arrays[f'{name}/out'] = np.asarray(out)
    step_vars = py_utils.merge_dict(state, variables)
    steps = []
    for t in range(x.shape[1]):
      y, state = layer.apply(step_vars, x[:, t], method=layer.extend_step,
                             mutable=[DECODE_CACHE])
      step_vars = py_utils.merge_dict(state, variables)
      steps.append(np.asarray(y))
    arrays[f'{name}/steps'] = np.stack(steps, 1)
    _store(arrays, name, flat)
    configs[name] = {'cls': cls_name, 'fields': fields}
  amat, pmat, bmat, _ = ssm.make_dplr_hippo(4, 'LegS')
  arrays['dplr_legs4'] = np.stack(
      [np.asarray(amat), np.asarray(pmat), np.asarray(bmat)])


def ssm_transformer_cases(rng, arrays, configs):
  """SSMTransformer and SSMGated: fprop (with paddings) and extend_step."""
  x = rng.normal(size=(2, 5, 8)).astype(np.float32)
  paddings = np.zeros((2, 5), np.float32)
  paddings[1, 4:] = 1.0
  cross = rng.normal(size=(2, 4, 8)).astype(np.float32)
  cross_paddings = np.zeros((2, 4), np.float32)
  cross_paddings[0, 3:] = 1.0
  arrays.update(tx=x, tpaddings=paddings, tcross=cross,
                tcross_paddings=cross_paddings)
  mask = jnp.minimum(attentions.causal_mask(jnp.asarray(x)),
                     attentions.convert_paddings_to_mask(paddings))
  cross_mask = attentions.convert_paddings_to_mask(cross_paddings)
  base = dict(input_dims=8, hidden_dims=16, num_heads=2, ssm_nheads=4,
              ssm_dim=8, ssm_l_max=6, decode_num_samples=1, ssm_step_size=0.5)
  cases = {
      'tr_pre': ('SSMTransformer', dict()),
      'tr_post': ('SSMTransformer', dict(norm_policy='post')),
      'tr_primer': ('SSMTransformer', dict(norm_policy='primer_hybrid',
                                           ssm_hippo_type='ss4d-1d')),
      'tr_cross': ('SSMTransformer', dict(use_cross_attention=True)),
      'gss_pre': ('SSMGated', dict()),
      'gss_cross': ('SSMGated', dict(use_cross_attention=True,
                                     ssm_hippo_type='ss4d-1d-lagt')),
  }
  for name, (cls_name, extra) in cases.items():
    fields = dict(base, **extra)
    layer = base_layer.instantiate(pax_fiddle.Config(
        getattr(ssm_transformers, cls_name), name='layer', **fields))
    use_cross = fields.get('use_cross_attention', False)
    kw = dict(cross_inputs=jnp.asarray(cross),
              cross_attention_mask=cross_mask) if use_cross else {}
    with base_layer.JaxContext.new_context():
      init = layer.init(jax.random.PRNGKey(0), x, paddings, mask, **kw)
      flat = _randomize(rng, {'params': init['params']})
      variables = traverse_util.unflatten_dict(flat, sep='/')
      (out, _), state = layer.apply(variables, x, paddings, mask,
                                    mutable=[DECODE_CACHE], **kw)
      arrays[f'{name}/out'] = np.asarray(out)
      if fields.get('norm_policy') == 'post':  # Pax's extend_step fails.
        _store(arrays, name, flat)
        configs[name] = {'cls': cls_name, 'fields': fields}
        continue
      step_vars = py_utils.merge_dict(state, variables)
      steps = []
      for t in range(x.shape[1]):
        step_kw = {}
        if use_cross:
          step_kw['cross_attention_mask'] = cross_mask[:, :, None, 0, :]
        y, state = layer.apply(
            step_vars, x[:, t], time_step=t, attention_mask=mask[:, :, t],
            method=layer.extend_step, mutable=[DECODE_CACHE], **step_kw)
        step_vars = py_utils.merge_dict(state, variables)
        steps.append(np.asarray(y))
      arrays[f'{name}/steps'] = np.stack(steps, 1)
    _store(arrays, name, flat)
    configs[name] = {'cls': cls_name, 'fields': fields}


def adapter_cases(rng, arrays, configs):
  """MultitaskResidualAdapter and AdaptedTransformerFeedForward."""
  x = rng.normal(size=(3, 4, 6)).astype(np.float32)
  paddings = np.zeros((3, 4), np.float32)
  paddings[2, 3:] = 1.0
  tasks_b = np.array([2, 0, 1], np.int32)
  tasks_bt = rng.integers(0, 3, size=(3, 4)).astype(np.int32)
  arrays.update(x=x, paddings=paddings, tasks_b=tasks_b, tasks_bt=tasks_bt)
  adapter = dict(input_dims=6, bottleneck_dims=3, num_tasks=3)
  for name, norm in (('adapter_ln', 'LayerNorm'), ('adapter_nonorm', None)):
    fields = dict(adapter)
    p = pax_fiddle.Config(adapters.MultitaskResidualAdapter, name='adapter',
                          **fields)
    if norm is None:
      p.norm_tpl = None
    layer = base_layer.instantiate(p)
    init = layer.init(jax.random.PRNGKey(0), x, paddings, tasks_b)
    flat = _randomize(rng, init)
    variables = traverse_util.unflatten_dict(flat, sep='/')
    arrays[f'{name}/out_b'] = np.asarray(
        layer.apply(variables, x, paddings, tasks_b))
    arrays[f'{name}/out_bt'] = np.asarray(
        layer.apply(variables, x, paddings, tasks_bt))
    arrays[f'{name}/out_b_nores'] = np.asarray(
        layer.apply(variables, x, paddings, tasks_b, add_residual=False))
    _store(arrays, name, flat)
    configs[name] = {'cls': 'MultitaskResidualAdapter', 'fields': fields,
                     'norm': norm}
  for mode in ('sequential', 'parallel'):
    name = f'ffn_{mode}'
    fields = dict(input_dims=6, hidden_dims=12, residual_weight=0.5,
                  mode=mode)
    p = pax_fiddle.Config(adapters.AdaptedTransformerFeedForward,
                          name='ffn', **fields)
    p.adapter_tpl = pax_fiddle.Config(
        adapters.MultitaskResidualAdapter, norm_tpl=None, **adapter)
    layer = base_layer.instantiate(p)
    init = layer.init(jax.random.PRNGKey(0), x, paddings, tasks=tasks_b)
    flat = _randomize(rng, init)
    variables = traverse_util.unflatten_dict(flat, sep='/')
    arrays[f'{name}/out'] = np.asarray(
        layer.apply(variables, x, paddings, tasks=tasks_b))
    _store(arrays, name, flat)
    configs[name] = {'cls': 'AdaptedTransformerFeedForward',
                     'fields': fields}


def loss_cases(rng, arrays, configs):
  """BiTemperedLoss: losses over training steps (the schedule), eval, grads."""
  logits = (rng.normal(size=(4, 5)) * 2.0).astype(np.float32)
  labels = np.eye(5, dtype=np.float32)[[0, 3, 1, 4]]
  arrays.update(logits=logits, labels=labels)
  cases = {
      'heavy_tail': dict(t1=0.8, t2=1.3, label_smoothing=0.1),
      'finite_support': dict(t1=0.6, t2=0.8),
      'ce': dict(),
      't1_only': dict(t1=0.5),
      'scheduled': dict(t1=0.7, t2=1.5, start_step=2, end_step=6),
  }
  for name, fields in cases.items():
    layer = base_layer.instantiate(pax_fiddle.Config(
        losses.BiTemperedLoss, name='loss', **fields))
    variables = layer.init(jax.random.PRNGKey(0), logits, labels)
    train = []
    for _ in range(8):
      out, updated = layer.apply(variables, logits, labels,
                                 mutable=[base_layer.NON_TRAINABLE])
      variables = dict(variables, **updated)
      train.append(np.asarray(out))
    arrays[f'{name}/train'] = np.stack(train)
    with base_layer.JaxContext.new_context(
        hparams=base_layer.JaxContext.HParams(do_eval=True)):
      arrays[f'{name}/eval'] = np.asarray(
          layer.apply(variables, logits, labels))

      def total(lg):
        return jnp.sum(layer.apply(variables, lg, labels))

      arrays[f'{name}/grad'] = np.asarray(jax.grad(total)(logits))
    configs[name] = {'cls': 'BiTemperedLoss', 'fields': fields}


def main(out_dir):
  for filename, builders in (
      ('ssm_ref.npz', (ssm_cases, ssm_transformer_cases)),
      ('adapters_ref.npz', (adapter_cases,)),
      ('losses_ref.npz', (loss_cases,))):
    rng = np.random.default_rng(0)
    arrays, configs = {}, {}
    for build in builders:
      build(rng, arrays, configs)
    arrays['configs'] = np.asarray(json.dumps(configs))
    np.savez_compressed(os.path.join(out_dir, filename), **arrays)


if __name__ == '__main__':
  main(sys.argv[1])

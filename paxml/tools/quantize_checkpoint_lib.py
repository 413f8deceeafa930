"""Post-training quantization of a trained float checkpoint, and serving it.

Public: `QuantizeOptions`, `quantized_model_config`, `first_batch`,
`restore_float_variables`, `materialize`, `save_quantized`,
`restore_quantized`, `checkpoint_bytes`, `eval_log_pplx`, `decode`.

The float model's config is rewritten with
`praxis.layers.quantization.quantize.set_transformer_quantization`: in
MATERIALIZE mode the float variables are read and `quantize_weight` turns
them into int weights + scales; in INFERENCE mode those are the variables.
The quantized checkpoint is a Pax checkpoint (`checkpoints/checkpoint_<step>`,
model variables only) plus `quantization.json` (the options, which rebuild
the INFERENCE config).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import time
from typing import Any

from absl import logging
from etils import epath
import jax
import jax.numpy as jnp
import numpy as np
from paxml import checkpoints
from paxml import train_states
from praxis import base_layer
from praxis import py_utils
from praxis.layers.quantization import quantization_hparams as qh
from praxis.layers.quantization import quantize

NestedMap = py_utils.NestedMap
OPTIONS_FILE = 'quantization.json'
_COLLECTIONS = (base_layer.PARAMS, base_layer.NON_TRAINABLE)


@dataclasses.dataclass(frozen=True)
class QuantizeOptions:
  """What to quantize.

  Attributes:
    num_bits: Weight bits (2, 4 or 8).
    num_bits_act: Activation bits, or None for weight-only quantization.
    use_symmetric: Symmetric weights (else with zero points).
    quantize_embedding_softmax: Also quantize the (shared) softmax/embedding.
  """

  num_bits: int = 8
  num_bits_act: int | None = None
  use_symmetric: bool = True
  quantize_embedding_softmax: bool = True

  def __post_init__(self):
    if self.num_bits not in (2, 4, 8):
      raise ValueError(
          f'num_bits must be 2, 4 or 8, got {self.num_bits}.')
    if self.num_bits_act is not None and self.num_bits_act not in (4, 8, 16):
      raise ValueError(
          f'num_bits_act must be None, 4, 8 or 16, got {self.num_bits_act}.')


def quantized_model_config(model_p: Any, options: QuantizeOptions,
                           mode: qh.QuantizationMode) -> Any:
  """A copy of the float model config with quantized transformer layers."""
  model_p = model_p.clone()
  weight_only = options.num_bits_act is None
  quantize.set_transformer_quantization(
      model_p, quantization_type=qh.QuantizationType.PTQ, mode=mode,
      num_bits=options.num_bits, use_symmetric=options.use_symmetric,
      weight_quant_only=weight_only,
      num_bits_act=options.num_bits_act,
      use_symmetric_act=None if weight_only else True,
      quantize_embedding_softmax=options.quantize_embedding_softmax,
  )
  return model_p


def first_batch(input_p: Any) -> NestedMap:
  """One batch of an input config (for shapes)."""
  return base_layer.instantiate(input_p).get_next()


def _model_variables(model: Any, batch: NestedMap) -> dict[str, Any]:
  """ShapeDtypeStructs of the model's params and non_trainable variables."""
  with base_layer.JaxContext.new_context():
    shapes = jax.eval_shape(
        lambda b: model.init(jax.random.PRNGKey(0), b), batch)
  return {k: shapes[k] for k in _COLLECTIONS if k in shapes}


def restore_float_variables(model: Any, batch: NestedMap,
                            checkpoint_dir: Any,
                            step: int | None = None) -> tuple[Any, int]:
  """(model variables, step) of the latest (or `step`) float checkpoint."""
  path = epath.Path(checkpoint_dir)
  if (path / OPTIONS_FILE).exists() or (path.parent / OPTIONS_FILE).exists():
    # Its int8 'w' arrays have the float shapes: restoring would "succeed".
    raise ValueError(
        f'{checkpoint_dir} is a quantized checkpoint (it has a '
        f'{OPTIONS_FILE}); it cannot be loaded into the float model config: '
        'serve it with the INFERENCE config (restore_quantized, or '
        'quantize_checkpoint --mode=eval/decode).')
  abstract = _model_variables(model, batch)
  state = checkpoints.restore_checkpoint(
      train_states.TrainState(step=jax.ShapeDtypeStruct((), jnp.int32),
                              mdl_vars=abstract, opt_states=[]),
      checkpoint_dir, checkpoint_type=checkpoints.CheckpointType.GDA,
      step=step)
  return state.mdl_vars, int(np.asarray(state.step))


def materialize(model_mat: Any, float_vars: Any) -> dict[str, Any]:
  """`quantize_weight` of a MATERIALIZE-mode model on float variables."""
  with base_layer.JaxContext.new_context():
    return model_mat.apply(float_vars, method=model_mat.quantize_weight)


def _check_tree(want: Any, got: Any, what: str) -> None:
  want_s = jax.tree.map(lambda x: (tuple(x.shape), jnp.dtype(x.dtype)), want)
  got_s = jax.tree.map(lambda x: (tuple(x.shape), jnp.dtype(x.dtype)), got)
  if want_s != got_s:
    flat_w = dict(jax.tree_util.tree_flatten_with_path(want_s)[0])
    flat_g = dict(jax.tree_util.tree_flatten_with_path(got_s)[0])
    diff = sorted(set(flat_w.items()) ^ set(flat_g.items()), key=str)[:4]
    raise ValueError(
        f'{what}: the variables do not match the quantized (INFERENCE) '
        f'model; first differences: {diff}')


def save_quantized(model_inf: Any, batch: NestedMap, int_vars: Any,
                   step: int, output_dir: Any,
                   options: QuantizeOptions) -> pathlib.Path:
  """Writes `output_dir/checkpoints/checkpoint_<step>` and the options."""
  _check_tree(_model_variables(model_inf, batch), int_vars,
              'save_quantized')
  output_dir = epath.Path(output_dir)
  output_dir.mkdir(parents=True, exist_ok=True)
  (output_dir / OPTIONS_FILE).write_text(
      json.dumps(dataclasses.asdict(options), indent=2))
  state = train_states.TrainState(step=jnp.asarray(step, jnp.int32),
                                  mdl_vars=int_vars, opt_states=[])
  checkpoints.save_checkpoint(state, output_dir / 'checkpoints',
                              overwrite=True,
                              checkpoint_type=checkpoints.CheckpointType.GDA)
  return pathlib.Path(output_dir)


def read_options(quantized_dir: Any) -> QuantizeOptions:
  """The options a quantized checkpoint was written with."""
  path = epath.Path(quantized_dir) / OPTIONS_FILE
  if not path.exists():
    raise ValueError(
        f'{quantized_dir} has no {OPTIONS_FILE}: not a quantized checkpoint '
        'written by paxml.tools.quantize_checkpoint.')
  return QuantizeOptions(**json.loads(path.read_text()))


def restore_quantized(model_inf: Any, batch: NestedMap,
                      quantized_dir: Any) -> Any:
  """The int variables of a quantized checkpoint, for an INFERENCE model."""
  abstract = _model_variables(model_inf, batch)
  try:
    state = checkpoints.restore_checkpoint(
        train_states.TrainState(step=jax.ShapeDtypeStruct((), jnp.int32),
                                mdl_vars=abstract, opt_states=[]),
        epath.Path(quantized_dir) / 'checkpoints',
        checkpoint_type=checkpoints.CheckpointType.GDA)
  except ValueError as e:
    raise ValueError(
        f'{quantized_dir}: cannot restore it into the quantized model config '
        f'(is it a checkpoint of this experiment, quantized with the options '
        f'in {OPTIONS_FILE}?): {e}') from e
  return state.mdl_vars


def checkpoint_bytes(variables: Any) -> int:
  """Bytes of the arrays of a variable tree."""
  return sum(int(np.prod(x.shape)) * jnp.dtype(x.dtype).itemsize
             for x in jax.tree.leaves(variables))


def eval_log_pplx(model: Any, variables: Any, input_p: Any,
                  num_batches: int | None = None) -> float:
  """Token-weighted mean `log_pplx` of the model over an eval input."""
  inp = base_layer.instantiate(input_p)
  context = base_layer.JaxContext.HParams(do_eval=True)

  @jax.jit
  def step(v, batch):
    with base_layer.JaxContext.new_context(hparams=context):
      metrics, _ = model.apply(v, batch, rngs={
          base_layer.RANDOM: jax.random.PRNGKey(0)})
    return metrics['log_pplx']

  total = weight = 0.0
  seen = 0
  while num_batches is None or seen < num_batches:
    try:
      batch = inp.get_next()
    except (StopIteration, EOFError) as _:
      break
    value, w = step(variables, batch)
    total += float(value) * float(w)
    weight += float(w)
    seen += 1
  if weight == 0:
    raise ValueError('eval_log_pplx: the eval input gave no tokens.')
  return total / weight


def decode(model: Any, variables: Any, batch: NestedMap,
           repeats: int = 3) -> tuple[Any, float]:
  """(decode results, generated tokens per second) on one batch."""
  context = base_layer.JaxContext.HParams(do_eval=True)

  @jax.jit
  def run(v, b):
    with base_layer.JaxContext.new_context(hparams=context):
      out, _ = model.apply(
          v, b, method=model.decode,
          rngs={base_layer.RANDOM: jax.random.PRNGKey(0)},
          mutable=[base_layer.DECODE_CACHE, base_layer.SUMMARIES])
    return out

  out = jax.block_until_ready(run(variables, batch))  # Compiles.
  start = time.perf_counter()
  for _ in range(repeats):
    out = jax.block_until_ready(run(variables, batch))
  seconds = (time.perf_counter() - start) / repeats
  steps = model.decoder_tpl.max_decode_steps
  steps = max(steps) if isinstance(steps, (list, tuple)) else steps
  tokens = int(batch.ids.shape[0]) * int(steps)
  logging.info('decode: %d tokens in %.3fs', tokens, seconds)
  return out, tokens / seconds

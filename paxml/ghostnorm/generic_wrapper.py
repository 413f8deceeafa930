"""Makes any Pax layer follow the ghost-norm protocol (see `base`).

`WrappedGhostNorm` holds the layer as its child `ghostnorm_wrapped_layer` and
runs it under a `jax.custom_vjp` whose backward pass also returns, for every
variable, the squared norm of each example's gradient. Unlike the dedicated
layers in `linears` and `embedding`, it materialises per-example gradients, one
layer at a time (a vmap of the layer's vjp over the examples).

`generate_wrapped_template(config)` rewrites a model config: layers with a
dedicated ghost-norm twin are swapped for it (`Linear`, `Bias`, `Embedding`),
other known parametric layers are wrapped, and everything else is searched for
sub-layer configs.

Public names: LAYER, WrappedGhostNorm, GhostNormPaxConfig,
generate_wrapped_template.
"""

from __future__ import annotations

import functools
import inspect
import types
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
from paxml.ghostnorm import _norms
from paxml.ghostnorm import base
from paxml.ghostnorm import embedding
from paxml.ghostnorm import linears
from praxis import base_layer
from praxis import pax_fiddle
from praxis import pytypes
from praxis.layers import attentions
from praxis.layers import embedding_softmax
from praxis.layers import linears as praxis_linears
from praxis.layers import normalizations
from praxis.layers import transformers

JTensor = pytypes.JTensor
PARAMS = base_layer.PARAMS
LAYER = 'ghostnorm_wrapped_layer'
LayerTpl = pax_fiddle.Config[base_layer.BaseLayer]


def _per_example_sq_norms(apply_fn, variables, weighted_g, args):
  """Squared norms of each example's gradient, per variable leaf."""

  def one_example(g_b, *args_b):
    add_batch = lambda t: jnp.expand_dims(t, 0)
    args_b = jax.tree_util.tree_map(add_batch, args_b)
    _, vjp_fn = jax.vjp(lambda v: apply_fn(v, *args_b), variables)
    return vjp_fn(jax.tree_util.tree_map(add_batch, g_b))[0]

  per_example = jax.vmap(one_example)(weighted_g, *args)
  batch = jax.tree_util.tree_leaves(args)[0].shape[0]

  def sq_norm(grads):
    grads = grads.reshape(grads.shape[0], -1) * batch
    return jnp.sum(grads * grads, axis=1)

  return jax.tree_util.tree_map(sq_norm, per_example)


def _ghost_norm_call(apply_fn: Callable[..., Any]) -> Callable[..., Any]:
  """`apply_fn(variables, *args)` with the ghost-norm backward rule."""

  @jax.custom_vjp
  def call(variables, *args):
    return apply_fn(base.get_param(variables), *args)

  def forward(variables, *args):
    plain = base.get_param(variables)
    out, vjp_fn = jax.vjp(apply_fn, plain, *args)
    return out, (vjp_fn, plain, base.get_aux(variables), args)

  def backward(residuals, g):
    vjp_fn, plain, scales, args = residuals
    grads = vjp_fn(g)
    if scales is None:
      return grads
    weighted_g = jax.tree_util.tree_map(
        functools.partial(_norms.weight_per_example, scales), g
    )
    d_vars = vjp_fn(weighted_g)[0]
    sq_norms = _per_example_sq_norms(apply_fn, plain, weighted_g, args)
    d_vars = jax.tree_util.tree_map(base.ParamWithAux, d_vars, sq_norms)
    return (d_vars, *grads[1:])

  call.defvjp(forward, backward)
  return call


class WrappedGhostNorm(base_layer.BaseLayer):
  """Runs the layer `layer_tpl` under the ghost-norm protocol.

  Attributes:
    layer_tpl: The wrapped layer's config.
    ghostnorm_methods: Methods of the wrapped layer besides `__call__` that
      are exposed, with the same protocol, on the wrapper.
  """

  layer_tpl: LayerTpl | None = base_layer.template_field(None)
  ghostnorm_methods: Sequence[str] = ()

  def setup(self) -> None:
    if self.layer_tpl is not None:
      self.create_child(LAYER, self.layer_tpl.clone())

  def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
    child = getattr(self, LAYER)
    if PARAMS not in self.variables:  # Initialisation: create the variables.
      return getattr(child, method)(*args, **kwargs)
    bound = inspect.signature(getattr(child, method)).bind(*args, **kwargs)
    apply_fn = functools.partial(child.apply, method=method, **bound.kwargs)
    child_vars = {
        collection: tree[LAYER]
        for collection, tree in self.variables.items()
        if LAYER in tree
    }
    return _ghost_norm_call(apply_fn)(child_vars, *bound.args)

  def __call__(self, *args: Any, **kwargs: Any) -> Any:
    return self._run('__call__', *args, **kwargs)

  def __getattr__(self, name: str) -> Any:
    if name in self.__dict__.get('ghostnorm_methods', ()):
      return types.MethodType(
          lambda module, *a, **k: module._run(name, *a, **k), self
      )
    return super().__getattr__(name)


# Layers to wrap, with their methods (besides __call__) to expose wrapped.
_WRAPPABLE_LAYERS_TO_EXTRA_FNS: Mapping[type[Any], tuple[str, ...]] = (
    types.MappingProxyType({
        attentions.AttentionProjection: (),
        attentions.CausalDepthwiseConv1D: (),
        attentions.CombinedQKVProjectionLayer: (),
        attentions.PerDimScale: (),
        embedding_softmax.Embedding: ('emb_lookup',),
        normalizations.GroupNorm: (),
        normalizations.LayerNorm: (),
        normalizations.RmsNorm: (),
        transformers.TransformerFeedForwardMoe: (),
    })
)

# Layers swapped for their dedicated ghost-norm twins.
_REPLACE_MAP: Mapping[type[Any], type[Any]] = types.MappingProxyType({
    embedding_softmax.Embedding: embedding.EmbeddingGhostNorm,
    praxis_linears.Linear: linears.LinearGhostNorm,
    praxis_linears.Bias: linears.BiasGhostNorm,
})


def _extra_methods(cls: type[Any]) -> tuple[str, ...]:
  for wrappable, methods in _WRAPPABLE_LAYERS_TO_EXTRA_FNS.items():
    if issubclass(cls, wrappable):
      return methods
  return ()


class GhostNormPaxConfig(pax_fiddle.Config):
  """A layer config that builds `WrappedGhostNorm` around its layer."""

  def __build__(self, *args: Any, **kwargs: Any) -> WrappedGhostNorm:
    if args:
      raise ValueError(
          f'GhostNormPaxConfig({self.__fn_or_cls__.__name__}): positional '
          'arguments are not supported; set fields by name.'
      )
    layer_p = self.to_pax_config()
    for name, value in kwargs.items():
      setattr(layer_p, name, value)
    return WrappedGhostNorm(
        layer_tpl=layer_p, ghostnorm_methods=_extra_methods(layer_p.cls)
    )

  @staticmethod
  def from_pax_config(pax_config: pax_fiddle.Config) -> GhostNormPaxConfig:
    values, metadata = pax_config.__flatten__()
    return GhostNormPaxConfig.__unflatten__(values, metadata)

  def to_pax_config(self) -> pax_fiddle.Config:
    values, metadata = self.__flatten__()
    return pax_fiddle.Config.__unflatten__(values, metadata)


def _is_layer_config(value: Any) -> bool:
  return isinstance(value, pax_fiddle.Config) and isinstance(
      value.cls, type) and issubclass(value.cls, base_layer.BaseLayer)


def generate_wrapped_template(
    model_or_layer_p: pax_fiddle.Config,
    force_no_replace: bool = False,
    force_wrap: bool = False,
) -> pax_fiddle.Config:
  """Rewrites a layer config so that every parametric layer is ghost-norm.

  Args:
    model_or_layer_p: The model's or layer's config (changed in place).
    force_no_replace: Never swap a layer for its dedicated twin.
    force_wrap: Wrap `model_or_layer_p` itself, known or not.

  Returns:
    The rewritten config (a new one where the top layer is wrapped).
  """
  if not isinstance(model_or_layer_p, pax_fiddle.Config):
    raise TypeError(
        'generate_wrapped_template expects a pax_fiddle.Config of a layer, '
        f'got {type(model_or_layer_p).__name__}.'
    )
  cls = model_or_layer_p.cls
  if not force_no_replace and cls in _REPLACE_MAP:
    model_or_layer_p.cls = _REPLACE_MAP[cls]
    return model_or_layer_p
  if force_wrap or (
      issubclass(cls, base_layer.BaseLayer)
      and issubclass(cls, tuple(_WRAPPABLE_LAYERS_TO_EXTRA_FNS))
  ):
    return GhostNormPaxConfig.from_pax_config(model_or_layer_p)
  for name in model_or_layer_p.__dir__():
    value = getattr(model_or_layer_p, name)
    wrapped = _wrap_field(value)
    if wrapped is not value:
      setattr(model_or_layer_p, name, wrapped)
  return model_or_layer_p


def _wrap_field(value: Any) -> Any:
  """Rewrites the layer configs found in one field's value."""
  if _is_layer_config(value):
    return generate_wrapped_template(value)
  if isinstance(value, (list, tuple)) and any(map(_is_layer_config, value)):
    return type(value)(_wrap_field(v) for v in value)
  if isinstance(value, dict) and any(map(_is_layer_config, value.values())):
    return {k: _wrap_field(v) for k, v in value.items()}
  return value

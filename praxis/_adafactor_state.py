"""Pax's Adafactor state layout over an optax chain (private).

`praxis.optimizers.sharded_adafactor` chains optax transforms; their state
is a tuple of small states (`FactoredState`, `EmaState`, step counts...).
Pax keeps one `ShardedAdafactorState(count, m, m_scale, vr, vc, v)`, so
`pax_layout(chain)` stores the chain's state in that layout and rebuilds
the tuple for each update. Every counted sub-state counts the same updates,
so one `count` holds them all. `m` is the momentum (float; Pax may store it
as int8 with `m_scale`, here `m_scale` holds placeholders), `vr`/`vc` the
factored row and column statistics and `v` the unfactored ones, each a tree
of the variables' structure (shape-[1] placeholders where unused).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax


class ShardedAdafactorState(NamedTuple):
  """Pax's Adafactor state (see the module doc)."""

  count: Any
  m: Any
  m_scale: Any
  vr: Any
  vc: Any
  v: Any


# Field of a chained optax sub-state -> field of ShardedAdafactorState.
_PAX_FIELD = {'count': 'count', 'v_row': 'vr', 'v_col': 'vc', 'v': 'v',
              'ema': 'm'}


def _placeholders(tree: Any) -> Any:
  return jax.tree.map(lambda _: jnp.zeros([1], jnp.float32), tree)


def _pack(chain_state: tuple[Any, ...], like: Any) -> ShardedAdafactorState:
  fields = {'m': _placeholders(like), 'm_scale': _placeholders(like)}

  def visit(sub):
    if isinstance(sub, optax.MaskedState):
      visit(sub.inner_state)
      return
    if isinstance(sub, tuple) and not hasattr(sub, '_fields'):
      for s in sub:
        visit(s)
      return
    for name in getattr(sub, '_fields', ()):
      if name not in _PAX_FIELD:
        raise TypeError(
            f'sharded_adafactor: no place for the state field '
            f'{type(sub).__name__}.{name} in ShardedAdafactorState.')
      fields[_PAX_FIELD[name]] = getattr(sub, name)

  visit(chain_state)
  return ShardedAdafactorState(**fields)


def _unpack(state: ShardedAdafactorState, template: Any) -> Any:
  """The chain's state (`template`: its structure) from Pax's layout."""
  if isinstance(template, optax.MaskedState):
    return optax.MaskedState(inner_state=_unpack(state, template.inner_state))
  if isinstance(template, tuple) and not hasattr(template, '_fields'):
    return tuple(_unpack(state, sub) for sub in template)
  names = getattr(template, '_fields', ())
  if not names:
    return template
  return type(template)(**{n: getattr(state, _PAX_FIELD[n]) for n in names})


def pax_layout(chain: optax.GradientTransformation
               ) -> optax.GradientTransformation:
  """`chain` (an optax.chain) with its state kept as ShardedAdafactorState."""

  def init(params):
    return _pack(chain.init(params), params)

  def update(updates, state, params=None):
    template = jax.eval_shape(chain.init, updates)
    new_updates, new_state = chain.update(
        updates, _unpack(state, template), params)
    return new_updates, _pack(new_state, updates)

  return optax.GradientTransformation(init, update)

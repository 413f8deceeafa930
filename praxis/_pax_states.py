"""Pax's optimizer state layouts over optax chains (private).

`praxis.optimizers` builds its optimizers by chaining optax transforms,
whose state is a tuple of small states (`FactoredState`, `EmaState`, step
counts...). Pax keeps one state per optimizer, e.g.
`ShardedAdafactorState(count, m, m_scale, vr, vc, v)` for Adafactor.
`pax_layout(chain, ...)` stores the chain's state in such a layout and
rebuilds the tuple for each update (used for Adafactor and Lion; Adam is
written directly in Pax's layout, `_sharded_adam`). Every counted
sub-state counts the same updates, so one `count` holds them all.

For Adafactor, `m` is the momentum (float; Pax may store it as int8 with
`m_scale`, here `m_scale` holds placeholders), `vr`/`vc` the factored row
and column statistics and `v` the unfactored ones, each a tree of the
variables' structure (shape-[1] placeholders where unused).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple

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


# Field of a chained optax sub-state -> field of Pax's state.
ADAFACTOR_FIELDS = {'count': 'count', 'v_row': 'vr', 'v_col': 'vc', 'v': 'v',
                    'ema': 'm'}


def _placeholders(tree: Any) -> Any:
  return jax.tree.map(lambda _: jnp.zeros([1], jnp.float32), tree)


def adafactor_defaults(params: Any) -> dict[str, Any]:
  """Adafactor's slots that no chained state fills (no momentum)."""
  return {'m': _placeholders(params), 'm_scale': _placeholders(params)}


def _is_plain_tuple(x: Any) -> bool:
  return isinstance(x, tuple) and not hasattr(x, '_fields')


def _pack(chain_state: Any, fields: dict[str, Any],
          field_map: Mapping[str, str]) -> None:
  """Copies the chain state's named fields into `fields` (Pax's names)."""
  if isinstance(chain_state, optax.MaskedState):
    _pack(chain_state.inner_state, fields, field_map)
    return
  if _is_plain_tuple(chain_state):
    for sub in chain_state:
      _pack(sub, fields, field_map)
    return
  for name in getattr(chain_state, '_fields', ()):
    if name not in field_map:
      raise TypeError(
          f'optimizer state: no place for the field '
          f'{type(chain_state).__name__}.{name} in Pax\'s layout.')
    fields[field_map[name]] = getattr(chain_state, name)


def _unpack(state: Any, template: Any, field_map: Mapping[str, str]) -> Any:
  """The chain's state (`template`: its structure) from Pax's layout."""
  if isinstance(template, optax.MaskedState):
    return optax.MaskedState(
        inner_state=_unpack(state, template.inner_state, field_map))
  if _is_plain_tuple(template):
    return tuple(_unpack(state, sub, field_map) for sub in template)
  names = getattr(template, '_fields', ())
  if not names:
    return template
  return type(template)(**{n: state[field_map[n]] if isinstance(state, dict)
                           else getattr(state, field_map[n]) for n in names})


def pax_layout(
    chain: optax.GradientTransformation,
    make_state: Callable[..., Any],
    field_map: Mapping[str, str],
    defaults: Callable[[Any], dict[str, Any]] | None = None,
) -> optax.GradientTransformation:
  """`chain` with its state kept in one of Pax's layouts.

  Args:
    chain: An `optax.chain` (its state is a tuple).
    make_state: Builds Pax's state from keyword fields (a NamedTuple class
      or a dict type).
    field_map: Optax field name -> Pax field name.
    defaults: params -> fields that no chained state fills.

  Returns:
    The transformation.
  """

  def pack(chain_state, like):
    fields = dict(defaults(like)) if defaults else {}
    _pack(chain_state, fields, field_map)
    return make_state(**fields)

  def init(params):
    return pack(chain.init(params), params)

  def update(updates, state, params=None):
    template = jax.eval_shape(chain.init, updates)
    new_updates, new_state = chain.update(
        updates, _unpack(state, template, field_map), params)
    return new_updates, pack(new_state, updates)

  return optax.GradientTransformation(init, update)



"""Warm starts: variables loaded from other runs' checkpoints by name rules.

Private to `paxml.tasks_lib` (`SingleTask.apply_init_checkpoint_rules`).

Names are '/'-joined paths: `params/encoder/w` for variables, the
serialized paths of the optimizer state (`0/2/m/params/encoder/w`, ...) for
its tensors, and `ema/params/...` for the checkpoint's EMA of a variable. A
load rule `(regex, format)` maps one of our names (`re.match`) to the
checkpoint's name `format.format(*groups)`; the first rule that matches a
name applies, ignore rules (`re.match`) skip names, and a name loaded from
one checkpoint is not loaded again from the next.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Sequence

from absl import logging
import flax.serialization
import jax
import numpy as np
from paxml import checkpoints
from paxml import train_states
from praxis import base_hyperparams
from praxis import py_utils

TensorProvenance = train_states.TensorProvenance


@dataclasses.dataclass
class _LoadStatus:
  """What the rules of earlier checkpoints already loaded.

  Attributes:
    step: The checkpoint the step came from.
    variables: {our variable name: where it came from}.
    opt_states: {our optimizer state name: where it came from}.
  """

  step: str | None = None
  variables: dict[str, str] = dataclasses.field(default_factory=dict)
  opt_states: dict[str, str] = dataclasses.field(default_factory=dict)


def _flat(tree: Any) -> dict[str, Any]:
  """{'/'-joined path: leaf} of a pytree's serialized (state dict) form."""
  out = {}

  def walk(node, prefix):
    if isinstance(node, dict):
      for key, value in node.items():
        walk(value, f'{prefix}/{key}' if prefix else str(key))
    else:
      out[prefix] = node

  walk(flax.serialization.to_state_dict(tree), '')
  return out


def _replace(tree: Any, new_leaves: dict[str, Any]) -> Any:
  """`tree` with the serialized paths in `new_leaves` replaced."""
  if not new_leaves:
    return tree
  state = flax.serialization.to_state_dict(tree)

  def walk(node, prefix):
    if not isinstance(node, dict):
      return new_leaves.get(prefix, node)
    return {k: walk(v, f'{prefix}/{k}' if prefix else str(k))
            for k, v in node.items()}

  return flax.serialization.from_state_dict(tree, walk(state, ''))


def get_optax_opt_load_rules() -> list[tuple[re.Pattern[str], str]]:
  """Rules reading a praxis Adam state (`m`, `v`) into optax's (`mu`, `nu`)."""
  return [(re.compile(r'(.*)/0/mu/params/(.*)'), '{}/m/params/{}'),
          (re.compile(r'(.*)/0/nu/params/(.*)'), '{}/v/params/{}')]


def get_praxis_opt_state_regex() -> list[re.Pattern[str]]:
  """Names of a praxis Adam state's moments."""
  return [re.compile(r'(.*)/m/params/(.*)'), re.compile(r'(.*)/v/params/(.*)')]


def _any_match(names: Sequence[str], patterns: Sequence[re.Pattern[str]]
               ) -> bool:
  return any(p.match(n) for n in names for p in patterns)


def _compile(rules: Any) -> tuple[list[tuple[re.Pattern[str], str]],
                                  list[re.Pattern[str]]]:
  load = [(re.compile(pattern), ref) for pattern, ref in rules.load_rules]
  ignore = [re.compile(pattern) for pattern in rules.ignore_rules or []]
  return load, ignore


def var_mapping(names: Sequence[str],
                load_rules: Sequence[tuple[re.Pattern[str], str]],
                ignore_rules: Sequence[re.Pattern[str]],
                loaded: dict[str, str], ckpt_path: str,
                safe_load: bool = False) -> dict[str, str]:
  """{our name: the checkpoint's name} for the names the rules load.

  Args:
    names: Our names.
    load_rules: (compiled regex, format) pairs.
    ignore_rules: Compiled regexes of names not to load.
    loaded: Names loaded already (skipped); updated.
    ckpt_path: The checkpoint (recorded in `loaded`).
    safe_load: Raise if a rule's regex matches no name.

  Returns:
    The mapping.
  """
  mapping = {}
  used = set()
  for name in names:
    for pattern, ref in load_rules:
      match = pattern.match(name)
      if match is None:
        continue
      if any(p.match(name) for p in ignore_rules) or name in loaded:
        break
      mapping[name] = ref.format(*match.groups())
      loaded[name] = f'{ckpt_path}/{mapping[name]}'
      used.add(pattern.pattern)
      break
  unused = {p.pattern for p, _ in load_rules} - used
  if safe_load and unused:
    raise ValueError(
        f'The checkpoint loading rule(s) {list(load_rules)} do not serve the '
        'intended purpose; some model variables that were meant to be loaded '
        'from checkpoint are left to their initial (random) values due to '
        f'wrong pattern(s): {unused}.')
  return mapping


def _restore(rules: Any, ckpt_path: str, global_mesh: Any,
             checkpoint_type: Any) -> Any:
  """The other run's TrainState, read from `ckpt_path`."""
  if rules.input_specs_provider_p is None or rules.task_p is None:
    raise ValueError(f'CheckpointLoadingRules for {ckpt_path!r}: task_p and '
                     'input_specs_provider_p are required.')
  ckpt_task = base_hyperparams.instantiate(rules.task_p)
  specs = base_hyperparams.instantiate(
      rules.input_specs_provider_p).get_input_specs()
  if ckpt_task.model.mesh_shape is not None:
    specs = jax.tree.map(py_utils.get_global_input_shape_dtype, specs)
  hps = ckpt_task.model.abstract_init_with_metadata(specs)
  shapes = ckpt_task.create_train_state_unpadded_shapes(hps)
  state_specs = None
  if global_mesh is not None:
    state_specs = ckpt_task.create_train_state_partition_specs(hps)
  if checkpoint_type is None or checkpoint_type == (
      checkpoints.CheckpointType.UNSPECIFIED):
    checkpoint_type = checkpoints.CheckpointType.FLAX
  state = checkpoints.restore_checkpoint(
      shapes, ckpt_path, global_mesh=global_mesh,
      checkpoint_type=checkpoint_type, state_specs=state_specs,
      step=rules.step)
  return ckpt_task, state


def _source_vars(ckpt_task: Any, state: Any, rules: Any,
                 ckpt_path: str) -> dict[str, Any]:
  """The checkpoint's variables by name, with `ema/...` when referenced."""
  sources = _flat(state.mdl_vars)
  wants_ema = any(ref.startswith('ema/') for _, ref in rules.load_rules)
  if not wants_ema:
    return sources
  if not (rules.load_ema_states and ckpt_task.learners[0].optimizer.ema_decay
          > 0.0):
    raise RuntimeError(f'Load rules for {ckpt_path!r} read ema/... but the '
                       'checkpoint task keeps no EMA (or load_ema_states is '
                       'False).')
  from paxml import tasks_lib  # pylint: disable=g-import-not-at-top
  ema = tasks_lib.extract_ema(state).mdl_vars
  sources.update({f'ema/{k}': v for k, v in _flat(ema).items()})
  return sources


def _take(mapping: dict[str, str], ours: dict[str, Any],
          sources: dict[str, Any], ckpt_path: str) -> dict[str, Any]:
  """{our name: the checkpoint's value}, shapes checked."""
  taken = {}
  for name, ref in mapping.items():
    if ref not in sources:
      raise ValueError(f'Checkpoint {ckpt_path!r} has no {ref!r} (for '
                       f'{name!r}); it has e.g. {sorted(sources)[:5]}.')
    value = sources[ref]
    # Differing per-device copies of a pmap state are restored as stored
    # (see `_checkpoint_flax_format`) and loaded as they are, as Pax does.
    device_copies = (np.ndim(value) == np.ndim(ours[name]) + 1
                     and np.shape(value)[1:] == np.shape(ours[name]))
    if np.shape(value) != np.shape(ours[name]) and not device_copies:
      raise ValueError(
          f'{name!r} has shape {np.shape(ours[name])} but {ref!r} in '
          f'{ckpt_path!r} has shape {np.shape(value)}.')
    taken[name] = value
  return taken


def _apply_one(state: Any, provenance: Any, ckpt_path: str, rules: Any,
               status: _LoadStatus, global_mesh: Any,
               checkpoint_type: Any) -> tuple[Any, Any]:
  """Applies the rules of one checkpoint."""
  load_rules, ignore_rules = _compile(rules)
  ours = _flat(state.mdl_vars)
  mapping = var_mapping(list(ours), load_rules, ignore_rules,
                        status.variables, ckpt_path, rules.safe_load)
  ckpt_task, loaded = _restore(rules, ckpt_path, global_mesh,
                               checkpoint_type)
  came_from = TensorProvenance(ckpt_path, rules.step)
  taken = _take(mapping, ours, _source_vars(ckpt_task, loaded, rules,
                                            ckpt_path), ckpt_path)
  state = state.replace(mdl_vars=_replace(state.mdl_vars, taken))
  provenance = provenance.replace(mdl_vars=_replace(
      provenance.mdl_vars, {k: came_from for k in taken}))
  logging.info('Loaded %d variables from %s.', len(taken), ckpt_path)
  ours, theirs = _flat(state.opt_states), _flat(loaded.opt_states)
  to_optax = (rules.load_opt_states and not rules.partial_load_opt_states
              and _any_match(list(ours),
                             [p for p, _ in get_optax_opt_load_rules()])
              and _any_match(list(theirs), get_praxis_opt_state_regex()))
  if rules.partial_load_opt_states or (to_optax and not status.opt_states):
    # Praxis Adam moments go into an optax Adam state by the optax rules.
    opt_rules = get_optax_opt_load_rules() if to_optax else load_rules
    mapping = var_mapping(list(ours), opt_rules, ignore_rules,
                          status.opt_states, ckpt_path)
    taken = _take(mapping, ours, theirs, ckpt_path)
    state = state.replace(opt_states=_replace(state.opt_states, taken))
    provenance = provenance.replace(opt_states=_replace(
        provenance.opt_states, {k: came_from for k in taken}))
  elif rules.load_opt_states and not status.opt_states:
    state = state.replace(opt_states=loaded.opt_states)
    provenance = provenance.replace(opt_states=jax.tree.map(
        lambda _: came_from, loaded.opt_states))
    status.opt_states['all'] = ckpt_path
  if rules.load_step and status.step is None:
    state = state.replace(step=loaded.step)
    provenance = provenance.replace(step=came_from)
    status.step = ckpt_path
  return state, provenance


def apply_rules(all_rules: dict[str, Any], state: Any, provenance: Any,
                global_mesh: Any = None, checkpoint_type: Any = None
                ) -> tuple[Any, Any, bool]:
  """Applies `{checkpoint dir: CheckpointLoadingRules}` in order.

  Args:
    all_rules: The task's `train.init_from_checkpoint_rules`.
    state: The initialised TrainState.
    provenance: Its TrainStateProvenance.
    global_mesh: The mesh to restore onto (None: default placement).
    checkpoint_type: The checkpoints' kind.

  Returns:
    (state, provenance, whether the optimizer states should be recreated
    for the loaded variables: no optimizer state was loaded).
  """
  status = _LoadStatus()
  for ckpt_path, rules in all_rules.items():
    state, provenance = _apply_one(state, provenance, ckpt_path, rules,
                                   status, global_mesh, checkpoint_type)
  return state, provenance, not status.opt_states

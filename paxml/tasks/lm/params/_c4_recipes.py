"""The optimizer and GPT-3 recipes that the C4 experiments share.

Public names (re-exported by `c4`): set_adam_and_learning_rate_schedule,
configure_gpt3_task.
"""

from __future__ import annotations

import math
from typing import Any

import jax
from paxml.tasks.lm import model_params
from praxis import base_layer
from praxis import optimizers
from praxis import pax_fiddle
from praxis import schedules

WeightInit = base_layer.WeightInit
TaskConfig = model_params.TaskConfig


def _global_batch_size(exp: Any, needed_for: str) -> int:
  """PERCORE_BATCH_SIZE times the device count (what derived HPs scale by)."""
  per_core = getattr(exp, 'PERCORE_BATCH_SIZE', None)
  if per_core is None:
    raise ValueError(f'{type(exp).__name__}: {needed_for} is None, so it is '
                     'derived from the global batch, but PERCORE_BATCH_SIZE '
                     'is not set.')
  return max(1, int(per_core * jax.device_count() + 1e-6))


def _cosine_steps(exp: Any) -> tuple[int, int, int]:
  """(warmup, decay start, decay end); unset ones follow GPT-3's MLPerf
  recipe: 265 warmup and 108,600 decay steps at a global batch of 1536,
  scaled inversely with the global batch."""
  warmup, start, end = (exp.LR_COS_WARMUP, exp.LR_COS_DECAY_START,
                        exp.LR_COS_DECAY_END)
  if warmup is None:
    gbs = _global_batch_size(exp, 'LR_COS_WARMUP')
    warmup = math.ceil(265.0 * 1536 / gbs - 1e-6)
  if start is None:
    start = warmup + 1
  if end is None:
    gbs = _global_batch_size(exp, 'LR_COS_DECAY_END')
    end = math.ceil(108600.0 * 1536 / gbs - 1e-6)
  return warmup, start, end


def set_adam_and_learning_rate_schedule(cls: Any, task_p: TaskConfig
                                        ) -> TaskConfig:
  """Adam and the LR_SCHEDULE of the experiment's ADAM_* and LR_* attributes.

  A LEARNING_RATE of None means MLPerf's GPT-3 rate for the global batch
  (2e-5 up to 3,584 sequences, else 3e-5); unset cosine steps are derived
  as `_cosine_steps` says.

  Args:
    cls: The experiment (its CLASS_ATTRs are read).
    task_p: The task config (changed in place).

  Returns:
    `task_p`.
  """
  learning_rate = cls.LEARNING_RATE
  if learning_rate is None:
    gbs = _global_batch_size(cls, 'LEARNING_RATE')
    learning_rate = 2e-5 if gbs <= 3584 else 3e-5
  learner_p = task_p.train.learner
  learner_p.loss_name = 'total_loss'
  learner_p.optimizer = pax_fiddle.Config(
      optimizers.Adam, beta1=cls.ADAM_BETA1 or 0.9,
      beta2=cls.ADAM_BETA2 or 0.999, weight_decay=cls.WEIGHT_DECAY or 0.0,
      epsilon=cls.ADAM_EPSILON or 1e-6,
      epsilon_root=cls.ADAM_EPSILON_ROOT or 0.0,
      clip_gradient_norm_to_value=cls.CLIP_GRADIENT_NORM_TO_VALUE or 5.0,
      clip_threshold=cls.ADAM_CLIP_THRESHOLD or 1.0,
      learning_rate=learning_rate)
  if cls.LR_SCHEDULE == 'linear_rampup_exponential_decay':
    schedule = pax_fiddle.Config(
        schedules.LinearRampupExponentialDecay,
        warmup_steps=cls.LR_LRED_WARMUP, decay_start=cls.LR_LRED_DECAY_START,
        decay_end=cls.LR_LRED_DECAY_END, min_ratio=cls.LR_LRED_MIN_RATIO,
        max=cls.LR_LRED_MAX)
  elif cls.LR_SCHEDULE == 'linear_rampup_cosine_decay':
    warmup, start, end = _cosine_steps(cls)
    schedule = pax_fiddle.Config(
        schedules.LinearRampupCosineDecay, warmup_steps=warmup,
        decay_start=start, decay_end=end, min_ratio=cls.LR_COS_MIN_RATIO,
        max=cls.LR_COS_MAX)
  else:
    raise ValueError(
        f'{type(cls).__name__}: LR_SCHEDULE={cls.LR_SCHEDULE!r} must be one '
        "of ['linear_rampup_cosine_decay', "
        "'linear_rampup_exponential_decay'].")
  learner_p.optimizer.lr_schedule = schedule
  return task_p


def configure_gpt3_task(cls: Any, task_p: TaskConfig) -> TaskConfig:
  """GPT-3's settings (paper and Megatron-LM convergence match).

  Gaussian(0.006) init, no softmax bias or logit cap, no sqrt(D) embedding
  scale, LAYERNORM_EPSILON, biased attention without per-dim scale, tanh
  GELU.

  Args:
    cls: The experiment (its CLASS_ATTRs are read).
    task_p: The task config (changed in place).

  Returns:
    `task_p`.
  """
  model_p = task_p.model
  model_p.params_init = WeightInit.Gaussian(0.006)
  lm_p = model_p.lm_tpl
  lm_p.softmax_tpl.params_init = WeightInit.Gaussian(0.006)
  lm_p.softmax_tpl.feed_forward_tpl.has_bias = False
  lm_p.softmax_tpl.soft_cap_logits = None
  emb_p = lm_p.separate_embedding_tpl or lm_p.softmax_tpl
  emb_p.scale_sqrt_depth = False
  emb_p.lookup_style = cls.EMBEDDING_LOOKUP_STYLE
  if cls.TRAINABLE_POSITION_EMB:
    lm_p.position_emb_tpl.lookup_style = cls.EMBEDDING_LOOKUP_STYLE
  layer_p = model_params.inner_stack(
      lm_p.stacked_transformer_tpl).transformer_layer_params_tpl
  layer_p.ln_tpl.epsilon = cls.LAYERNORM_EPSILON
  layer_p.tr_fflayer_tpl.ln_tpl.epsilon = cls.LAYERNORM_EPSILON
  lm_p.final_ln_tpl.epsilon = cls.LAYERNORM_EPSILON
  layer_p.tr_atten_tpl.internal_enable_per_dim_scale = False
  layer_p.tr_atten_tpl.use_bias = True
  layer_p.tr_fflayer_tpl.activation_tpl.approximate = True
  return task_p

"""CTC (Connectionist Temporal Classification) losses and alignments.

Public: `CtcAlignments`, `ctc_loss_with_alignments` (the loss and the best
frame-to-label alignment, from `optax.ctc_loss_with_forward_probs` run forwards
and backwards), `is_valid_ctc_seq`, `frame_alignment_to_label_alignment`,
`forced_alignment`.

Shapes: logits [B, T, K] (log-probabilities or logits; optax normalizes them),
logitpaddings [B, T], labels [B, N] (right-padded), labelpaddings [B, N].

  loss, aux = ctc_loss_with_alignments(logits, logitpaddings, labels,
                                       labelpaddings)
  loss.shape == (B,); aux.alignment.shape == (B, T)
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from praxis import pytypes

JTensor = pytypes.JTensor
ArrayLike = np.ndarray | JTensor


def _shift(values: ArrayLike, shift_amounts: ArrayLike,
           pad_value) -> JTensor:
  """Shifts each row of `values` right by its `shift_amounts` (left when
  negative) along the last axis, filling with `pad_value`: no wrap-around."""
  n = values.shape[-1]
  source = jnp.arange(n) - shift_amounts.astype(jnp.int32)[..., None]
  source = jnp.broadcast_to(source, values.shape)
  outside = (source < 0) | (source >= n)
  taken = jnp.take_along_axis(values, jnp.where(outside, 0, source), axis=-1)
  return jnp.where(outside, jnp.asarray(pad_value, taken.dtype), taken)


@dataclasses.dataclass
class CtcAlignments:
  """What `ctc_loss_with_alignments` returns besides the loss.

  Attributes:
    alignment: [B, T] best label state per frame: 0 before the first label,
      n >= 1 at (or after) the n-th label.
    logalpha_phi: [T, B, N + 1] forward log-probabilities of staying in a
      state (0: before the first label, N: after the last).
    logalpha_emit: [T, B, N] forward log-probabilities of emitting label n at
      frame t.
    logbeta_phi: [T, B, N + 1] the same as logalpha_phi, backwards in time.
    logbeta_emit: [T, B, N] the same as logalpha_emit, backwards in time.
    state_logprobs: [T, B, N + 1] log-probability of each state per frame
      (alignment is its monotonic argmax).
  """

  alignment: np.ndarray
  logalpha_phi: np.ndarray
  logalpha_emit: np.ndarray
  logbeta_phi: np.ndarray
  logbeta_emit: np.ndarray
  state_logprobs: np.ndarray


def _backward_probs(logits, logitpaddings, labels, labelpaddings, blank_id,
                    logepsilon):
  """logbeta (phi, emit): the forward pass run on reversed time and labels."""
  num_pad = jnp.sum(labelpaddings, axis=1)
  # 'abc..' -> '..cba' -> 'cba..': labels stay right-padded.
  rev_labels = _shift(jnp.flip(labels, axis=1), -num_pad, 0)
  _, phi, emit = optax.ctc_loss_with_forward_probs(
      jnp.flip(logits, axis=1), jnp.flip(logitpaddings, axis=1), rev_labels,
      labelpaddings, blank_id=blank_id, log_epsilon=logepsilon)

  def unreverse(x):
    return _shift(jnp.flip(x, axis=(0, 2)), -num_pad, logepsilon)

  return unreverse(phi), unreverse(emit)


def _monotonic_argmax(state_logprobs, logitpaddings, labelpaddings,
                      logepsilon):
  """[B, T] alignment: per frame the best state that keeps every label
  reachable, never going back and never skipping a label."""
  batch, frames = logitpaddings.shape
  num_labels = labelpaddings.shape[1]
  logit_len = (frames - jnp.sum(logitpaddings, axis=-1))[:, None]
  label_len = (num_labels - jnp.sum(labelpaddings, axis=-1))[:, None]
  # The lowest state at frame t that still leaves time for the rest.
  min_state = jnp.arange(frames)[None, :] - (logit_len - label_len)
  min_state = jnp.clip(min_state, 0, None)
  min_state = jnp.where(min_state > label_len, label_len, min_state)
  states = jnp.arange(num_labels + 1)[None, :]

  def step(last, xs):
    logprobs, lowest = xs
    lowest = jnp.where(last > lowest, last, lowest)
    bad = (states < lowest[:, None]) | (states > last[:, None] + 1)
    best = jnp.argmax(jnp.where(bad, logepsilon, logprobs), axis=-1)
    return best, best

  _, alignment = jax.lax.scan(step, jnp.zeros((batch,), jnp.int32),
                              (state_logprobs, min_state.T))
  return alignment.T


def ctc_loss_with_alignments(
    logits: ArrayLike,
    logitpaddings: ArrayLike,
    labels: ArrayLike,
    labelpaddings: ArrayLike,
    blank_id: int = 0,
    logepsilon: float = -1e5,
) -> tuple[JTensor, CtcAlignments]:
  """The CTC loss per sequence and the best alignment of frames to labels.

  Args:
    logits: [B, T, K] class scores per frame.
    logitpaddings: [B, T], 1 at padded frames (anywhere in the sequence).
    labels: [B, N] label ids, right-padded.
    labelpaddings: [B, N], 0s then 1s.
    blank_id: The blank class.
    logepsilon: log of a tiny number, standing in for log(0).

  Returns:
    `(per_seq_loss [B], CtcAlignments)`.
  """
  logits, logitpaddings = jnp.asarray(logits), jnp.asarray(logitpaddings)
  labels, labelpaddings = jnp.asarray(labels), jnp.asarray(labelpaddings)
  loss, alpha_phi, alpha_emit = optax.ctc_loss_with_forward_probs(
      logits, logitpaddings, labels, labelpaddings, blank_id=blank_id,
      log_epsilon=logepsilon)
  beta_phi, beta_emit = _backward_probs(logits, logitpaddings, labels,
                                        labelpaddings, blank_id, logepsilon)

  def state_logprob(emit, phi):
    # State n (n >= 1) is reached by emitting label n or staying there.
    emit = jnp.pad(emit, [[0, 0], [0, 0], [1, 0]], constant_values=logepsilon)
    return jnp.logaddexp(emit, phi)

  state_logprobs = (state_logprob(alpha_emit, alpha_phi)
                    + state_logprob(beta_emit, beta_phi))
  alignment = _monotonic_argmax(state_logprobs, logitpaddings, labelpaddings,
                                logepsilon)
  return loss, CtcAlignments(
      alignment=alignment, logalpha_phi=alpha_phi, logalpha_emit=alpha_emit,
      logbeta_phi=beta_phi, logbeta_emit=beta_emit,
      state_logprobs=state_logprobs)


def is_valid_ctc_seq(logitpaddings: ArrayLike, labels: ArrayLike,
                     labelpaddings: ArrayLike) -> JTensor:
  """[B] 1.0 where a CTC path exists (frames >= labels + repeated labels).

  A repeated label needs a blank between its copies, hence the extra frames.
  """
  label_len = jnp.sum(1.0 - labelpaddings, axis=-1)
  input_len = jnp.sum(1.0 - logitpaddings, axis=-1)
  repeats = (1.0 - labelpaddings[:, 1:]) * (labels[:, :-1] == labels[:, 1:])
  return (label_len + jnp.sum(repeats, axis=-1) <= input_len).astype(
      jnp.float32)


def frame_alignment_to_label_alignment(
    frame_alignment: ArrayLike, frame_paddings: ArrayLike
) -> tuple[JTensor, JTensor]:
  """From 'label state of each frame' to 'first frame of each label'.

  Args:
    frame_alignment: [B, T] label state per frame (as `CtcAlignments`).
    frame_paddings: [B, T].

  Returns:
    `(label_alignment [B, T], label_lengths [B])`: label_alignment[b, n] is
    the frame where the (n+1)-th label starts, 0 past the last label.
    E.g. frames [0, 0, 1, 1, 2, 3] give [2, 4, 5, 0, 0, 0] and 3.
  """
  frame_alignment = jnp.asarray(frame_alignment)
  batch, frames = frame_alignment.shape
  valid = 1 - jnp.asarray(frame_paddings).astype(jnp.int32)
  previous = jnp.concatenate(
      [jnp.full((batch, 1), -1, frame_alignment.dtype),
       frame_alignment[:, :-1]], axis=-1)
  starts = ((previous != frame_alignment) & (frame_alignment != 0)).astype(
      jnp.int32) * valid
  lengths = jnp.sum(starts, axis=-1)
  never = frames + 1
  positions = jnp.where(starts > 0, jnp.arange(frames, dtype=jnp.int32)[None],
                        never)
  positions = jnp.sort(positions, axis=-1)
  return jnp.where(positions == never, 0, positions), lengths


def forced_alignment(
    logits: ArrayLike,
    logitpaddings: ArrayLike,
    labels: ArrayLike,
    labelpaddings: ArrayLike,
    blank_id: int = 0,
) -> JTensor:
  """[B, N] first frame of each label on the best CTC path; a row is all -1
  where no path exists (see `is_valid_ctc_seq`)."""
  logitpaddings = jnp.asarray(logitpaddings)
  labels, labelpaddings = jnp.asarray(labels), jnp.asarray(labelpaddings)
  _, aux = ctc_loss_with_alignments(logits, logitpaddings, labels,
                                    labelpaddings, blank_id)
  label_alignment, _ = frame_alignment_to_label_alignment(aux.alignment,
                                                          logitpaddings)
  valid = is_valid_ctc_seq(logitpaddings, labels, labelpaddings)
  label_alignment = jnp.where(valid[:, None] > 0, label_alignment, -1)
  return label_alignment[:, :labels.shape[-1]]

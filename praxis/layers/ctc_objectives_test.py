"""CTC loss and alignments: against a numpy forward algorithm and Pax 1.4."""

import itertools
import os

from absl.testing import absltest
import numpy as np
from praxis import test_utils
from praxis.layers import ctc_objectives

_REF = np.load(os.path.join(os.path.dirname(__file__), 'testdata',
                            'speech_ref.npz'))


def _log_softmax(x):
  x = x - x.max(-1, keepdims=True)
  return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _np_ctc_loss(logits, labels, blank=0):
  """-log p(labels | logits) by the textbook forward recursion (one row)."""
  logp = _log_softmax(logits.astype(np.float64))
  ext = [blank]
  for label in labels:
    ext += [label, blank]
  s = len(ext)
  alpha = np.full(s, -np.inf)
  alpha[0] = logp[0, ext[0]]
  if s > 1:
    alpha[1] = logp[0, ext[1]]
  for t in range(1, len(logp)):
    new = np.full(s, -np.inf)
    for i in range(s):
      terms = [alpha[i]]
      if i >= 1:
        terms.append(alpha[i - 1])
      if i >= 2 and ext[i] != blank and ext[i] != ext[i - 2]:
        terms.append(alpha[i - 2])
      new[i] = np.logaddexp.reduce(terms) + logp[t, ext[i]]
    alpha = new
  return -np.logaddexp.reduce(alpha[-2:] if s > 1 else alpha[-1:])


def _brute_force_loss(logits, labels, blank=0):
  """-log of the summed probability of every path that collapses to labels."""
  logp = _log_softmax(logits.astype(np.float64))
  t, k = logp.shape
  total = -np.inf
  for path in itertools.product(range(k), repeat=t):
    collapsed = [c for i, c in enumerate(path)
                 if c != blank and (i == 0 or c != path[i - 1])]
    if collapsed == list(labels):
      total = np.logaddexp(total, sum(logp[i, c] for i, c in enumerate(path)))
  return -total


class LossTest(test_utils.TestCase):

  def test_forward_algorithm_agrees_with_brute_force(self):
    # Checks the numpy reference itself on a case small enough to enumerate.
    logits = self.np_rng.normal(size=(4, 3))
    self.assertAllClose(_np_ctc_loss(logits, [1, 1]),
                        _brute_force_loss(logits, [1, 1]), check_dtypes=False)

  def test_loss_matches_numpy_with_paddings(self):
    logits = self.np_rng.normal(size=(2, 6, 4)).astype(np.float32)
    logitpaddings = np.array([[0] * 6, [0] * 4 + [1] * 2], np.float32)
    labels = np.array([[1, 2, 2], [3, 1, 0]], np.int32)
    labelpaddings = np.array([[0, 0, 0], [0, 0, 1]], np.float32)
    loss, aux = ctc_objectives.ctc_loss_with_alignments(
        logits, logitpaddings, labels, labelpaddings)
    want = [_np_ctc_loss(logits[0], [1, 2, 2]),
            _np_ctc_loss(logits[1, :4], [3, 1])]
    self.assertAllClose(loss, np.array(want, np.float32), atol=1e-4)
    self.assertEqual(aux.alignment.shape, (2, 6))
    self.assertEqual(aux.state_logprobs.shape, (6, 2, 4))

  def test_alignment_follows_a_confident_path(self):
    # Frames say: blank, 1, 1, blank, 2, 2 (very confidently).
    best = [0, 1, 1, 0, 2, 2]
    logits = np.full((1, 6, 3), -20.0, np.float32)
    logits[0, np.arange(6), best] = 20.0
    _, aux = ctc_objectives.ctc_loss_with_alignments(
        logits, np.zeros((1, 6)), np.array([[1, 2]]), np.zeros((1, 2)))
    self.assertArraysEqual(np.asarray(aux.alignment),
                           np.array([[0, 1, 1, 1, 2, 2]]), check_dtypes=False)
    forced = ctc_objectives.forced_alignment(
        logits, np.zeros((1, 6)), np.array([[1, 2]]), np.zeros((1, 2)))
    self.assertArraysEqual(np.asarray(forced), np.array([[1, 4]]),
                           check_dtypes=False)


class HelpersTest(test_utils.TestCase):

  def test_is_valid_counts_repeats(self):
    labels = np.array([[1, 1, 2], [1, 2, 3], [4, 4, 0]])
    labelpaddings = np.array([[0, 0, 0], [0, 0, 0], [0, 0, 1]], np.float32)
    logitpaddings = np.array([[0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 1, 1]],
                             np.float32)
    # Needs: 3 + 1 repeat = 4 > 3 frames; 3 <= 3; 2 + 1 = 3 > 2.
    self.assertArraysEqual(
        np.asarray(ctc_objectives.is_valid_ctc_seq(logitpaddings, labels,
                                                   labelpaddings)),
        np.array([0.0, 1.0, 0.0], np.float32))

  def test_frame_to_label_alignment_by_hand(self):
    frames = np.array([[0, 0, 0, 0, 1, 1, 2, 2, 3, 0, 0],
                       [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 0]], np.int32)
    paddings = np.array([[0] * 9 + [1] * 2, [0] * 10 + [1]], np.float32)
    alignment, lengths = ctc_objectives.frame_alignment_to_label_alignment(
        frames, paddings)
    want = np.zeros((2, 11), np.int32)
    want[0, :3] = [4, 6, 8]
    want[1, :3] = [0, 3, 6]
    self.assertArraysEqual(np.asarray(alignment), want)
    self.assertArraysEqual(np.asarray(lengths), np.array([3, 3], np.int32))


class RealPaxTest(test_utils.TestCase):
  """The real Pax 1.4's loss, forward/backward tables and alignments."""

  def test_matches_real_pax(self):
    args = [_REF[f'ctc/{k}'] for k in ('logits', 'logitpaddings', 'labels',
                                       'labelpaddings')]
    loss, aux = ctc_objectives.ctc_loss_with_alignments(*args)
    self.assertAllClose(loss, _REF['ctc/loss'], atol=1e-4)
    for field in ('logalpha_phi', 'logalpha_emit', 'logbeta_phi',
                  'logbeta_emit', 'state_logprobs'):
      self.assertAllClose(getattr(aux, field), _REF[f'ctc/{field}'],
                          atol=1e-3, rtol=1e-5)
    self.assertArraysEqual(np.asarray(aux.alignment), _REF['ctc/alignment'],
                           check_dtypes=False)
    self.assertArraysEqual(
        np.asarray(ctc_objectives.forced_alignment(*args)),
        _REF['ctc/forced'], check_dtypes=False)


if __name__ == '__main__':
  absltest.main()

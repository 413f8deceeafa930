"""Tests of praxis.metric_utils against numpy."""

from absl.testing import absltest
import numpy as np

from praxis import metric_utils
from praxis import test_utils


class TopKAccuracyTest(test_utils.TestCase):

  def test_matches_numpy_with_ties_and_weights(self):
    logits = np.array([[3.0, 1.0, 2.0],
                       [0.0, 5.0, 5.0],
                       [1.0, 2.0, 3.0],
                       [4.0, 0.0, 1.0]], np.float32)
    labels = np.array([2, 1, 0, 0])
    weights = np.array([1.0, 2.0, 0.5, 0.25], np.float32)
    for k in (1, 2, 3):
      kth = np.sort(logits, axis=-1)[:, -k]
      found = logits[np.arange(4), labels] >= kth
      want = np.sum(found * weights) / max(1.0, weights.sum())
      self.assertAllClose(
          metric_utils.top_k_accuracy(k, logits, label_ids=labels,
                                      weights=weights), want)
    probs = np.eye(3, dtype=np.float32)[labels]
    self.assertAllClose(
        metric_utils.top_k_accuracy(1, logits, label_probs=probs), 0.5)
    with self.assertRaisesRegex(ValueError, 'label_ids or label_probs'):
      metric_utils.top_k_accuracy(1, logits)


if __name__ == '__main__':
  absltest.main()

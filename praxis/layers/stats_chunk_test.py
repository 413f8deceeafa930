"""stats.compute_stats and chunk.chunk/unchunk against numpy."""

from absl.testing import absltest
from absl.testing import parameterized
import numpy as np
from praxis.layers import chunk
from praxis.layers import stats


class StatsTest(absltest.TestCase):

  def test_skips_padded_entries(self):
    x = np.array([[1.0, -7.0, 3.0], [5.0, 2.0, 100.0]], np.float32)
    pad = np.array([[0, 1, 0], [0, 0, 1]], np.float32)
    valid = x[pad == 0]  # 1, 3, 5, 2
    out = stats.compute_stats(x, pad)
    np.testing.assert_allclose(out.mean_v, valid.mean(), rtol=1e-6)
    np.testing.assert_allclose(out.std_v, valid.std(), rtol=1e-6)
    np.testing.assert_allclose(out.max_v, 5.0)
    with self.assertRaisesRegex(ValueError, 'rank'):
      stats.compute_stats(x, pad[0])


class ChunkTest(parameterized.TestCase):

  @parameterized.parameters(((2, 7, 3), 1, 3), ((5, 4), 0, 2), ((2, 3, 5), -1, 4))
  def test_round_trip_and_layout(self, shape, axis, size):
    x = np.random.default_rng(0).normal(size=shape).astype(np.float32)
    chunks = np.asarray(chunk.chunk(x, chunk_size=size, axis=axis))
    length = shape[axis]
    self.assertEqual(chunks.shape[0], -(-length // size))
    # Chunk i holds positions i*C ... i*C + C - 1 of the axis (zeros beyond).
    padded = np.concatenate(
        [x, np.zeros(shape[:axis % len(shape)] + (-length % size,)
                     + shape[axis % len(shape) + 1:], np.float32)],
        axis=axis)
    for i in range(chunks.shape[0]):
      want = np.take(padded, range(i * size, (i + 1) * size), axis=axis)
      np.testing.assert_array_equal(chunks[i], want)
    back = chunk.unchunk(chunks, axis=axis % len(shape), seqlen=length)
    np.testing.assert_array_equal(back, x)


if __name__ == '__main__':
  absltest.main()

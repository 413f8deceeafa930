"""Tests of the moving-squares videos and that the VQ-VAE learns them."""

import pathlib
import tempfile

from absl.testing import absltest
import numpy as np
from tensorboard.backend.event_processing import event_accumulator

from paxml import executors
from paxml import experiment_registry
from paxml import train
from paxml.tasks.vision.params import video_vqvae
from praxis import test_utils

_EXP = 'tasks.vision.params.video_vqvae.MovingSquaresVQVae'


def _scalars(summary_dir: pathlib.Path, tag: str) -> dict[int, float]:
  acc = event_accumulator.EventAccumulator(str(summary_dir))
  acc.Reload()
  return {e.step: e.value for e in acc.Scalars(tag)}


class MovingSquaresTest(test_utils.TestCase):

  def test_squares_by_hand(self):
    videos = video_vqvae.moving_squares(64, num_frames=7, size=6, channels=2,
                                        square=2, seed=3)
    self.assertEqual(videos.shape, (64, 7, 6, 6, 2))
    self.assertAllClose(videos, video_vqvae.moving_squares(
        64, num_frames=7, size=6, channels=2, square=2, seed=3))
    for video in videos:
      colour = video.reshape(-1, 2).max(axis=0)
      self.assertTrue(np.all((colour >= 0.5) & (colour <= 1.0)))
      corners = []
      for frame in video:
        lit = np.argwhere(frame[..., 0] > 0)
        # One 2x2 square of one colour, the rest black.
        self.assertLen(lit, 4)
        (y, x), (y1, x1) = lit.min(axis=0), lit.max(axis=0)
        self.assertEqual((y1 - y, x1 - x), (1, 1))
        self.assertAllClose(frame[y:y + 2, x:x + 2], np.broadcast_to(
            colour, (2, 2, 2)))
        self.assertAllClose(frame.sum(axis=(0, 1)), 4 * colour)
        corners.append((y, x))
      # Replayed step by step: each axis keeps its speed and reverses only
      # where the next step would leave [0, size - square] = [0, 4].
      pos = np.array(corners[0])
      velocity = np.array(corners[1]) - pos
      self.assertTrue(np.all(np.abs(velocity) <= 1) and np.any(velocity))
      for corner in corners[1:]:
        out = (pos + velocity < 0) | (pos + velocity > 4)
        velocity = np.where(out, -velocity, velocity)
        pos = pos + velocity
        self.assertArraysEqual(np.array(corner), pos)

  def test_bad_sizes_are_named(self):
    with self.assertRaisesRegex(ValueError, r'`square` \(9\) must fit'):
      video_vqvae.moving_squares(2, size=8, square=9)
    with self.assertRaisesRegex(ValueError, '`num_frames` must be >= 1'):
      video_vqvae.moving_squares(2, num_frames=0)


class MovingSquaresVQVaeTest(test_utils.TestCase):

  def test_reconstruction_loss_falls(self):
    exp = experiment_registry.get(_EXP)()
    configs = train.ExperimentConfigs.from_experiment(exp, _EXP)
    # One stage (no downsampling) compiles in half the time of two.
    vqvae_p = configs.task.model.vqvae_tpl
    vqvae_p.channel_multipliers = (1,)
    vqvae_p.temporal_downsample = ()
    steps = 30
    configs.task.train.num_train_steps = steps
    configs.task.train.summary_interval_steps = 1
    configs.datasets[0].batch_size = 8
    job_dir = pathlib.Path(tempfile.mkdtemp())
    train.train_and_evaluate(configs, executors.RunOptions(
        job_log_dir=job_dir, enable_checkpoint_saving=False))
    recon = _scalars(job_dir / 'summaries' / 'train',
                     'Metrics/reconstruction_loss')
    self.assertLen(recon, steps)
    last = np.mean([recon[s] for s in sorted(recon)[-5:]])
    self.assertLess(last, 0.5 * recon[min(recon)])


if __name__ == '__main__':
  absltest.main()

"""The README's default job: the layer demo learns its target function."""

from absl.testing import absltest
from praxis import layer_demo


class LayerDemoTest(absltest.TestCase):

  def test_loss_falls(self):
    initial, final = layer_demo.train(num_steps=600)
    # A constant predictor scores about 0.2 (the target's variance); the MLP
    # must explain most of it.
    self.assertGreater(initial, 0.1)
    self.assertLess(final, initial / 5)


if __name__ == '__main__':
  absltest.main()

"""Tests of graphviz_utils.render (skipped without the graphviz package)."""

import importlib.util

from absl.testing import absltest
from paxml.tools.fiddle import graphviz_utils
from paxml.tools.fiddle import test_fixtures


@absltest.skipIf(importlib.util.find_spec('graphviz') is None,
                 'needs the graphviz package')
class RenderTest(absltest.TestCase):

  def test_graph_shows_the_settings_and_no_annotations(self):
    config = test_fixtures.SampleExperimentNewBaseline(
        foo_setting=777).experiment_fixture()
    config.task.model.activation_split_dims_mapping.out = ['axis_q']
    source = graphviz_utils.render(config=config).source
    self.assertIn('777', source)
    self.assertIn('SampleModel', source)
    self.assertIn('axis_q', source)
    plain = graphviz_utils.render(config=config,
                                  remove_sharding_annotations=True).source
    self.assertNotIn('axis_q', plain)


if __name__ == '__main__':
  absltest.main()

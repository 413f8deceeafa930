"""LmTextInput refuses a restored state that does not fit (one line)."""

import json
import os
import tempfile

from absl.testing import absltest

from paxml import grain_input
from praxis import base_hyperparams
from praxis import pax_fiddle


class RestoredStateTest(absltest.TestCase):

  def setUp(self):
    super().setUp()
    folder = self.enter_context(tempfile.TemporaryDirectory())
    self.path = os.path.join(folder, 'docs.jsonl')
    with open(self.path, 'w') as f:
      f.writelines(json.dumps({'text': f'text number {i}'}) + '\n'
                   for i in range(40))

  def _input(self):
    return base_hyperparams.instantiate(pax_fiddle.Config(
        grain_input.LmTextInput, file_pattern=self.path, seq_len=6,
        batch_size=2, is_training=True, num_infeed_hosts=1,
        input_random_seed=3))

  def test_bad_states_are_named(self):
    inp = self._input()
    for _ in range(3):
      inp.get_next()
    state = json.loads(inp._get_state_internal())
    self.assertEqual(state['emitted'], 3)
    for emitted in (-1, 'x'):
      with self.assertRaisesRegex(
          ValueError, rf"LmTextInput 'train': the restored state has "
          rf'emitted={emitted!r}; expected an integer >= 0'):
        self._input()._set_state_internal(
            json.dumps(dict(state, emitted=emitted)).encode())
    state['iterator']['parent_state']['next_index'] = -5
    with self.assertRaisesRegex(
        ValueError, "LmTextInput 'train': the restored iterator state does "
        'not fit the data'):
      self._input()._set_state_internal(json.dumps(state).encode())


if __name__ == '__main__':
  absltest.main()

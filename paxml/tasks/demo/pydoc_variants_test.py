"""The MQA and LoRA demo variants learn in short, shrunken runs."""

import pathlib
import tempfile

from absl.testing import absltest
import jax
import jax.numpy as jnp
import numpy as np
from paxml import checkpoints
from paxml import executors
from paxml import train
from paxml import train_states
from paxml.tasks.demo import pydoc_lm
from paxml.tasks.demo import pydoc_variants
from praxis import base_hyperparams
from praxis import base_layer
from praxis import tokenizers
from tensorboard.backend.event_processing import event_accumulator

STEPS = 100


class _Tiny:
  """Shrinks a demo experiment to a run of seconds, compiling as few programs
  as it can (summaries at every step: one train-step program; no evaluation
  on the training data)."""

  MODEL_DIMS = 64
  HIDDEN_DIMS = 128
  NUM_LAYERS = 1
  NUM_HEADS = 4
  SEQ_LEN = 64
  BATCH_SIZE = 16
  DROPOUT = 0.0
  NUM_TRAIN_STEPS = STEPS
  WARMUP_STEPS = 5
  LEARNING_RATE = 1e-2

  def task(self):
    task_p = super().task()  # pytype: disable=attribute-error
    train_p = task_p.train
    steps = self.NUM_TRAIN_STEPS
    train_p.eval_interval_steps = train_p.save_interval_steps = steps
    train_p.summary_interval_steps = 1
    train_p.eval_skip_train = True
    return task_p


class TinyBase(_Tiny, pydoc_lm.PydocTransformerLm):
  NUM_TRAIN_STEPS = 80


class TinyMqa(_Tiny, pydoc_variants.PydocMqaLm):
  pass


class TinyLora(_Tiny, pydoc_variants.PydocLoraLm):
  NUM_TRAIN_STEPS = 60
  LEARNING_RATE = 3e-2


def run(exp) -> tuple[pathlib.Path, float]:
  """Trains `exp`; (job dir, final test log-perplexity)."""
  name = type(exp).__name__
  configs = train.ExperimentConfigs.from_experiment(exp, name)
  job_dir = pathlib.Path(tempfile.mkdtemp())
  train.train_and_evaluate(configs, executors.RunOptions(
      job_log_dir=job_dir, eval_on_test=True))
  acc = event_accumulator.EventAccumulator(
      str(job_dir / 'summaries' / 'eval_test_test'))
  acc.Reload()
  return job_dir, acc.Scalars('Metrics/log_pplx')[-1].value


def params_of(exp, job_dir: pathlib.Path) -> dict[str, np.ndarray]:
  """The final checkpoint's variables, flattened with '/'."""
  task = base_hyperparams.instantiate(exp.task())
  specs = base_hyperparams.instantiate(
      exp.get_input_specs_provider_params()).get_input_specs()
  with base_layer.JaxContext.new_context():
    shapes = jax.eval_shape(
        lambda b: task.model.init(jax.random.PRNGKey(0), b), specs)
  state = checkpoints.restore_checkpoint(
      train_states.TrainState(step=jax.ShapeDtypeStruct((), jnp.int32),
                              mdl_vars={'params': shapes['params']},
                              opt_states=[]),
      job_dir / 'checkpoints',
      checkpoint_type=checkpoints.CheckpointType.GDA)
  flat = jax.tree_util.tree_flatten_with_path(state.mdl_vars['params'])[0]
  return {'/'.join(k.key for k in path): np.asarray(v) for path, v in flat}


def unigram_baseline(exp) -> float:
  files = exp._files()  # pylint: disable=protected-access
  tok = tokenizers.SentencePieceTokenizer(
      train_on=files['train'], vocab_size=exp.VOCAB_SIZE)
  return pydoc_lm.unigram_log_pplx(files['train'], files['test'], tok)


class PydocVariantsTest(absltest.TestCase):

  def test_mqa_learns(self):
    exp = TinyMqa()
    job_dir, log_pplx = run(exp)
    self.assertLess(log_pplx, unigram_baseline(exp) - 0.2)
    params = params_of(exp, job_dir)
    key_w = [k for k in params if k.endswith('self_attention/key/w')]
    self.assertNotEmpty(key_w)
    self.assertEqual(params[key_w[0]].shape, (64, 16))  # [D, H]: one head.

  def test_lora_trains_only_adapters(self):
    base_dir, base_pplx = run(TinyBase())
    lora = TinyLora()
    lora.INIT_FROM_CHECKPOINT = str(base_dir / 'checkpoints')
    lora_dir, lora_pplx = run(lora)
    self.assertLess(lora_pplx, unigram_baseline(lora) - 0.2)
    self.assertLess(lora_pplx, base_pplx - 0.02)  # The adapters learned.
    before = params_of(TinyBase(), base_dir)
    after = params_of(lora, lora_dir)
    adapters = {k for k in after if 'lora' in k}
    self.assertEqual(set(after) - adapters, set(before))
    self.assertLen(adapters, 2 * (4 + 2))  # q, k, v, post; 2 ffn linears.
    for k, v in before.items():
      np.testing.assert_array_equal(after[k], v, err_msg=k)
    for k in adapters:
      if k.endswith('lora_b'):  # Zero-initialised: any change is training.
        self.assertGreater(np.abs(after[k]).max(), 0, k)


if __name__ == '__main__':
  absltest.main()

"""SeqIO tasks and mixtures as a Pax input (needs seqio and TensorFlow).

Public names: SeqIOInput, LanguageModelFeatures, PackedLanguageModelFeatures,
SequenceModelFeatures, SequenceModelFeaturesWithTaskInfo,
PackedSequenceModelFeatures, RemoveProvenance, UnflattenAndRemoveProvenance,
MetricType, get_eval_hparams_for_seqio, select_split, is_packing_on,
should_process_outputs, process_outputs, maybe_update_decode_output_keys,
import_seqio, SEQIO_INSTALL.

This module imports without seqio: configs can be written, printed and
edited anywhere, and seqio and TensorFlow are imported when a `SeqIOInput`
is built or a feature converter runs. Without them that raises one
`ImportError` saying `pip install 'pax-jax[seqio]'`.

`SeqIOInput` reads this host's shard of a registered SeqIO task or mixture
(`seqio.ShardInfo(infeed_host_index, num_infeed_hosts)`), converts each
example with `feature_converter` to the keys a Pax model reads, and batches
them. Training data is shuffled and repeated (by default); eval data with
`reset_for_eval=True` is read once, cached, and padded with copies of one
example (`eval_sample_weights` 0) so that every host emits the same number of
batches. With `use_enumeration` every example carries provenance keys
(`py_utils.SHARD_INDEX_KEY`, ...) by which `compute_metrics` joins model
outputs to the task's targets.

Example:

  p = pax_fiddle.Config(
      SeqIOInput, mixture_name='c4_v220_unsupervised', split_name='train',
      task_feature_lengths={'targets': 1024}, batch_size=8,
      feature_converter=LanguageModelFeatures(pack=True), is_training=True)
  inp = base_hyperparams.instantiate(p)
  batch = inp.get_next()  # NestedMap(ids, labels, weights, paddings, ...)

Tests: seqio_input_test.py (configs, the import error, pure helpers; no
seqio needed) and seqio_input_with_seqio_test.py (rows and metrics of an
in-test task; skipped where seqio is absent). Upstream's seqio_input_test.py
passes but for `test_input_take_first_k` (eval_loop_num_batches > 1 with
reset_for_eval, which `praxis.base_input` refuses).

The module is longer than 800 lines because it keeps upstream's one public
module: the input, its feature converters and the eval helpers are all
reached as `seqio_input.X` by existing experiments.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import enum
import io
import os
from typing import Any
from typing import TextIO

from absl import logging
from etils import epath
import jax
import numpy as np

from praxis import base_hyperparams
from praxis import base_input
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap
NestedNpTensor = pytypes.NestedNpTensor

SEQIO_INSTALL = "pip install 'pax-jax[seqio]'"
SHARD_INDEX_KEY = py_utils.SHARD_INDEX_KEY
NUM_SHARDS_KEY = py_utils.NUM_SHARDS_KEY
INDEX_WITHIN_SHARD_KEY = py_utils.INDEX_WITHIN_SHARD_KEY
EVAL_METRICS_PREFIX = 'scoring_eval'
DECODE_METRICS_PREFIX = 'decoder'
# Keys of the LanguageModel outputs that SeqIO metrics read.
_LM_DECODER_OUT_KEY = 'decoded_substr'
_LM_SCORE_KEY = 'scores'
_TASK_ID_KEYS = ('src_task_ids', 'tgt_task_ids', 'task_ids')


def import_seqio(user: str = 'SeqIOInput') -> tuple[Any, Any]:
  """(seqio, tensorflow), or one ImportError telling how to install them."""
  try:
    # pylint: disable=g-import-not-at-top
    import seqio
    import tensorflow.compat.v2 as tf
    # pylint: enable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        f'{user} needs seqio and TensorFlow, which are not installed: run '
        f'`{SEQIO_INSTALL}`.'
    ) from e
  return seqio, tf


def select_split(task: str, split_name: str | Callable[[str], str]) -> str:
  """`split_name(task)` if it is callable, else `split_name`."""
  return split_name(task) if callable(split_name) else split_name


def is_packing_on(fc: Any) -> bool:
  """Whether a feature converter packs examples (False if it cannot tell)."""
  return bool(getattr(fc, 'pack', False))


class MetricType(enum.Enum):
  """What SeqIO metrics are computed from."""

  PREDICT = 1  # Decoded outputs (`predict_metric_fns`).
  SCORE = 2  # Scores of the targets (`score_metric_fns`).


# ----------------------------------------------------------------------------
# Provenance (enumeration) keys.
# ----------------------------------------------------------------------------


def _is_padding(example: Mapping[str, Any]) -> bool:
  return all(int(example[k]) == -1 for k in py_utils.ENUM_PROVENANCE_KEYS)


def _add_fake_enumeration(example: dict[str, Any],
                          fake_val: int = -1) -> dict[str, Any]:
  """`example` with every provenance key set to `fake_val`."""
  _, tf = import_seqio('SeqIOInput')
  example[py_utils.SHARD_INDEX_KEY] = tf.constant(fake_val, tf.int32)
  example[py_utils.NUM_SHARDS_KEY] = tf.constant(fake_val, tf.int32)
  example[py_utils.INDEX_WITHIN_SHARD_KEY] = tf.constant(fake_val, tf.int64)
  return example


def _enumerate_dataset(ds: Any, is_training: bool, shard_info: Any,
                       is_mock_tpu: bool = False) -> Any:
  """Adds the provenance keys: (shard, num shards, index within the shard).

  Training examples get -1s (they are never joined to metrics), and with
  `is_mock_tpu` every example 1s (a mock backend's dummy values).
  """
  _, tf = import_seqio('SeqIOInput')
  if is_training or is_mock_tpu:
    fake_val = -1 if is_training else 1
    return ds.map(lambda ex: _add_fake_enumeration(ex, fake_val),
                  num_parallel_calls=tf.data.AUTOTUNE)
  index, num_shards = (0, 1) if shard_info is None else (
      shard_info.index, shard_info.num_shards)

  def add(position, ex):
    ex[py_utils.SHARD_INDEX_KEY] = tf.constant(index, tf.int32)
    ex[py_utils.NUM_SHARDS_KEY] = tf.constant(num_shards, tf.int32)
    ex[py_utils.INDEX_WITHIN_SHARD_KEY] = tf.cast(position, tf.int64)
    return ex

  return ds.enumerate().map(add, num_parallel_calls=tf.data.AUTOTUNE)


def maybe_update_decode_output_keys(
    process_decode_output: Sequence[tuple[str, Any]], decode_out: NestedMap
) -> Sequence[tuple[str, Any]]:
  """Re-keys `process_decode_out` pairs by their SeqIO enumeration ids.

  Args:
    process_decode_output: The (key, value) pairs of
      `model.process_decode_out`, one per non-padded example, in batch order.
    decode_out: The `model.decode` results of the batch, padded rows
      included; unchanged pairs are returned if it has no provenance keys.

  Returns:
    The pairs with keys replaced by `py_utils.get_enumeration_id`.
  """
  provenance, _ = py_utils.filter_by_matching_keys(
      decode_out, [py_utils.PROVENANCE_PREFIX])
  if not provenance:
    return process_decode_output
  keys = []
  for example in py_utils.tree_unstack(provenance, 0):
    key = py_utils.get_enumeration_id(example)
    if key is None:
      raise ValueError(f'Cannot build an enumeration id from {example}.')
    if not _is_padding(example):
      keys.append(key)
  if len(keys) != len(process_decode_output):
    raise RuntimeError(
        'The length of enum keys != num kv-pairs returned by '
        f'process_decode_out: {len(keys)} non-padded examples in the batch '
        f'but {len(process_decode_output)} pairs; it must return one pair '
        'per example with eval_sample_weights > 0.'
    )
  return [(k, v) for k, (_, v) in zip(keys, process_decode_output)]


# ----------------------------------------------------------------------------
# SeqIOInput.
# ----------------------------------------------------------------------------


class SeqIOInput(base_input.BaseInput):
  """Batches of a SeqIO task or mixture (see the module docstring).

  Attributes:
    mixture_name: Name of a registered SeqIO task or mixture (import the
      module that registers it).
    mixture_or_task: A `seqio.Task` or `seqio.Mixture` object, instead of a
      name.
    split_name: The split, e.g. 'train' or 'validation'.
    deterministic_input: Deterministic (index-based) input; not supported.
    task_feature_lengths: Sequence length of each task feature, e.g.
      {'inputs': 1024, 'targets': 256}; longer examples are truncated.
    feature_converter: Maps SeqIO features to model keys, e.g.
      `LanguageModelFeatures(pack=True)` (an object or a config of one).
    shuffle: Shuffle; None: only non-deterministic training data. Eval data
      is never shuffled (it would break the joins of metrics).
    repeat: Repeat forever; None: only non-deterministic training data.
    use_cached: Read the task's offline cache.
    eval_auto_pad: Pad eval data (reset_for_eval) to a whole number of
      batches on every host, with `eval_sample_weights` 0.
    drop_remainder: Drop the last partial batch.
    num_batches_to_skip: Batches to skip at the start (training only), e.g.
      not to reuse data after a restart.
    trim_output_features: Passed to `get_dataset`: trim features to
      `task_feature_lengths`.
    try_in_mem_cache: Passed to `get_dataset`: cache small data in memory.
    deterministic_input_start_index: Where deterministic input starts.
    eval_metrics_targets_length: Length of the targets when they are read as
      ground truth for metrics (None: untruncated); `get_next` is unchanged.
    use_enumeration: Add provenance keys and join metrics by them.
    annotate_padding_fields: Also zero `weights` (and set `paddings`) of
      padded eval examples.
    overridden_vocab: The vocabulary of `ids_to_strings` (default: the
      task's output features').
    enable_symbolic_checkpointing: tf.data symbolic checkpoints of the
      iterator when input checkpointing is on.
    experimental_enable_index_shuffle: TFDS index shuffle (for symbolic
      checkpoints).
    log_preprocessed_targets: Keep the preprocessed targets in the decoder
      outputs written to disk.
    eval_enable_cache: Cache the eval epoch (for reproducible evals).
    eval_num_examples: Examples in this host's eval shard, if known (saves a
      pass over the data).
    warm_start: Start tf.data's background work when the iterator is made.
    eval_metrics_filter_targets_fields: Keep only these fields of each
      example read as ground truth for metrics (None: all), to bound the
      memory they take.
    read_config: The `tfds.ReadConfig` (its `options` included) that every
      TFDS read uses, before the fields above adjust it (None: a new one).
  """

  @dataclasses.dataclass(frozen=True)
  class DeterministicInput:
    """Where deterministic input starts.

    Attributes:
      start_step: Subtracted from the latest model step (e.g. finetuning).
      example_index_offset: Added to the start example index.
      _latest_model_step: Set by the runner: the latest checkpointed step.
    """

    start_step: int = 0
    example_index_offset: int = 0
    _latest_model_step: int = 0

  mixture_name: str | None = None
  mixture_or_task: Any = None
  split_name: str | None = None
  deterministic_input: bool = False
  task_feature_lengths: Mapping[str, int] | None = None
  feature_converter: Any = None
  shuffle: bool | None = None
  repeat: bool | None = None
  use_cached: bool = False
  eval_auto_pad: bool = True
  drop_remainder: bool = True
  num_batches_to_skip: int | None = None
  trim_output_features: bool = True
  try_in_mem_cache: bool = True
  deterministic_input_start_index: pax_fiddle.Config[DeterministicInput] = (
      pax_fiddle.template_field(DeterministicInput))
  eval_metrics_targets_length: int | None = None
  use_enumeration: bool = True
  annotate_padding_fields: bool = False
  overridden_vocab: Any = None
  enable_symbolic_checkpointing: bool | None = True
  experimental_enable_index_shuffle: bool | None = True
  log_preprocessed_targets: bool | None = False
  eval_enable_cache: bool = True
  eval_num_examples: int | None = None
  warm_start: bool = True
  eval_metrics_filter_targets_fields: list[str] | None = None
  read_config: Any = None

  def __post_init__(self):
    if not self.name:
      source = self.mixture_name or getattr(self.mixture_or_task, 'name', '')
      self.name = f'{source or "seqio"}_{self.split_name}'
    if (not self.is_training and self.input_random_seed is None
        and self.use_enumeration):
      self.input_random_seed = 42  # Enumeration must not vary between runs.
    super().__post_init__()
    self._check_fields()
    self._seqio, self._tf = import_seqio(f'SeqIOInput {self.name!r}')
    self.configure_tf_data_options(self.read_config)
    self._mixture_or_task_inst = (
        self.mixture_or_task
        or self._seqio.get_mixture_or_task(self.mixture_name))
    self._shard_info = self._seqio.ShardInfo(
        index=self.infeed_host_index, num_shards=self.num_infeed_hosts)
    if not self.is_training and self.is_task:
      self._check_eval_task()
    self.dataset = self._get_dataset()
    self._iter = self.dataset.as_numpy_iterator()
    self._cached_targets = None
    self._num_eval_examples = self._num_eval_examples_of_all_hosts()
    self.is_targets_init = False

  def _check_fields(self) -> None:
    """Config errors that need no seqio."""
    if bool(self.mixture_name) == (self.mixture_or_task is not None):
      raise ValueError(
          f'SeqIOInput {self.name!r}: set exactly one of mixture_name and '
          f'mixture_or_task (got {self.mixture_name!r} and '
          f'{self.mixture_or_task!r}).')
    for field in ('split_name', 'task_feature_lengths', 'feature_converter'):
      if getattr(self, field) is None:
        raise self._error(field, 'must be set')
    if self.deterministic_input:
      raise base_hyperparams.ConfigError(
          f'SeqIOInput {self.name!r}: deterministic_input is not supported.')
    if self.repeat and self.eval_loop_num_batches is None:
      raise base_hyperparams.ConfigError(
          f'SeqIOInput {self.name!r}: Dataset has eval_loop_num_batches set '
          'to None while repeat is True. This would lead to an endless eval.')
    if self.reset_for_eval and self.repeat:
      raise self._error('repeat', 'makes an eval with reset_for_eval endless')
    if self.num_batches_to_skip is not None and self.num_batches_to_skip < 0:
      raise self._error('num_batches_to_skip', 'must be >= 0')
    if self.is_training and self.split_name != 'train':
      logging.warning('SeqIOInput %s trains on split %r.', self.name,
                      self.split_name)

  def _check_eval_task(self) -> None:
    if (self.task_inst.score_metric_fns
        and isinstance(self.feature_converter, LanguageModelFeatures)
        and not self.feature_converter.weights_on_targets_only):
      raise base_hyperparams.ConfigError(
          f'SeqIOInput {self.name!r}: All language modeling scoring evals '
          'must set LanguageModelFeatures.weights_on_targets_only=True (the '
          'task has score_metric_fns).')

  def configure_tf_data_options(self, read_config: Any = None) -> None:
    """Sets seqio's TFDS read config: `read_config` (a new
    `tfds.ReadConfig` if None) with warm start and symbolic checkpointing as
    the fields say."""
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    tf = self._tf
    if read_config is None:
      read_config = tfds.ReadConfig()
    options = read_config.options
    if options is None:
      options = tf.data.Options()
    if self.warm_start and hasattr(options.experimental_optimization,
                                   'warm_start'):
      options.experimental_optimization.warm_start = True
    if self.input_checkpointing_enabled and self.enable_symbolic_checkpointing:
      options.experimental_symbolic_checkpoint = True
      read_config.experimental_index_shuffle = (
          self.experimental_enable_index_shuffle)
      readahead = getattr(tfds, 'Readahead', None)  # Not in every TFDS.
      if self.experimental_enable_index_shuffle and readahead is not None:
        read_config.override_readahead = readahead.DISABLE
    read_config.options = options
    self._seqio.set_tfds_read_config_override(read_config)

  # Properties.

  @property
  def is_deterministic(self) -> bool:
    return False

  @property
  def should_shuffle(self) -> bool:
    if self.shuffle is None:
      return self.is_training and not self.is_deterministic
    return bool(self.shuffle) and self.is_training

  @property
  def should_repeat(self) -> bool:
    if self.repeat is None:
      return self.is_training and not self.is_deterministic
    return bool(self.repeat)

  @property
  def mixture_or_task_inst(self) -> Any:
    return self._mixture_or_task_inst

  @property
  def is_task(self) -> bool:
    return isinstance(self._mixture_or_task_inst, self._seqio.Task)

  @property
  def is_mixture(self) -> bool:
    """Whether the input reads a registered SeqIO mixture."""
    return (self._mixture_or_task_inst.name
            in self._seqio.MixtureRegistry.names())

  @property
  def is_mock_tpu(self) -> bool:
    """Whether JAX runs on a mock TPU backend (never, outside Google)."""
    return py_utils.is_mock_tpu_backend()

  @property
  def task_inst(self) -> Any:
    return self._mixture_or_task_inst

  # The data.

  def _get_backing_ds(self, shuffle: bool, num_epochs: int,
                      shard_info: Any) -> Any:
    ds = self._mixture_or_task_inst.get_dataset(
        sequence_length=self.task_feature_lengths, split=self.split_name,
        shuffle=shuffle, num_epochs=num_epochs, shard_info=shard_info,
        use_cached=self.use_cached, seed=self.input_random_seed,
        trim_output_features=self.trim_output_features,
        try_in_mem_cache=self.try_in_mem_cache)
    ds = self.feature_converter(
        ds, task_feature_lengths=self.task_feature_lengths)
    if self.use_enumeration:  # After the converter, which drops unknown keys.
      ds = _enumerate_dataset(ds, self.is_training, shard_info)
    return ds

  def _get_dataset(self) -> Any:
    tf = self._tf
    ds = self._get_backing_ds(self.should_shuffle,
                              -1 if self.should_repeat else 1,
                              self._shard_info)
    ds = self._pad_to_batch_size(ds)
    ds = ds.batch(self.batch_size, drop_remainder=self.drop_remainder,
                  num_parallel_calls=tf.data.AUTOTUNE)
    if self.num_batches_to_skip:
      if self.is_training:
        ds = ds.skip(self.num_batches_to_skip)
      else:
        logging.warning('SeqIOInput %s: num_batches_to_skip is ignored in '
                        'eval.', self.name)
    return ds

  def _pad_example(self, ex: Any) -> Any:
    ex = NestedMap.FromNestedDict(ex)
    ex.eval_sample_weights = 0.0
    if self.use_enumeration:
      ex = _add_fake_enumeration(ex)
    if self.annotate_padding_fields and 'weights' in ex:
      ex.weights *= 0
      if 'paddings' in ex:
        ex.paddings = 1 - ex.weights
    return ex

  def _pad_to_batch_size(self, ds: Any) -> Any:
    """Adds `eval_sample_weights`; pads one eval epoch to whole batches."""

    def add_weight(ex):
      ex = NestedMap.FromNestedDict(ex)
      ex.eval_sample_weights = 1.0
      return ex

    ds = ds.map(add_weight)
    if (self.is_training or not self.reset_for_eval or not self.eval_auto_pad
        or self.should_repeat):
      return ds
    if self.eval_enable_cache:
      ds = ds.cache()  # The same examples in every eval.
    local_num = self.eval_num_examples
    if not local_num:
      local_num = sum(1 for _ in ds)
    local_batches = -(-local_num // self.batch_size)
    num_batches = _max_over_hosts(local_batches)
    pad_num = num_batches * self.batch_size - local_num
    logging.info('SeqIOInput %s: %d local eval examples, padded with %d to '
                 '%d batches.', self.name, local_num, pad_num, num_batches)
    one = ds.take(1)
    if not any(True for _ in one):  # This host's shard is empty.
      one = self._get_backing_ds(False, 1, None).map(add_weight).take(1)
    return ds.concatenate(one.map(self._pad_example).repeat(pad_num))

  def get_next(self) -> NestedNpTensor:
    batch = next(self._iter)
    # Strings cannot go to devices: keep numbers and booleans.
    return batch.FilterKeyVal(
        lambda _, v: np.issubdtype(v.dtype, np.number) or v.dtype == bool)

  def reset(self) -> None:
    super().reset()
    self._iter = self.dataset.as_numpy_iterator()

  def _get_state_internal(self) -> bytes:
    try:
      return self._iter._save().numpy()  # pylint: disable=protected-access
    except (AttributeError, self._tf.errors.UnimplementedError) as e:
      raise self._no_state() from e

  def _set_state_internal(self, state: bytes) -> None:
    self._iter._restore(state)  # pylint: disable=protected-access

  # Vocabulary.

  def _get_vocab(self, key: str | None) -> Any:
    if self.overridden_vocab is not None:
      return self.overridden_vocab
    if key not in (None, 'src', 'tgt'):
      raise ValueError(
          f"SeqIOInput {self.name!r}: key must be None, 'src' or 'tgt', got "
          f'{key!r}.')
    feature = 'inputs' if key == 'src' else 'targets'
    return self._mixture_or_task_inst.output_features[feature].vocabulary

  def ids_to_strings(self, ids: pytypes.NpTensor,
                     lengths: pytypes.NpTensor | None,
                     key: str | None = None) -> Sequence[str]:
    vocab = self._get_vocab(key)
    if lengths is None:
      lengths = [ids.shape[1]] * ids.shape[0]
    return [vocab.decode(ids[i, :int(n)].tolist())
            for i, n in enumerate(lengths)]

  # Metrics.

  def _num_eval_examples_of_all_hosts(self) -> int:
    """The examples one eval reads on all hosts: eval_loop_num_batches
    batches each, or -1 (the whole split) when it is None / -1."""
    n = self.eval_loop_num_batches
    if self.is_training or n is None or n < 0:
      return -1
    return n * self.batch_size * self.num_infeed_hosts

  def _gen_targets_artifacts(self) -> None:
    """(Re)builds the ground truth: every host's shard, enumerated as the
    host's input enumerates it, read round-robin from `targets_iter`."""
    tf = self._tf
    self._num_eval_examples = self._num_eval_examples_of_all_hosts()
    lengths = dict(self.task_feature_lengths)
    if self.eval_metrics_targets_length:
      lengths['targets'] = self.eval_metrics_targets_length
    shards, rounds = [], 0
    for host in range(self.num_infeed_hosts):
      shard = self._seqio.ShardInfo(index=host,
                                    num_shards=self.num_infeed_hosts)
      ds = self._mixture_or_task_inst.get_dataset(
          sequence_length=lengths, split=self.split_name, shuffle=False,
          num_epochs=1, shard_info=shard, seed=self.input_random_seed,
          use_cached=self.use_cached,
          trim_output_features=self.trim_output_features,
          try_in_mem_cache=self.try_in_mem_cache)
      if self.should_repeat:
        ds, rounds = ds.repeat(), -1
      elif rounds >= 0:
        rounds = max(rounds, sum(1 for _ in ds))
      shards.append(_enumerate_dataset(ds, False, shard))
    order = tf.data.Dataset.range(self.num_infeed_hosts).repeat(rounds)
    self.targets_ds = tf.data.Dataset.choose_from_datasets(
        shards, order, stop_on_empty_dataset=False)
    spec = self.targets_ds.element_spec
    self._ragged_keys = [k for k, v in spec.items()
                         if isinstance(v, tf.RaggedTensorSpec)]
    self._gen_targets_iter()
    self._cached_targets = None
    self.is_targets_init = True

  def _gen_targets_iter(self) -> None:
    dense = [k for k in self.targets_ds.element_spec
             if k not in self._ragged_keys]
    self.targets_iter = self.targets_ds.map(
        lambda ex: {k: ex[k] for k in dense}).as_numpy_iterator()
    self._targets_iter_ragged = iter(self.targets_ds)

  def _get_targets(self) -> dict[str, dict[str, Any]]:
    """{enumeration id: example} of the examples one eval reads."""
    if self._cached_targets is not None:
      return self._cached_targets
    targets = {}
    while self._num_eval_examples < 0 or (
        len(targets) < self._num_eval_examples):
      try:
        example = dict(next(self.targets_iter))
        ragged = next(self._targets_iter_ragged) if self._ragged_keys else {}
      except StopIteration as e:
        if self._num_eval_examples > 0:
          raise StopIteration(
              f'SeqIOInput {self.name!r}: the eval data ended after '
              f'{len(targets)} of the {self._num_eval_examples} examples '
              'that eval_loop_num_batches asks for.') from e
        self._gen_targets_iter()
        break
      for key in self._ragged_keys:
        example[key] = _to_numpy(ragged[key], self._tf)
      key = py_utils.get_enumeration_id(example, pop=True)
      if self.eval_metrics_filter_targets_fields is not None:
        example = {k: v for k, v in example.items()
                   if k in self.eval_metrics_filter_targets_fields}
      targets[key] = example
    if self.reset_for_eval:
      self._cached_targets = targets
    return targets

  def _metric_fns(self, score_metrics: bool) -> Sequence[Any]:
    """The task's score or predict metric functions; [] when metrics
    cannot be computed here (a mixture, a packing converter)."""
    task = self._mixture_or_task_inst
    if not self.is_task:
      logging.warning('%s: metrics need a seqio.Task, got %s.', self.name,
                      type(task).__name__)
      return []
    fns = task.score_metric_fns if score_metrics else task.predict_metric_fns
    if not fns:
      return []
    if is_packing_on(self.feature_converter):
      logging.error('%s: no metrics with a packing feature converter.',
                    self.name)
      return []
    if not self.use_enumeration:
      raise ValueError(
          f'SeqIOInput {self.name!r}: SeqIO metrics here need '
          'use_enumeration=True (outputs are joined to targets by it).')
    return fns

  def compute_metrics(
      self, decoder_outputs: Sequence[tuple[str, Any]],
      score_metrics: bool = False, verbose_entries: int | None = 0,
      plain_text_output: TextIO | None = None,
  ) -> list[Mapping[str, Any]]:
    """The task's predict (or score) metric functions on model outputs.

    Args:
      decoder_outputs: (enumeration id, NestedMap) pairs of every host (see
        `maybe_update_decode_output_keys`): with `decoded_substr`, or with
        `scores` for `score_metrics`.
      score_metrics: Run `score_metric_fns` on `scores` (padded examples
        skipped) instead of `predict_metric_fns` on `decoded_substr`.
      verbose_entries: Examples to log.
      plain_text_output: Where to write every decoded example as text.

    Returns:
      One metrics dict per metric function.
    """
    fns = self._metric_fns(score_metrics)
    key = _LM_SCORE_KEY if score_metrics else _LM_DECODER_OUT_KEY
    if not fns or not decoder_outputs or key not in decoder_outputs[0][1]:
      return []
    if not self.is_targets_init:
      self._gen_targets_artifacts()
    task = self.task_inst
    answers = {k: v for k, v in decoder_outputs
               if not (score_metrics and py_utils.get_enumeration_id(v)
                       and _is_padding(v))}
    outputs, targets = [], []
    for i, (enum_id, example) in enumerate(self._get_targets().items()):
      if enum_id not in answers:
        raise ValueError(f'{self.name}: no model output for example '
                         f'{enum_id}.')
      answer = answers[enum_id]
      if score_metrics:
        target = task.postprocess_fn(example['targets'], example=example,
                                     is_target=True)
        answer['seqio_postprocessed_targets'] = _bytes_to_str(target)
        if self.log_preprocessed_targets:
          answer['seqio_preprocessed_targets'] = _bytes_to_str(example)
        output = answer[key]
      else:
        output = task.postprocess_fn(answer[key], example=example,
                                     is_target=False)
        target = task.postprocess_fn(_target_text(example, task),
                                     example=example, is_target=True)
        answer['seqio_targets'] = target
        answer['seqio_postprocessed_predictions'] = _bytes_to_str(output)
        if plain_text_output is not None:
          print('---', answer.get('prefix', ''), '>>>', answer[key], 'REF',
                target, sep='\n', file=plain_text_output)
      outputs.append(output)
      targets.append(target)
      if verbose_entries and i < verbose_entries:
        logging.info('Example %s\nMODEL=%s\nTARGET=%s', enum_id, output,
                     target)
    return [fn(targets, outputs) for fn in fns]

  def compute_metrics_eval(
      self, eval_outputs: Sequence[tuple[str, Any]], verbose_entries: int = 0
  ) -> list[Mapping[str, Any]]:
    """`compute_metrics(eval_outputs, score_metrics=True, ...)`."""
    return self.compute_metrics(eval_outputs, score_metrics=True,
                                verbose_entries=verbose_entries)


def _max_over_hosts(value: int) -> int:
  if jax.process_count() == 1:
    return value
  # pylint: disable-next=g-import-not-at-top
  from jax.experimental import multihost_utils
  return int(np.max(multihost_utils.process_allgather(np.array([value]))))


def _to_numpy(value: Any, tf: Any) -> Any:
  """A tensor as numpy; a ragged one flattened to [1, n]."""
  if isinstance(value, tf.RaggedTensor):
    return value.flat_values.numpy()[np.newaxis, :]
  return value.numpy()


def _bytes_to_str(tree: Any) -> Any:
  return jax.tree.map(
      lambda x: x.decode('utf-8') if isinstance(x, bytes) else x, tree)


def _target_text(example: Mapping[str, Any], task: Any) -> str:
  """The pretokenized target if present, else the decoded target ids."""
  if 'targets_pretokenized' in example:
    target = example['targets_pretokenized']
  elif 'targets' in example:
    ids = [int(x) for x in np.asarray(example['targets']).reshape(-1)]
    target = task.output_features['targets'].vocabulary.decode(ids)
  else:
    target = ''
  return target.decode('utf-8') if isinstance(target, bytes) else target


# ----------------------------------------------------------------------------
# Writing metrics.
# ----------------------------------------------------------------------------


def should_process_outputs(inp: base_input.BaseInput) -> bool:
  """Whether this process computes SeqIO metrics for `inp` (process 0)."""
  return isinstance(inp, SeqIOInput) and jax.process_index() == 0


def process_outputs(
    inp: base_input.BaseInput,
    model_outputs: Sequence[tuple[str, Any]],
    summary_writer: Any,
    metric_type: MetricType,
    step: int,
    output_dir: epath.PathLike,
    verbose_entries: int = 1,
    plain_text_output_fname: str | None = None,
) -> dict[str, float]:
  """Computes a SeqIO task's metrics, logs and writes them, returns floats.

  Args:
    inp: The `SeqIOInput`.
    model_outputs: (enumeration id, output) pairs of every host.
    summary_writer: A `tensorboardX.SummaryWriter`-like writer.
    metric_type: PREDICT (decoded outputs) or SCORE (target scores).
    step: The model step.
    output_dir: Where the JSONL metrics log goes.
    verbose_entries: Examples to log.
    plain_text_output_fname: For PREDICT: where the examples go as text.

  Returns:
    {metric name: value} for the scalar metrics.
  """
  seqio, _ = import_seqio('process_outputs')
  if metric_type is MetricType.SCORE:
    prefix = EVAL_METRICS_PREFIX
    results = inp.compute_metrics(model_outputs, score_metrics=True,
                                  verbose_entries=verbose_entries)
  elif metric_type is MetricType.PREDICT:
    prefix = DECODE_METRICS_PREFIX
    text = io.StringIO()
    results = inp.compute_metrics(model_outputs,
                                  verbose_entries=verbose_entries,
                                  plain_text_output=text)
    if plain_text_output_fname:
      path = epath.Path(plain_text_output_fname)
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(text.getvalue())
  else:
    raise ValueError(f'Unknown metric type {metric_type!r}.')
  merged = {}
  for result in results:
    merged.update(result)
  values = {k: v if isinstance(v, seqio.metrics.MetricValue)
            else seqio.metrics.Scalar(v) for k, v in merged.items()}
  epath.Path(output_dir).mkdir(parents=True, exist_ok=True)
  seqio.loggers.JSONLogger(os.fspath(output_dir))(
      task_name=inp.mixture_or_task_inst.name, step=step, metrics=values,
      dataset=None, inferences=None, targets=None)
  floats = {}
  for name, value in values.items():
    tag = f'{prefix}/{inp.name}/{name}'
    if isinstance(value, seqio.metrics.Scalar):
      floats[name] = float(value.value)
      summary_writer.add_scalar(tag, floats[name], step)
    elif isinstance(value, seqio.metrics.Text):
      summary_writer.add_text(tag, value.textdata, step)
  return floats


# ----------------------------------------------------------------------------
# Feature converters: SeqIO features to the keys of Pax models.
# ----------------------------------------------------------------------------


def _shift_left(x: Any, pad: Any, tf: Any) -> Any:
  """x[1:] followed by `pad`, for a 1-D tensor."""
  return tf.concat([x[1:], tf.fill([1], tf.cast(pad, x.dtype))], axis=0)


def _segments_of_unpacked(weights: Any, tf: Any) -> tuple[Any, Any]:
  """Segment ids (1 on tokens) and positions of one unpacked sequence."""
  segment_ids = tf.cast(weights > 0, tf.int32)
  return segment_ids, segment_ids * tf.range(tf.shape(segment_ids)[0])


@dataclasses.dataclass(frozen=True)
class LanguageModelFeatures:
  """Decoder-only (LM or prefix-LM) features for Pax's LanguageModel.

  Runs `seqio.DecoderFeatureConverter(loss_on_targets_only=True)` and maps
  its output to `ids`, `labels` (int32), `weights`, `paddings` (float32),
  `segment_ids`, `segment_pos` (always, packed or not) and, for prefix LMs,
  `inputs_indicator` (1 on input positions).

  Attributes:
    pack: Pack several examples into one row.
    use_custom_packing_ops: Use the tensor2tensor packing ops.
    weights_on_targets_only: None: weight 1 on every non-padded token with a
      non-negative label; True: also 0 on the inputs of a prefix LM; False:
      1 on every non-padded token.
    apply_length_check: Check that features fit `task_feature_lengths`.
    bos_id: Id that starts the decoder inputs.
    reverse_bos_padding: Use the labels as ids and shift the labels left,
      padding with `eos_id`.
    eos_id: See `reverse_bos_padding`.
    target_has_suffix: Multiply weights by the example's
      `target_suffix_weights`.
    passthrough_features: Features copied unchanged (name to spec).
  """

  pack: bool = False
  use_custom_packing_ops: bool = False
  weights_on_targets_only: bool | None = None
  apply_length_check: bool = True
  bos_id: int = 0
  reverse_bos_padding: bool = False
  eos_id: int = 1
  target_has_suffix: bool = False
  passthrough_features: Mapping[str, Any] | None = None

  def _seqio_converter(self, seqio: Any) -> Any:
    return seqio.DecoderFeatureConverter(
        loss_on_targets_only=True, pack=self.pack,
        use_custom_packing_ops=self.use_custom_packing_ops,
        apply_length_check=self.apply_length_check, bos_id=self.bos_id,
        passthrough_features=self.passthrough_features)

  def _to_pax(self, b: Any, tf: Any) -> NestedMap:
    b = NestedMap.FromNestedDict(b)
    out = NestedMap(ids=b.decoder_input_tokens,
                    labels=b.decoder_target_tokens)
    non_padding = b.decoder_loss_weights > 0
    if 'decoder_causal_attention' in b:
      non_padding = tf.logical_or(b.decoder_causal_attention > 0,
                                  non_padding)
      out.inputs_indicator = b.decoder_causal_attention
    out.weights = tf.cast(non_padding, tf.float32)
    out.paddings = 1.0 - out.weights
    if 'decoder_segment_ids' in b:
      out.segment_ids, out.segment_pos = (b.decoder_segment_ids,
                                          b.decoder_positions)
    elif self.pack:
      raise ValueError('LanguageModelFeatures(pack=True) got examples '
                       'without decoder_segment_ids.')
    else:
      out.segment_ids, out.segment_pos = _segments_of_unpacked(out.weights,
                                                               tf)
    for key in self.passthrough_features or {}:
      out[key] = b[key]
    if self.weights_on_targets_only is not False:  # Negative ids: ignored.
      out.weights *= tf.cast(out.labels >= 0, tf.float32)
    if self.weights_on_targets_only:
      out.weights *= tf.cast(b.decoder_loss_weights > 0, tf.float32)
    if self.target_has_suffix:
      out.weights *= tf.cast(b.target_suffix_weights, tf.float32)
    out.ids, out.labels = tf.abs(out.ids), tf.abs(out.labels)
    if self.reverse_bos_padding:
      out.ids = out.labels
      out.labels = _shift_left(out.labels, self.eos_id, tf)
      out.weights = _shift_left(out.weights, 0.0, tf)
      out.paddings = _shift_left(out.paddings, 1.0, tf)
    return out

  def _convert(self, ds: Any, lengths: Mapping[str, int], seqio: Any) -> Any:
    return self._seqio_converter(seqio)(ds, lengths)

  def __call__(self, ds: Any, task_feature_lengths: Mapping[str, int]) -> Any:
    seqio, tf = import_seqio(type(self).__name__)
    ds = self._convert(ds, task_feature_lengths, seqio)
    return ds.map(lambda b: self._to_pax(b, tf))


@dataclasses.dataclass(frozen=True)
class PackedLanguageModelFeatures(LanguageModelFeatures):
  """LanguageModelFeatures of examples packed beforehand (no SeqIO step)."""

  def _convert(self, ds: Any, lengths: Mapping[str, int], seqio: Any) -> Any:
    del lengths, seqio
    return ds


@dataclasses.dataclass(frozen=True)
class SequenceModelFeatures:
  """Encoder-decoder features for Pax's SequenceModel: `src` and `tgt`.

  Runs `seqio.EncDecFeatureConverter`; `src` holds `ids`, `paddings` (1 on
  id 0), `segment_ids`, `segment_pos`; `tgt` also `labels` and `weights`;
  both get `task_ids` when the data has them.

  Attributes:
    pack: Pack several examples into one row.
    use_custom_packing_ops: Use the tensor2tensor packing ops.
    bos_id: Id that starts the decoder inputs.
  """

  pack: bool = False
  use_custom_packing_ops: bool = False
  bos_id: int = 0

  def _seqio_converter(self, seqio: Any) -> Any:
    return seqio.EncDecFeatureConverter(
        pack=self.pack, use_custom_packing_ops=self.use_custom_packing_ops,
        bos_id=self.bos_id)

  def _to_pax(self, b: Any, tf: Any) -> NestedMap:
    b = NestedMap.FromNestedDict(b)
    src = NestedMap(ids=b.encoder_input_tokens)
    src.paddings = 1.0 - tf.cast(src.ids != 0, tf.float32)
    tgt = NestedMap(ids=b.decoder_input_tokens,
                    labels=b.decoder_target_tokens)
    tgt.weights = tf.cast(b.decoder_loss_weights, tf.float32)
    tgt.paddings = 1.0 - tgt.weights
    if 'encoder_segment_ids' in b:
      src.segment_ids, src.segment_pos = (b.encoder_segment_ids,
                                          b.encoder_positions)
      tgt.segment_ids, tgt.segment_pos = (b.decoder_segment_ids,
                                          b.decoder_positions)
    elif self.pack:
      raise ValueError('SequenceModelFeatures(pack=True) got examples '
                       'without encoder_segment_ids.')
    else:
      src.segment_ids, src.segment_pos = _segments_of_unpacked(
          1.0 - src.paddings, tf)
      tgt.segment_ids, tgt.segment_pos = _segments_of_unpacked(tgt.weights,
                                                               tf)
    if 'src_task_ids' in b:
      src.task_ids = b.src_task_ids
    if 'tgt_task_ids' in b:
      tgt.task_ids = b.tgt_task_ids
    if 'task_ids' in b:
      src.task_ids = tgt.task_ids = b.task_ids
    return NestedMap(src=src, tgt=tgt)

  def _convert(self, ds: Any, lengths: Mapping[str, int], seqio: Any) -> Any:
    return self._seqio_converter(seqio)(ds, lengths)

  def __call__(self, ds: Any, task_feature_lengths: Mapping[str, int]) -> Any:
    seqio, tf = import_seqio(type(self).__name__)
    ds = self._convert(ds, task_feature_lengths, seqio)
    return ds.map(lambda b: self._to_pax(b, tf))


@dataclasses.dataclass(frozen=True)
class SequenceModelFeaturesWithTaskInfo(SequenceModelFeatures):
  """SequenceModelFeatures that keep `src_task_ids`, `tgt_task_ids`, `task_ids`.

  For models routed by task (e.g. task MoE).
  """

  def _convert(self, ds: Any, lengths: Mapping[str, int], seqio: Any) -> Any:
    base = seqio.EncDecFeatureConverter

    class _KeepTaskIds(base):

      def _convert_example(self, features):
        converted = dict(super()._convert_example(features))
        converted.update(
            {k: features[k] for k in _TASK_ID_KEYS if k in features})
        return converted

    converter = _KeepTaskIds(
        pack=self.pack, use_custom_packing_ops=self.use_custom_packing_ops,
        bos_id=self.bos_id)
    # Skips the output-feature check, which rejects the task ids.
    # pylint: disable-next=protected-access
    return converter._convert_features(ds, lengths)


@dataclasses.dataclass(frozen=True)
class PackedSequenceModelFeatures(SequenceModelFeatures):
  """SequenceModelFeatures of examples packed beforehand (no SeqIO step)."""

  def _convert(self, ds: Any, lengths: Mapping[str, int], seqio: Any) -> Any:
    del lengths, seqio
    return ds


@dataclasses.dataclass(frozen=True)
class RemoveProvenance:
  """Passes examples through, minus keys starting with 'provenance'."""

  def __call__(self, ds: Any, task_feature_lengths: Mapping[str, int]) -> Any:
    del task_feature_lengths
    return ds.map(lambda b: NestedMap.FromNestedDict(b).FilterKeyVal(
        lambda k, _: not k.startswith('provenance')))


@dataclasses.dataclass(frozen=True)
class UnflattenAndRemoveProvenance(RemoveProvenance):
  """`seqio.unflatten_dict` on each example, then RemoveProvenance."""

  def __call__(self, ds: Any, task_feature_lengths: Mapping[str, int]) -> Any:
    seqio, _ = import_seqio(type(self).__name__)
    return super().__call__(ds.map(seqio.unflatten_dict),
                            task_feature_lengths)


# ----------------------------------------------------------------------------
# Eval configs of every task of a mixture.
# ----------------------------------------------------------------------------


def _keeps_task(task: Any, metric_type: MetricType,
                require_metric_fns: bool) -> bool:
  if not require_metric_fns:
    return True
  fns = (task.predict_metric_fns if metric_type is MetricType.PREDICT
         else task.score_metric_fns)
  if not fns:
    logging.warning('Task %s has no %s metric functions: not evaluated (set '
                    'require_metric_fns=False to keep it).', task.name,
                    metric_type.name.lower())
  return bool(fns)


def get_eval_hparams_for_seqio(
    task_or_mixture_name: Any,
    batch_size: int,
    feature_lengths: Mapping[str, int],
    seed: int,
    metric_type: MetricType,
    split_name: str | Callable[[str], str] = 'validation',
    feature_converter: Any = None,
    num_infeed_hosts: int = 0,
    use_cached: bool = False,
    shuffle: bool | None = None,
    require_metric_fns: bool = True,
    eval_metrics_retain_task_features: bool = False,
    check_split_exists: bool = False,
    eval_loop_num_batches: int | None = None,
    repeat: bool | None = None,
    reset_for_eval: bool = True,
    pass_entire_feature_lengths: bool = False,
    use_enumeration: bool = True,
) -> list[pax_fiddle.Config[SeqIOInput]]:
  """One eval `SeqIOInput` config per task of a SeqIO task or mixture.

  PREDICT configs (for `decode_datasets()`) feed only the inputs (targets of
  length 1) and read targets of `feature_lengths['targets']` for metrics;
  SCORE configs (for `datasets()`) feed both. Tasks without metric
  functions of that type are left out unless `require_metric_fns=False`.

  Args:
    task_or_mixture_name: A registered name, or a Task or Mixture object.
    batch_size: Per-host batch size.
    feature_lengths: e.g. {'inputs': 1024, 'targets': 256}.
    seed: Input seed (fixes few-shot prompts).
    metric_type: PREDICT or SCORE.
    split_name: The split, or a function of the task name giving it.
    feature_converter: Default: `LanguageModelFeatures(pack=False)`, with
      weights on targets only for SCORE.
    num_infeed_hosts: Hosts (0: the process count).
    use_enumeration: See `SeqIOInput`.
    use_cached: See `SeqIOInput`.
    shuffle: See `SeqIOInput`.
    require_metric_fns: Drop tasks without metric functions of this type.
    eval_metrics_retain_task_features: SCORE: use all of `feature_lengths`.
    check_split_exists: Drop tasks that lack the split.
    eval_loop_num_batches: See `BaseInput`.
    repeat: See `SeqIOInput`.
    reset_for_eval: See `BaseInput`.
    pass_entire_feature_lengths: Also pass the features other than inputs
      and targets.

  Returns:
    The configs.
  """
  seqio, _ = import_seqio('get_eval_hparams_for_seqio')
  if isinstance(task_or_mixture_name, str):
    task_or_mixture = seqio.get_mixture_or_task(task_or_mixture_name)
  elif isinstance(task_or_mixture_name, (seqio.Task, seqio.Mixture)):
    task_or_mixture = task_or_mixture_name
  else:
    raise TypeError('task_or_mixture_name must be a name, a Task or a '
                    f'Mixture, got {task_or_mixture_name!r}.')
  if feature_converter is None:
    feature_converter = pax_fiddle.Config(
        LanguageModelFeatures, pack=False,
        weights_on_targets_only=metric_type is MetricType.SCORE)
  if metric_type is MetricType.PREDICT:
    lengths = {'inputs': feature_lengths['inputs'], 'targets': 1}
    targets_length = feature_lengths['targets']
  elif metric_type is MetricType.SCORE:
    lengths = dict(feature_lengths) if eval_metrics_retain_task_features else {
        'inputs': feature_lengths['inputs'],
        'targets': feature_lengths['targets']}
    targets_length = None
  else:
    raise ValueError(f'Unknown metric type {metric_type!r}.')
  if pass_entire_feature_lengths:
    lengths.update({k: v for k, v in feature_lengths.items()
                    if k not in ('inputs', 'targets')})
  configs = []
  for task in seqio.get_subtasks(task_or_mixture):
    split = select_split(task.name, split_name)
    if check_split_exists and split not in task.splits:
      logging.warning('Task %s has no split %r: not evaluated.', task.name,
                      split)
      continue
    if not _keeps_task(task, metric_type, require_metric_fns):
      continue
    configs.append(pax_fiddle.Config(
        SeqIOInput, name=task.name, mixture_or_task=task, split_name=split,
        task_feature_lengths=dict(lengths),
        eval_metrics_targets_length=targets_length,
        feature_converter=_copy_config(feature_converter),
        is_training=False, reset_for_eval=reset_for_eval, shuffle=shuffle,
        repeat=repeat, batch_size=batch_size,
        num_infeed_hosts=num_infeed_hosts, input_random_seed=seed,
        eval_loop_num_batches=eval_loop_num_batches,
        use_enumeration=use_enumeration, use_cached=use_cached))
  return configs


def _copy_config(value: Any) -> Any:
  return value.clone() if isinstance(value, pax_fiddle.Config) else value

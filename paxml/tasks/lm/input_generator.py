"""Inputs of the LM experiments that need no data files and no TensorFlow.

Public names: LM_KEYS, synthetic_lm_batch, lm_input_specs, SyntheticLmData,
LmInputSpecsProvider.

`SyntheticLmData` is Pax's `SyntheticLmData` without Lingvo: every batch is
the same per-host batch of `batch_size` rows of `seq_len` tokens, all ids 1,
no padding and one segment per row, in the keys `LanguageModel` and
`BertModel` read:

  ids          int32 [batch, seq_len]  all 1
  labels       int32 [batch, seq_len]  all 1
  paddings     float32                 all 0
  weights      float32                 all 1
  segment_ids  int32                   all 1
  segment_pos  int32                   0, 1, ..., seq_len - 1 in every row

It is deterministic and identical on every host (each host feeds its own
`batch_size` rows of the global batch). `LmInputSpecsProvider` gives the
shapes and dtypes of such a batch from an input's config (its `batch_size`
and `seq_len`), so a model can be initialised without reading data; it works
for `SyntheticLmData` and for `paxml.grain_input.LmTextInput` configs alike.

Example:

  p = pax_fiddle.Config(SyntheticLmData, batch_size=2, seq_len=4)
  batch = base_hyperparams.instantiate(p).get_next()
  batch.segment_pos  # [[0, 1, 2, 3], [0, 1, 2, 3]]
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from praxis import base_input
from praxis import pax_fiddle
from praxis import py_utils
from praxis import pytypes

NestedMap = py_utils.NestedMap

# Key -> dtype of the [batch, seq_len] arrays of an LM batch.
LM_KEYS = {
    'ids': np.int32,
    'labels': np.int32,
    'paddings': np.float32,
    'weights': np.float32,
    'segment_ids': np.int32,
    'segment_pos': np.int32,
}


def synthetic_lm_batch(batch_size: int, seq_len: int) -> NestedMap:
  """The synthetic batch described in the module docstring."""
  shape = (batch_size, seq_len)
  ones = lambda dtype: np.ones(shape, dtype)
  return NestedMap(
      ids=ones(np.int32),
      labels=ones(np.int32),
      paddings=np.zeros(shape, np.float32),
      weights=ones(np.float32),
      segment_ids=ones(np.int32),
      segment_pos=np.tile(np.arange(seq_len, dtype=np.int32), (batch_size, 1)),
  )


def lm_input_specs(
    batch_size: int, seq_len: int
) -> pytypes.NestedShapeDtypeStruct:
  """`jax.ShapeDtypeStruct`s of an LM batch (the keys of `LM_KEYS`)."""
  return NestedMap({
      key: jax.ShapeDtypeStruct((batch_size, seq_len), np.dtype(dtype))
      for key, dtype in LM_KEYS.items()
  })


class SyntheticLmData(base_input.BaseInput):
  """Constant synthetic LM batches (see the module docstring).

  Attributes:
    seq_len: Tokens per row.
  """

  seq_len: int = 0

  def __post_init__(self):
    super().__post_init__()
    if self.seq_len <= 0:
      raise self._error('seq_len', 'must be positive')
    self._batch = synthetic_lm_batch(self.batch_size, self.seq_len)

  def get_next(self) -> NestedMap:
    return jax.tree.map(np.copy, self._batch)

  def _get_state_internal(self) -> bytes:
    return b''  # Every batch is the same: there is no position to save.

  def _set_state_internal(self, state: bytes) -> None:
    del state


class LmInputSpecsProvider(base_input.BaseInputSpecsProvider):
  """The specs of an LM input's batches, read off its config (no data read).

  Attributes:
    input_p: Config of an input with `batch_size` and `seq_len` fields.
  """

  input_p: pax_fiddle.Config[Any] | None = None

  def __post_init__(self):
    p = self.input_p
    missing = [f for f in ('batch_size', 'seq_len')
               if getattr(p, f, None) is None]
    if missing:
      raise ValueError(
          f'LmInputSpecsProvider {self.name!r}: input_p must be an input '
          f'config with batch_size and seq_len set; {missing} missing.'
      )

  def get_input_specs(self) -> pytypes.NestedShapeDtypeStruct:
    return lm_input_specs(self.input_p.batch_size, self.input_p.seq_len)

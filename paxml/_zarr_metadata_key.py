"""The file name of each array's zarr header in a GDA checkpoint.

Private to the checkpoint modules. TensorStore's zarr driver keeps an
array's shape, dtype and chunk layout in a JSON file beside its chunks,
`.zarray` unless its spec names another (`metadata_key`). Pax lets a run
choose the name (`train.tensorstore_metadata_key`, which
`checkpoints.reregister_type_handlers` applies to Orbax's handlers); the
readers here (the checkpoint reader, the safety checks, the FLAX layout's
detection) look for the header under the name set last in the process.
"""

DEFAULT = '.zarray'

_current = DEFAULT


def get() -> str:
  """The header's file name that checkpoints are written and read with."""
  return _current


def check(key: str | None) -> None:
  """Refuses a header name that is not a file name (None: none set)."""
  if key is None:
    return
  if (not isinstance(key, str) or not key or key in ('.', '..')
      or '/' in key or '\\' in key):
    raise ValueError(
        f'task.train.tensorstore_metadata_key={key!r}; expected None or the '
        f"file name of each array's zarr header (TensorStore's default: "
        f"'{DEFAULT}').")


def set_key(key: str) -> None:
  """Makes `key` the header's file name (checked first)."""
  global _current
  if key is None:
    raise ValueError('task.train.tensorstore_metadata_key=None; expected a '
                     'file name to set.')
  check(key)
  _current = key


def tensorstore_spec(kvstore: dict[str, object]) -> dict[str, object]:
  """A zarr TensorStore spec of the array at `kvstore`, with the header's
  file name."""
  spec: dict[str, object] = {'driver': 'zarr', 'kvstore': kvstore}
  if _current != DEFAULT:
    spec['metadata_key'] = _current
  return spec

"""TFRecord files of `tf.train.Example`s, read without TensorFlow.

Private to `input_generator`: `index_records` finds the records of a file
(offset and length, from the framing: uint64 length, uint32 CRC, data,
uint32 CRC; CRCs are not checked), `read_record` reads one, and
`parse_example` decodes a serialized Example into {name: list of values}
(bytes, floats or ints) from the protobuf wire format.
"""

from __future__ import annotations

import struct

_HEADER = 12  # uint64 length + uint32 masked CRC of the length.
_FOOTER = 4  # uint32 masked CRC of the data.


def index_records(path: str) -> list[tuple[int, int]]:
  """(data offset, data length) of every record of a TFRecord file."""
  records = []
  with open(path, 'rb') as f:
    while True:
      header = f.read(_HEADER)
      if not header:
        return records
      if len(header) < _HEADER:
        raise ValueError(f'{path}: truncated TFRecord header.')
      (length,) = struct.unpack('<Q', header[:8])
      offset = f.tell()
      f.seek(length + _FOOTER, 1)
      records.append((offset, length))


def read_record(path: str, offset: int, length: int) -> bytes:
  with open(path, 'rb') as f:
    f.seek(offset)
    data = f.read(length)
  if len(data) != length:
    raise ValueError(f'{path}: truncated TFRecord at offset {offset}.')
  return data


def _varint(data: bytes, pos: int) -> tuple[int, int]:
  value, shift = 0, 0
  while True:
    byte = data[pos]
    pos += 1
    value |= (byte & 0x7F) << shift
    if byte < 0x80:
      return value, pos
    shift += 7


def _fields(data: bytes):
  """(field number, wire type, value) of a message; LEN values as bytes."""
  pos = 0
  while pos < len(data):
    key, pos = _varint(data, pos)
    number, wire = key >> 3, key & 7
    if wire == 0:
      value, pos = _varint(data, pos)
    elif wire == 1:
      value, pos = data[pos:pos + 8], pos + 8
    elif wire == 2:
      size, pos = _varint(data, pos)
      value, pos = data[pos:pos + size], pos + size
    elif wire == 5:
      value, pos = data[pos:pos + 4], pos + 4
    else:
      raise ValueError(f'Unsupported protobuf wire type {wire}.')
    yield number, wire, value


def _int64(value: int) -> int:
  return value - (1 << 64) if value >= 1 << 63 else value


def _values(kind: int, message: bytes) -> list:
  """The values of a BytesList (1), FloatList (2) or Int64List (3)."""
  out = []
  for number, wire, value in _fields(message):
    if number != 1:
      continue
    if kind == 1:
      out.append(bytes(value))
    elif kind == 2:
      raw = value if wire in (2, 5) else b''
      out.extend(struct.unpack(f'<{len(raw) // 4}f', raw))
    elif wire == 2:  # Packed int64s.
      pos = 0
      while pos < len(value):
        v, pos = _varint(value, pos)
        out.append(_int64(v))
    else:
      out.append(_int64(value))
  return out


def parse_example(data: bytes) -> dict[str, list]:
  """A serialized `tf.train.Example` as {feature name: list of values}."""
  features = {}
  for number, _, message in _fields(data):
    if number != 1:  # Example.features
      continue
    for entry_number, _, entry in _fields(message):
      if entry_number != 1:  # Features.feature (map entries)
        continue
      name, feature = '', b''
      for k, _, v in _fields(entry):
        if k == 1:
          name = bytes(v).decode('utf-8')
        elif k == 2:
          feature = v
      values = []
      for kind, _, payload in _fields(feature):
        values = _values(kind, payload)
      features[name] = values
  return features

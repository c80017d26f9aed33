"""A GGUF reader for the Python tests, written from the GGUF spec and ggml's block formats
(ggml-common.h), independent of tpserve's C++ reader: metadata of any type, and tensors of types
F32, F16, Q4_0, Q4_1 and Q8_0 decoded to float64 arrays in row-major (HF) order."""

import math
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
F32, F16, Q4_0, Q4_1, Q8_0 = 0, 1, 2, 3, 8
_BLOCK_BYTES = {Q4_0: 18, Q4_1: 20, Q8_0: 34}  # per 32 elements


def _decode(kind, raw, count):
    """`count` elements of ggml type `kind` from the bytes `raw`, as float64."""
    if kind == F32:
        return np.frombuffer(raw, "<f4", count).astype(np.float64)
    if kind == F16:
        return np.frombuffer(raw, "<f2", count).astype(np.float64)
    blocks = np.frombuffer(raw, np.uint8, count // 32 * _BLOCK_BYTES[kind]).reshape(
        -1, _BLOCK_BYTES[kind])
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)  # [blocks, 1]
    if kind == Q8_0:
        q = blocks[:, 2:].copy().view(np.int8).astype(np.float64)
        return (q * d).reshape(-1)
    codes = blocks[:, -16:]
    # Element j < 16 is the low nibble of byte j, element j + 16 its high nibble.
    q = np.concatenate([codes & 0x0F, codes >> 4], axis=1).astype(np.float64)
    if kind == Q4_0:
        return ((q - 8) * d).reshape(-1)
    m = blocks[:, 2:4].copy().view("<f2").astype(np.float64)
    return (q * d + m).reshape(-1)


class Gguf:
    def __init__(self, path):
        with open(path, "rb") as f:
            self._data = f.read()
        self._pos = 0
        magic, version = self._read("<4sI")
        assert magic == b"GGUF" and version == 3, (magic, version)
        n_tensors, n_kv = self._read("<QQ")
        self.metadata = {}
        self.types = {}
        for _ in range(n_kv):
            key = self._string()
            (kind,) = self._read("<I")
            self.metadata[key] = self._value(kind)
        infos = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._read("<I")
            dims = self._read("<%dQ" % n_dims)
            kind, offset = self._read("<IQ")
            infos.append((name, dims, kind, offset))
        alignment = self.metadata.get("general.alignment", 32)
        start = (self._pos + alignment - 1) // alignment * alignment
        self.tensors = {}
        for name, dims, kind, offset in infos:
            assert kind in (F32, F16) or kind in _BLOCK_BYTES, "%s: type %d" % (name, kind)
            count = math.prod(dims)
            values = _decode(kind, memoryview(self._data)[start + offset:], count)
            # ggml's dims run fastest first: [cols, rows] is a row-major (rows, cols) array.
            self.tensors[name] = values.reshape(tuple(reversed(dims)))
            self.types[name] = kind

    def _read(self, fmt):
        values = struct.unpack_from(fmt, self._data, self._pos)
        self._pos += struct.calcsize(fmt)
        return values

    def _string(self):
        (n,) = self._read("<Q")
        self._pos += n
        return self._data[self._pos - n:self._pos].decode("utf-8")

    def _value(self, kind):
        if kind == _STRING:
            return self._string()
        if kind == _ARRAY:
            item, n = self._read("<IQ")
            return [self._value(item) for _ in range(n)]
        return self._read(_SCALARS[kind])[0]


def unpermute_llama_qk(w, n_head):
    """HF rows from GGUF rows. llama.cpp's converter reorders each head's rows from HF's
    (first half, second half) to interleaved pairs: it views a head's rows as (2, d/2) and
    transposes to (d/2, 2). Undo: view as (d/2, 2), transpose back."""
    rows = w.shape[0]
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)

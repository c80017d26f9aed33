"""A GGUF reader for the Python tests, written from the GGUF spec and ggml's block formats
(ggml-common.h), independent of tpserve's C++ reader: metadata of any type, and tensors of types
F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K and Q6_K decoded to float64 arrays in row-major (HF)
order."""

import math
import struct

import numpy as np

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q",
            11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q5_K, Q6_K = 0, 1, 2, 3, 8, 12, 13, 14
_BLOCK_BYTES = {Q4_0: 18, Q4_1: 20, Q8_0: 34}  # per 32 elements
_SUPER_BLOCK_BYTES = {Q4_K: 144, Q5_K: 176, Q6_K: 210}  # per 256 elements


def _decode_q4_k(blocks, fifth_bits=False):
    """[n, 144] super-blocks: fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins, 128 bytes of
    4-bit codes. Sub-block j < 4 has scale = s[j] & 63, min = s[j+4] & 63; j >= 4 takes its low 4
    bits from byte j+4 (scale low nibble, min high nibble) and its top 2 from the top bits of
    bytes j-4 (scale) and j (min). Codes: 64-element chunk c is qs[32c:32c+32], low nibbles then
    high. x = d * scale * q - dmin * min. With `fifth_bits` (Q5_K, [n, 176]): qh[32] comes before
    qs, and bit j of qh[l] is the fifth bit of sub-block j's element l."""
    d = blocks[:, 0:2].copy().view("<f2").astype(np.float64)
    dmin = blocks[:, 2:4].copy().view("<f2").astype(np.float64)
    s = blocks[:, 4:16].astype(np.int64)
    scale = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mins = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    qs = blocks[:, 48 if fifth_bits else 16:].reshape(-1, 4, 32)
    q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32).astype(np.int64)
    if fifth_bits:
        qh = blocks[:, 16:48].astype(np.int64)  # [n, 32]
        q = q | (np.stack([(qh >> j) & 1 for j in range(8)], axis=1) << 4)
    return (d[:, :, None] * scale[:, :, None] * q - dmin[:, :, None] * mins[:, :, None]).reshape(-1)


def _decode_q6_k(blocks):
    """[n, 210] super-blocks: 128 bytes ql, 64 bytes qh, 16 int8 scales, fp16 d. Per 128-element
    half h and l < 32, elements l, l+32, l+64, l+96 take their low 4 bits from ql[64h+l] low,
    ql[64h+l+32] low, ql[64h+l] high, ql[64h+l+32] high and their top 2 bits from bit pairs 0, 2,
    4, 6 of qh[32h+l]; element n uses scale n // 16. x = d * scale * (q - 32)."""
    ql = blocks[:, 0:128].reshape(-1, 2, 2, 32).astype(np.int64)  # [n, half, which 32, l]
    qh = blocks[:, 128:192].reshape(-1, 2, 32).astype(np.int64)
    scales = blocks[:, 192:208].copy().view(np.int8).astype(np.float64)
    d = blocks[:, 208:210].copy().view("<f2").astype(np.float64)
    low = np.stack([ql[:, :, 0] & 15, ql[:, :, 1] & 15, ql[:, :, 0] >> 4, ql[:, :, 1] >> 4], axis=2)
    high = np.stack([(qh >> shift) & 3 for shift in (0, 2, 4, 6)], axis=2)
    q = ((low | (high << 4)) - 32).reshape(-1, 256).astype(np.float64)
    return (d * np.repeat(scales, 16, axis=1) * q).reshape(-1)


def _decode(kind, raw, count):
    """`count` elements of ggml type `kind` from the bytes `raw`, as float64."""
    if kind == F32:
        return np.frombuffer(raw, "<f4", count).astype(np.float64)
    if kind == F16:
        return np.frombuffer(raw, "<f2", count).astype(np.float64)
    if kind in _SUPER_BLOCK_BYTES:
        size = _SUPER_BLOCK_BYTES[kind]
        blocks = np.frombuffer(raw, np.uint8, count // 256 * size).reshape(-1, size)
        if kind == Q6_K:
            return _decode_q6_k(blocks)
        return _decode_q4_k(blocks, fifth_bits=kind == Q5_K)
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
            assert kind in (F32, F16) or kind in _BLOCK_BYTES or kind in _SUPER_BLOCK_BYTES, \
                "%s: type %d" % (name, kind)
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

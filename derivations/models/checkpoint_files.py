"""The tensors a local checkpoint folder stores, read from file headers only (never the weights).

* safetensors (the format's README): 8 bytes little-endian header length N, then N bytes of JSON
  ``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}``; a tensor's stored bytes
  are ``end - begin``. With ``model.safetensors.index.json`` the files its ``weight_map`` names, else every
  ``*.safetensors`` in the folder.
* GGUF (ggml docs/gguf.md, versions 2 and 3): magic ``GGUF``, version u32, tensor count u64, metadata count
  u64, the metadata key/value pairs, then per tensor its name, dimensions, ggml type and offset; a tensor's
  bytes are ``elements / block x block bytes`` from ggml's type table (gguf-py ``GGML_QUANT_SIZES``).

>>> GGML_TYPES[12], GGML_TYPES[14], GGML_TYPES[8]  # Q4_K: 144 B per 256; Q6_K: 210 per 256; Q8_0: 34 per 32
(('Q4_K', 256, 144), ('Q6_K', 256, 210), ('Q8_0', 32, 34))
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from memderive.derivations.models.config_fields import ConfigError
from memderive.symbolic.errors import shown
from memderive.symbolic.formula import Citation

__all__ = ["StoredTensors", "read_checkpoint", "safetensors_tensors", "gguf_tensors", "GGML_TYPES", "CITATIONS"]

CITATIONS = {"safetensors": Citation("safetensors-format", "8-byte header length, JSON header: dtype, shape, "
                                     "data_offsets"),
             "GGUF": Citation("gguf-spec", "tensor infos: name, dims, ggml type; GGML_QUANT_SIZES per type")}

#: ggml type id -> (name, values per block, bytes per block): gguf-py constants.py GGML_QUANT_SIZES (ggml.h's
#: ggml_type); e.g. Q4_K = 2 fp16 (d, dmin) + 12 scale bytes + 128 bytes of 4-bit values per 256.
GGML_TYPES: dict[int, tuple[str, int, int]] = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
    39: ("MXFP4", 32, 17)}
#: safetensors dtypes -> bits per element (the format's Dtype enum).
SAFETENSORS_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "I16": 16, "U16": 16,
                    "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64,
                    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6}
_MAX_HEADER = 100_000_000  # safetensors refuses larger headers (its MAX_HEADER_SIZE)


@dataclass(frozen=True, slots=True)
class StoredTensors:
    """What the checkpoint files hold: ``(dtype, tensors, bytes)`` per dtype, largest first, and the files read."""

    kind: str
    files: int
    by_dtype: tuple[tuple[str, int, int], ...]

    @property
    def total(self) -> int:
        return sum(size for _, _, size in self.by_dtype)

    @property
    def tensors(self) -> int:
        return sum(count for _, count, _ in self.by_dtype)

    def line(self) -> str:
        parts = ", ".join(f"{d} {n:,} tensors {b:,} B" for d, n, b in self.by_dtype)
        return (f"checkpoint as stored ({self.kind} headers of {self.files} file{'s' * (self.files != 1)}): "
                f"{self.tensors:,} tensors, {self.total:,} B ({parts})")


def _fail(path: Path, what: str) -> ConfigError:
    return ConfigError(f"{shown(str(path), 200)}: {what}; memderive reads only the header of a local checkpoint "
                       "file")


def safetensors_tensors(path: Path) -> list[tuple[str, str, int]]:
    """``(name, dtype, bytes)`` of every tensor a safetensors file stores, from its header."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _fail(path, "too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER, size - 8):
            raise _fail(path, f"header length {n:,} does not fit the file ({size:,} B)")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise _fail(path, "header is not JSON") from None
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object")
    out = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            count = 1
            for axis in shape:
                count *= axis
            bits = SAFETENSORS_BITS[dtype]
            ok = isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= size - 8 - n
        except (KeyError, TypeError, ValueError):
            raise _fail(path, f"tensor {shown(name, 80)} has no valid dtype, shape and data_offsets") from None
        if not ok or (count * bits + 7) // 8 != end - begin:
            raise _fail(path, f"tensor {shown(name, 80)}: data_offsets [{begin}, {end}] do not hold {dtype} "
                              f"{shape}")
        out.append((name, dtype, end - begin))
    return out


def _read(f: BinaryIO, fmt: str, path: Path) -> tuple:
    data = f.read(struct.calcsize(fmt))
    if len(data) < struct.calcsize(fmt):
        raise _fail(path, "GGUF header ends early")
    return struct.unpack(fmt, data)


def _string(f: BinaryIO, path: Path) -> str:
    (n,) = _read(f, "<Q", path)
    if n > 1 << 24:
        raise _fail(path, "GGUF string longer than 16 MiB")
    data = f.read(n)
    if len(data) < n:
        raise _fail(path, "GGUF header ends early")
    return data.decode("utf-8", "replace")


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def _skip_value(f: BinaryIO, kind: int, path: Path) -> None:
    if kind in _SCALARS:
        _read(f, _SCALARS[kind], path)
    elif kind == 8:
        _string(f, path)
    elif kind == 9:
        inner, count = _read(f, "<IQ", path)
        if inner in _SCALARS:  # skip a scalar array at once
            f.seek(count * struct.calcsize(_SCALARS[inner]), 1)
        else:
            for _ in range(count):
                _skip_value(f, inner, path)
    else:
        raise _fail(path, f"GGUF metadata value type {kind} is unknown")


def gguf_tensors(path: Path) -> list[tuple[str, str, int]]:
    """``(name, ggml type, bytes)`` of every tensor a GGUF file stores, from its header."""
    with path.open("rb") as f:
        if f.read(4) != b"GGUF":
            raise _fail(path, "not a GGUF file (no GGUF magic)")
        version, tensors, pairs = _read(f, "<IQQ", path)
        if version not in (2, 3):
            raise _fail(path, f"GGUF version {version} (2 and 3 are read)")
        for _ in range(pairs):
            _string(f, path)
            (kind,) = _read(f, "<I", path)
            _skip_value(f, kind, path)
        out = []
        for _ in range(tensors):
            name = _string(f, path)
            (dims,) = _read(f, "<I", path)
            shape = _read(f, f"<{dims}Q", path) if dims else ()
            kind, _offset = _read(f, "<IQ", path)
            if kind not in GGML_TYPES:
                raise _fail(path, f"tensor {shown(name, 80)} has ggml type {kind}, not in ggml's type table")
            label, block, nbytes = GGML_TYPES[kind]
            count = 1
            for axis in shape:
                count *= axis
            if count % block:
                raise _fail(path, f"tensor {shown(name, 80)}: {count} values are not whole {label} blocks of {block}")
            out.append((name, label, count // block * nbytes))
    return out


def read_checkpoint(folder: Path) -> StoredTensors | None:
    """The tensors of the safetensors (or GGUF) files in a local folder; None when it has none."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise _fail(index, "is not a safetensors index (a JSON object with a weight_map)") from None
        files, kind = [folder / n for n in names], "safetensors"
        missing = [p.name for p in files if not p.is_file()]
        if missing:
            raise _fail(index, f"names {missing[0]}, which is not in the folder")
    else:
        files, kind = sorted(folder.glob("*.safetensors")), "safetensors"
        if not files:
            files, kind = sorted(folder.glob("*.gguf")), "GGUF"
    if not files:
        return None
    reader = safetensors_tensors if kind == "safetensors" else gguf_tensors
    sums: dict[str, list[int]] = {}
    for path in files:
        for _, dtype, size in reader(path):
            entry = sums.setdefault(dtype, [0, 0])
            entry[0] += 1
            entry[1] += size
    ordered = sorted(((d, n, b) for d, (n, b) in sums.items()), key=lambda x: (-x[2], x[0]))
    return StoredTensors(kind, len(files), tuple(ordered))

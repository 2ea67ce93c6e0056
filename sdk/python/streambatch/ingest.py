"""Feeding a trainer: batches of a stream:// sink, for one data-parallel rank.

    import streambatch
    for batch in streambatch.iter_batches("127.0.0.1:7070", batch_size=256, rank=0, world_size=2,
                                          epoch=0, token_file="/tmp/.../stream.token"):
        ...

`streambatch run FILE --serve HOST:PORT` prints {"address": ..., "tokenFile": ...}; pass both
(or set STREAMBATCH_TOKEN_FILE). This module wraps the C consumer library
(api/consumer/streambatch_consumer.h, libstreambatch_consumer.so) with ctypes, so the protocol has
one implementation; columns come out of it as contiguous buffers, copied into buffers of the
kit's (numbers: reused once no array of theirs is left, _Buffers) and made numpy arrays with
numpy.frombuffer. Formats: "numpy" (dict of column -> ndarray; bytes and strings as object
arrays, jsonl records as the "record" column of bytes), "pyarrow" (a pyarrow.RecordBatch),
"rows" (a list of dicts), "torch" (dict of column -> torch.Tensor for numbers, lists otherwise).
The library is found at $STREAMBATCH_CONSUMER_LIB, else beside the `streambatch` binary
(../lib or ../build/lib), else on the loader's path.
"""

import ctypes
import os
import shutil
import sys

__all__ = ["iter_batches", "BatchIterator", "StreamError"]

_FORMATS = ("numpy", "pyarrow", "rows", "torch")

# Column types (streambatch_consumer.h) -> numpy dtype names.
_NUMERIC = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8", 7: "uint16",
            8: "uint32", 9: "uint64", 10: "float32", 11: "float64"}
_BINARY, _UTF8, _FIXED_LIST = 12, 13, 14


class StreamError(RuntimeError):
    """The stream failed: the pipeline failed, the ranks disagreed, a worker could not be read."""


class _Options(ctypes.Structure):
    _fields_ = [("address", ctypes.c_char_p), ("token", ctypes.c_char_p),
                ("token_file", ctypes.c_char_p), ("tls_dir", ctypes.c_char_p),
                ("rank", ctypes.c_uint32), ("world_size", ctypes.c_uint32),
                ("epoch", ctypes.c_uint32), ("batch_size", ctypes.c_uint32),
                ("drop_last", ctypes.c_int), ("local_shuffle_buffer", ctypes.c_uint32),
                ("seeded", ctypes.c_int), ("seed", ctypes.c_uint64), ("timeout_ms", ctypes.c_int),
                ("balance", ctypes.c_int), ("no_prefetch", ctypes.c_int)]

_BALANCE = {None: 0, "equal": 0, "lbbsp": 1}


_lib = None


def _candidates():
    env = os.environ.get("STREAMBATCH_CONSUMER_LIB")
    if env:
        yield env
    exe = shutil.which("streambatch")
    if exe:
        here = os.path.dirname(os.path.realpath(exe))
        yield os.path.join(here, "..", "lib", "libstreambatch_consumer.so")
        yield os.path.join(here, "..", "build", "lib", "libstreambatch_consumer.so")
    yield "libstreambatch_consumer.so"


def _load():
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise StreamError("cannot load libstreambatch_consumer.so (build it with `make consumer`, "
                          "or set STREAMBATCH_CONSUMER_LIB): " + "; ".join(errors))
    p, sz, u32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32
    lib.sbc_open.argtypes = [ctypes.POINTER(_Options), ctypes.c_char_p, sz]
    lib.sbc_open.restype = p
    lib.sbc_next.argtypes = [p]
    lib.sbc_error.argtypes = [p]
    lib.sbc_error.restype = ctypes.c_char_p
    lib.sbc_close.argtypes = [p]
    lib.sbc_close.restype = None
    lib.sbc_report_step.argtypes = [p, ctypes.c_double]
    lib.sbc_report_step.restype = None
    for name, res in (("sbc_rows", sz), ("sbc_ncols", sz)):
        getattr(lib, name).argtypes = [p]
        getattr(lib, name).restype = res
    for name, res in (("sbc_col_name", ctypes.c_char_p), ("sbc_col_type", ctypes.c_int),
                      ("sbc_col_child_type", ctypes.c_int), ("sbc_col_list_size", u32),
                      ("sbc_col_values", p), ("sbc_col_values_len", sz),
                      ("sbc_col_offsets", p), ("sbc_col_valid", p)):
        getattr(lib, name).argtypes = [p, sz]
        getattr(lib, name).restype = res
    u64p = ctypes.POINTER(ctypes.c_uint64)
    lib.sbc_stats.argtypes = [p, u64p, u64p, u64p, u64p]
    lib.sbc_stats.restype = None
    if hasattr(lib, "sbc_streams"):  # (a library older than the kit: stats() gives 0)
        lib.sbc_streams.argtypes = [p]
        lib.sbc_streams.restype = ctypes.c_uint64
    _lib = lib
    return lib


def _buf(ptr, n):
    """n bytes at ptr, copied (the library reuses its buffers at the next batch)."""
    if n == 0 or not ptr:
        return b""
    return ctypes.string_at(ptr, n)


# struct codes of the numeric types, for memoryview.cast (the rows format needs no numpy)
_CODES = {1: "B", 2: "b", 3: "h", 4: "i", 5: "q", 6: "B", 7: "H", 8: "I", 9: "Q", 10: "f",
          11: "d"}


class _Buffers:
    """The buffers the fixed-width columns of a stream's batches are copied into, reused once
    nothing refers to one any more: no array, tensor or view the trainer kept of the batch it
    went into. A buffer new at every batch costs the kernel's zeroing of each of its pages on
    first touch, which perf showed as over half of a trainer's CPU in iter_batches; a trainer
    holds one batch while the next is copied, so a few buffers a column go round. At most KEEP a
    column are kept: a trainer that keeps every batch gets new buffers, as before."""

    KEEP = 3

    def __init__(self):
        self._cols = {}  # column index -> [bytearray]
        self.made = 0  # buffers made so far (tests/stream checks the reuse with it)

    def copy(self, c, ptr, n):
        """A writable view of n bytes copied from ptr, in a buffer of column c's."""
        kept = self._cols.setdefault(c, [])
        buf = None
        for i in range(len(kept)):
            b = kept[i]
            # free: only the list and b refer to it (getrefcount's argument is the third)
            if n <= len(b) <= 2 * n + 4096 and sys.getrefcount(b) == 3:
                buf = b
                break
            del b
        if buf is None:
            buf = bytearray(n)
            self.made += 1
            if len(kept) >= self.KEEP:
                del kept[0]  # the oldest may still be held; it is the trainer's from now on
            kept.append(buf)
        if n:
            ctypes.memmove((ctypes.c_char * n).from_buffer(buf), ptr, n)
        return memoryview(buf)[:n]


class _Col:
    """One column of the current batch, copied out of the library: raw buffers."""

    def __init__(self, lib, h, c, rows, bufs=None):
        self.name = lib.sbc_col_name(h, c).decode("utf-8")
        self.type = lib.sbc_col_type(h, c)
        self.rows = rows
        vptr = lib.sbc_col_valid(h, c)
        self.valid = _buf(vptr, rows) if vptr else None  # one byte per row, or None
        vals, vlen = lib.sbc_col_values(h, c), lib.sbc_col_values_len(h, c)
        self.offsets = None
        self.child, self.list_size = 0, 0
        if self.type in (_BINARY, _UTF8) or bufs is None or not vals:
            self.data = _buf(vals, vlen)  # bytes: values() slices them into bytes
        else:
            self.data = bufs.copy(c, vals, vlen)
        if self.type in (_BINARY, _UTF8):
            self.offsets = _buf(lib.sbc_col_offsets(h, c), 8 * (rows + 1))
        elif self.type == _FIXED_LIST:
            self.child = lib.sbc_col_child_type(h, c)
            self.list_size = lib.sbc_col_list_size(h, c)
        elif self.type not in _NUMERIC:
            raise StreamError(f"column {self.name}: type {self.type} is not supported by this kit")

    def values(self, decode=True):
        """The column as a Python list (None where null); utf8 as str unless not decode."""
        if self.offsets is not None:
            offs = memoryview(self.offsets).cast("q")
            vals = [self.data[offs[i]:offs[i + 1]] for i in range(self.rows)]
            if self.type == _UTF8 and decode:
                vals = [v.decode("utf-8") for v in vals]
        elif self.type == _FIXED_LIST:
            flat = memoryview(self.data).cast(_CODES[self.child]).tolist()
            k = self.list_size
            vals = [flat[i * k:(i + 1) * k] for i in range(self.rows)]
        else:
            vals = memoryview(self.data).cast(_CODES[self.type]).tolist()
            if self.type == 1:
                vals = [bool(v) for v in vals]
        if self.valid is not None:
            vals = [v if ok else None for v, ok in zip(vals, self.valid)]
        return vals


def _columns(lib, h, bufs=None):
    rows = lib.sbc_rows(h)
    return rows, [_Col(lib, h, c, rows, bufs) for c in range(lib.sbc_ncols(h))]


def _to_numpy(rows, cols):
    import numpy as np
    out = {}
    for col in cols:
        if col.offsets is not None:
            arr = np.empty(rows, dtype=object)  # bytes: jsonl records are the "record" column
            arr[:] = col.values(decode=False)
        elif col.type == _FIXED_LIST:
            arr = np.frombuffer(col.data, dtype=np.dtype(_NUMERIC[col.child]))
            arr = arr.reshape(rows, col.list_size)
        else:
            arr = np.frombuffer(col.data, dtype=np.uint8 if col.type == 1 else _NUMERIC[col.type])
            if col.type == 1:
                arr = arr.astype(bool)
        if col.valid is not None and arr.dtype != object:
            mask = np.frombuffer(col.valid, dtype=np.uint8) == 0
            if arr.ndim == 2:
                mask = np.repeat(mask[:, None], arr.shape[1], axis=1)
            arr = np.ma.masked_array(arr, mask=mask)
        out[col.name] = arr
    return out


def _bitmap(valid):
    """Arrow's validity bitmap (LSB first) from one byte per row."""
    out = bytearray((len(valid) + 7) // 8)
    for i, v in enumerate(valid):
        if v:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def _to_pyarrow(rows, cols):
    import pyarrow as pa
    types = {2: pa.int8(), 3: pa.int16(), 4: pa.int32(), 5: pa.int64(), 6: pa.uint8(),
             7: pa.uint16(), 8: pa.uint32(), 9: pa.uint64(), 10: pa.float32(), 11: pa.float64()}
    arrays = []
    for col in cols:
        vbuf = None if col.valid is None else pa.py_buffer(_bitmap(col.valid))
        if col.offsets is not None:
            typ = pa.large_string() if col.type == _UTF8 else pa.large_binary()
            arr = pa.Array.from_buffers(typ, rows, [vbuf, pa.py_buffer(col.offsets),
                                                    pa.py_buffer(col.data)])
        elif col.type == _FIXED_LIST:
            flat = pa.Array.from_buffers(types[col.child], rows * col.list_size,
                                         [None, pa.py_buffer(col.data)])
            arr = pa.FixedSizeListArray.from_arrays(flat, col.list_size)
            if vbuf is not None:
                arr = pa.Array.from_buffers(arr.type, rows, [vbuf], children=[flat])
        elif col.type == 1:
            arr = pa.array(col.values(), type=pa.bool_())
        else:
            arr = pa.Array.from_buffers(types[col.type], rows, [vbuf, pa.py_buffer(col.data)])
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, names=[c.name for c in cols])


def _to_rows(rows, cols):
    columns = [(c.name, c.values()) for c in cols]
    return [{name: vals[i] for name, vals in columns} for i in range(rows)]


def _to_torch(rows, cols):
    import numpy as np
    import torch
    out = {}
    for name, value in _to_numpy(rows, cols).items():
        if value.dtype == object:
            out[name] = list(value)
        elif isinstance(value, np.ma.MaskedArray):
            out[name] = torch.from_numpy(value.copy())
        else:
            out[name] = torch.from_numpy(value)  # shares the writable array's buffer
    return out


def _check_format(batch_format):
    if batch_format not in _FORMATS:
        raise ValueError(f"batch_format {batch_format!r}: one of {', '.join(_FORMATS)}")
    needed = {"numpy": ["numpy"], "pyarrow": ["pyarrow"], "rows": [],
              "torch": ["numpy", "torch"]}[batch_format]
    for mod in needed:
        try:
            __import__(mod)
        except ImportError as e:
            raise ImportError(f"batch_format={batch_format!r} needs the {mod} module: {e}") from e


class BatchIterator:
    """This rank's batches of one epoch (what iter_batches returns): iterate it once.

    report_step(seconds) tells LB-BSP the step time of the batch yielded last, where the time
    between batches is not the step's (a trainer waiting in an all-reduce reports its compute
    time); without it the time from a batch's yield to the next request counts as its step."""

    def __init__(self, lib, handle, convert):
        self._lib, self._h, self._convert = lib, handle, convert
        self._bufs = _Buffers()

    def __iter__(self):
        return self

    def __next__(self):
        if not self._h:
            raise StopIteration
        rc = self._lib.sbc_next(self._h)
        if rc == 0:
            self.close()
            raise StopIteration
        if rc < 0:
            msg = self._lib.sbc_error(self._h).decode("utf-8", "replace")
            self.close()
            raise StreamError(msg)
        return self._convert(*_columns(self._lib, self._h, self._bufs))

    def report_step(self, seconds):
        if self._h:
            self._lib.sbc_report_step(self._h, float(seconds))

    def stats(self):
        """What the stream did so far: rows yielded, rows dealt to this rank, partitions fetched,
        bytes fetched (the prefetch's included, while it runs) and the Data.Fetch streams that
        carried them (a worker's small partitions dealt together share one)."""
        v = [ctypes.c_uint64() for _ in range(4)]
        streams = 0
        if self._h:
            self._lib.sbc_stats(self._h, *[ctypes.byref(x) for x in v])
            streams = self._lib.sbc_streams(self._h) if hasattr(self._lib, "sbc_streams") else 0
        st = dict(zip(("rows", "dealt", "fetches", "bytes"), (x.value for x in v)))
        st["streams"] = streams
        return st

    def close(self):
        if self._h:
            self._lib.sbc_close(self._h)
            self._h = None

    def __del__(self):
        self.close()


def iter_batches(address, batch_size=256, batch_format="numpy", rank=0, world_size=1, epoch=0,
                 drop_last=True, local_shuffle_buffer=0, seed=None, token=None, token_file=None,
                 tls_dir=None, timeout_s=600, balance=None, prefetch=True):
    """Returns an iterator over this rank's batches of one epoch of the stream at `address`.

    Every row of the epoch goes to exactly one rank; with drop_last every rank yields the same
    number of batches (each of batch_size rows), without it the counts differ by at most one and
    the last batch may be short. local_shuffle_buffer=N shuffles rows within a window of N; the
    order is a pure function of (seed, epoch, rank) given the same deal. balance="lbbsp" sizes
    each rank's batches by its measured speed (LB-BSP), world_size * batch_size rows per
    iteration in all (every rank must ask the same); see BatchIterator.report_step.
    prefetch=True fetches the next batch's rows in the background while the trainer works on
    a batch (one batch ahead; unacknowledged until the batch after them is asked for).
    """
    _check_format(batch_format)
    if balance not in _BALANCE:
        raise ValueError(f"balance {balance!r}: None, 'equal' or 'lbbsp'")
    if token is None and token_file is None:
        token_file = os.environ.get("STREAMBATCH_TOKEN_FILE")
    if tls_dir is None:
        tls_dir = os.environ.get("STREAMBATCH_TLS_DIR")
    lib = _load()
    enc = (lambda v: None if v is None else str(v).encode())
    opts = _Options(enc(address), enc(token), enc(token_file), enc(tls_dir), int(rank),
                    int(world_size), int(epoch), int(batch_size), 1 if drop_last else 0,
                    int(local_shuffle_buffer), 0 if seed is None else 1,
                    0 if seed is None else int(seed) & (2**64 - 1), int(timeout_s * 1000),
                    _BALANCE[balance], 0 if prefetch else 1)
    err = ctypes.create_string_buffer(1024)
    h = lib.sbc_open(ctypes.byref(opts), err, len(err))
    if not h:
        raise StreamError(err.value.decode("utf-8", "replace"))
    convert = {"numpy": _to_numpy, "pyarrow": _to_pyarrow, "rows": _to_rows,
               "torch": _to_torch}[batch_format]
    return BatchIterator(lib, h, convert)

"""Run a batch function or class as a streambatch `exec` stage (framing "lines" or "arrow").

    # embed.py, run by a stage {op: exec, args: {command: [python3, embed.py], mode: batches}}
    from streambatch import udf

    class Embed:
        def __init__(self):                 # once per process: load the model here
            self.model = load_model()
        def __call__(self, batch):          # batch: list of dicts (one per JSON record)
            vecs = self.model.encode([r["text"] for r in batch])
            return [{**r, "vector": v.tolist()} for r, v in zip(batch, vecs)]

    if __name__ == "__main__":
        udf.run(Embed)

`run(fn)` reads records (one JSON value per line) from stdin and writes fn's results to stdout,
in the mode the stage chose (the worker sets STREAMBATCH_MODE):
  - batches: each batch the worker sends ends with a line holding the byte 0x1e; fn is called
    once per batch and its records are written, then the same delimiter line, then stdout is
    flushed. The process lives across batches and tasks.
  - filter: the input ends at end of file; fn is called on every `batch_size` records and on
    the rest at the end.
batch_format: "rows" (a list of dicts; the default for framing lines), "columns" (a dict of
lists, keys in first appearance order, None where a record lacks a key), "numpy" (a dict of numpy
arrays, like Ray Data's map_batches; needs numpy) or, with framing "arrow", "pyarrow" (a
pyarrow.RecordBatch; the default there). fn returns the same kind (a list of records, a dict of
equal-length columns, a RecordBatch or Table) or None for no records.

Framing "arrow" (the stage sets args.framing: arrow; the worker sets STREAMBATCH_FRAMING): the
input is an Arrow IPC stream of the partition's columns (a jsonl source gives one utf8 column
"record" holding each JSON text: json_records(batch) parses it), the output an Arrow IPC stream
of typed columns, which a jsonl or csv sink writes as one JSON object per row. Lists of equal
length (a 2-D numpy array, Python lists of floats) become fixed-size lists (tensors). In mode
batches exactly one output batch answers each input batch; when fn's output schema changes the
kit ends its stream and starts a new one (the worker accepts that; one task's rows must share a
schema).

An exception in fn prints its traceback on stderr and ends the process with status 1: the
worker puts the end of the traceback in the task's error and retries the task (with a new
process). Output that is not JSON-serialisable, or columns of different lengths, is an error
that names the batch.
"""

import io
import json
import os
import sys
import traceback

DELIM = "\x1e"

__all__ = ["run", "json_records", "DELIM"]


def _columns(records):
    """A dict of lists; keys in first-appearance order, None where a record lacks one."""
    if records and all(isinstance(r, dict) for r in records):
        keys = list(records[0])
        n = len(keys)
        try:  # the common case: every record has exactly the first one's keys
            if all(len(r) == n for r in records):
                return {k: [r[k] for r in records] for k in keys}
        except KeyError:
            pass
    cols = {}
    for r in records:
        if isinstance(r, dict):
            for k in r:
                cols.setdefault(k, None)
    return {k: [r.get(k) if isinstance(r, dict) else None for r in records] for k in cols}


def _to_batch(records, batch_format):
    if batch_format == "rows":
        return records
    cols = _columns(records)
    if batch_format == "numpy":
        import numpy as np

        return {k: np.asarray(v) for k, v in cols.items()}
    return cols


def _plain(v):
    tolist = getattr(v, "tolist", None)  # numpy arrays and scalars
    return tolist() if callable(tolist) else v


def _from_result(res):
    if res is None:
        return []
    if isinstance(res, dict):
        keys = list(res)
        cols = [_plain(res[k]) for k in keys]
        lens = {k: len(c) for k, c in zip(keys, cols)}
        if len(set(lens.values())) > 1:
            raise ValueError("the batch function returned columns of different lengths: %s" % lens)
        return [dict(zip(keys, vals)) for vals in zip(*cols)]
    if isinstance(res, (list, tuple)):
        return [_plain(r) for r in res]
    raise TypeError(
        "the batch function must return a list of records, a dict of columns or None, not %s"
        % type(res).__name__
    )


_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def _emit(out, records, batch_no):
    try:
        lines = [_encode(r) for r in records]
    except (TypeError, ValueError) as e:
        raise TypeError("batch %d: a returned record is not JSON: %s" % (batch_no, e)) from e
    if lines:
        lines.append("")
        out.write("\n".join(lines).encode())


def json_records(batch, column="record"):
    """The JSON texts of a batch's record column (framing arrow, jsonl source) as Python values."""
    loads = json.loads
    return [loads(t) for t in batch.column(batch.schema.get_field_index(column)).to_pylist()]


def _arrow_in(batch, batch_format):
    if batch_format == "pyarrow":
        return batch
    if batch_format == "rows":
        return batch.to_pylist()
    if batch_format == "columns":
        return batch.to_pydict()
    return {name: col.to_numpy(zero_copy_only=False)
            for name, col in zip(batch.schema.names, batch.columns)}


def _arrow_column(pa, v):
    """A column value from fn as an Arrow array; equal-length lists become fixed-size lists."""
    nd = getattr(v, "ndim", None)
    if nd == 2:  # a 2-D numpy array: one fixed-size list per row
        return pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
    arr = v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)
    return _fixed_lists(pa, arr)


def _fixed_lists(pa, arr):
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        lens = {n for n in arr.value_lengths().to_pylist() if n is not None}
        if len(lens) == 1:
            return arr.cast(pa.list_(arr.type.value_type, lens.pop()))
    return arr


def _arrow_out(pa, res):
    """fn's result as one RecordBatch (None: no rows)."""
    if res is None:
        return None
    if isinstance(res, pa.Table):
        res = res.combine_chunks()
        batches = res.to_batches()
        res = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=res.schema)
    if isinstance(res, pa.RecordBatch):
        cols = [_fixed_lists(pa, c) for c in res.columns]
        return pa.RecordBatch.from_arrays(cols, names=res.schema.names)
    if isinstance(res, dict):
        return pa.RecordBatch.from_arrays([_arrow_column(pa, v) for v in res.values()],
                                          names=[str(k) for k in res])
    if isinstance(res, (list, tuple)):
        if not res:
            return None
        b = pa.RecordBatch.from_pylist([_plain(r) for r in res])
        return pa.RecordBatch.from_arrays([_fixed_lists(pa, c) for c in b.columns],
                                          names=b.schema.names)
    raise TypeError("the batch function must return a RecordBatch, a Table, a dict of columns, "
                    "a list of records or None, not %s" % type(res).__name__)


def _run_arrow(call, batch_format, stdin, stdout, mode):
    import pyarrow as pa
    import pyarrow.ipc as ipc

    writer = schema = None
    batches = 0
    empty = pa.RecordBatch.from_arrays([], names=[])

    def write(out):
        nonlocal writer, schema
        if writer is not None and not out.schema.equals(schema):
            writer.close()  # end this stream; the next one has the new schema
            writer = None
        if writer is None:
            writer, schema = ipc.new_stream(stdout, out.schema), out.schema
        writer.write_batch(out)

    for batch in ipc.open_stream(stdin):
        batches += 1
        try:
            out = _arrow_out(pa, call(_arrow_in(batch, batch_format)))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise TypeError("batch %d: the result is not an Arrow batch: %s" % (batches, e)) from e
        if out is None and mode == "batches":  # every batch gets exactly one answer
            out = pa.RecordBatch.from_pylist([], schema=schema) if writer else empty
        if out is not None and (out.num_rows > 0 or mode == "batches"):
            write(out)
        stdout.flush()
    if writer is not None:
        writer.close()
    stdout.flush()
    return batches


def run(fn, *, batch_format=None, batch_size=1000, fn_args=(), fn_kwargs=None,
        stdin=None, stdout=None):
    """Serve fn (a callable, or a class instantiated once with fn_args/fn_kwargs) as an exec
    stage until the input ends. stdin (text for lines, binary for arrow) and stdout (binary)
    default to the process's; they are parameters for tests. Returns the number of batches
    processed."""
    arrow = os.environ.get("STREAMBATCH_FRAMING", "lines") == "arrow"
    if batch_format is None:
        batch_format = "pyarrow" if arrow else "rows"
    if batch_format not in ("rows", "columns", "numpy") + (("pyarrow",) if arrow else ()):
        raise ValueError('batch_format must be "rows", "columns", "numpy"'
                         + (' or "pyarrow"' if arrow else ' ("pyarrow" needs framing arrow)'))
    stdout = stdout if stdout is not None else sys.stdout.buffer
    mode = os.environ.get("STREAMBATCH_MODE", "filter")
    if arrow:
        try:
            call = fn(*fn_args, **(fn_kwargs or {})) if isinstance(fn, type) else fn
            return _run_arrow(call, batch_format, stdin if stdin is not None else sys.stdin.buffer,
                              stdout, mode)
        except Exception:  # the worker shows the end of stderr in the task's error
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            sys.exit(1)
    if stdin is None:  # text decoding in bulk is the fastest way to json.loads lines
        stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n")
    delim = DELIM + "\n"
    loads = json.loads
    try:
        call = fn(*fn_args, **(fn_kwargs or {})) if isinstance(fn, type) else fn
        batches = 0
        batch = []

        def flush():
            nonlocal batches, batch
            batches += 1
            _emit(stdout, _from_result(call(_to_batch(batch, batch_format))), batches)
            batch = []

        for line in stdin:
            if mode == "batches" and line == delim:
                if batch:
                    flush()
                stdout.write(b"\x1e\n")
                stdout.flush()
                continue
            if line.isspace():
                continue
            batch.append(loads(line))
            if mode != "batches" and len(batch) >= batch_size:
                flush()
        if batch:
            flush()
        stdout.flush()
        return batches
    except Exception:  # the worker shows the end of stderr in the task's error
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        sys.exit(1)

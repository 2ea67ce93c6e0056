"""Run a batch function or class as a streambatch `exec` stage (framing "lines").

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
batch_format: "rows" (a list of dicts; the default), "columns" (a dict of lists, keys in first
appearance order, None where a record lacks a key) or "numpy" (a dict of numpy arrays, like Ray
Data's map_batches; needs numpy). fn returns the same kind (a list of records, a dict of
equal-length columns) or None for no records.

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

__all__ = ["run", "DELIM"]


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


def run(fn, *, batch_format="rows", batch_size=1000, fn_args=(), fn_kwargs=None,
        stdin=None, stdout=None):
    """Serve fn (a callable, or a class instantiated once with fn_args/fn_kwargs) as an exec
    stage until the input ends. stdin (text) and stdout (binary) default to the process's;
    they are parameters for tests. Returns the number of batches processed."""
    if batch_format not in ("rows", "columns", "numpy"):
        raise ValueError('batch_format must be "rows", "columns" or "numpy"')
    if stdin is None:  # text decoding in bulk is the fastest way to json.loads lines
        stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", newline="\n")
    stdout = stdout if stdout is not None else sys.stdout.buffer
    mode = os.environ.get("STREAMBATCH_MODE", "filter")
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

"""lib/arrow/ipc.c against pyarrow, both ways (run by tests/sdk/test-python-kit.sh with a venv
that has pyarrow; argv[1] is build/tests/helpers/sb_arrow_ipc).

  1. pyarrow reads what we write: the helper's sample stream (every column type, nulls, a slice
     that starts mid-bitmap-byte, an empty batch) equals the values computed here from the same
     formula, and passes pyarrow's full validation.
  2. we read what pyarrow writes: a table of every type we take (large_string/large_binary too),
     with nulls, sliced arrays (non-zero offsets) and several batches, in the current and the
     legacy framing: the helper's dump equals pyarrow's own values.
  3. what we do not take is refused with a message naming the field or the feature, never a
     crash: dictionaries, timestamps in seconds, nested lists, float16, compression, nulls inside a
     fixed-size list, a truncated stream.
Prints one "ok"/"FAIL" line per check and exits 1 on any failure.
"""

import io
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.ipc as ipc

tool = sys.argv[1]
failed = 0


def check(name, cond, detail=""):
    global failed
    print(("ok   " if cond else "FAIL ") + name)
    if not cond:
        failed += 1
        print("     " + str(detail)[:2000])


def norm(v):
    """pyarrow's python values in the helper's JSON form."""
    if isinstance(v, bytes):
        return "0x" + v.hex()
    if isinstance(v, list):
        return [norm(x) for x in v]
    return v


def dump(data):
    p = subprocess.run([tool, "dump"], input=data, capture_output=True, timeout=60)
    rows = [json.loads(l) for l in p.stdout.decode().splitlines() if l.startswith("{")]
    return p.returncode, rows, p.stdout.decode().splitlines()[-1:] , p.stderr.decode()


def stream(table_or_batches, schema=None, **opts):
    sink = io.BytesIO()
    batches = table_or_batches if isinstance(table_or_batches, list) else None
    sch = schema if schema is not None else (batches[0].schema if batches else table_or_batches.schema)
    with ipc.new_stream(sink, sch, options=ipc.IpcWriteOptions(**opts)) as w:
        if batches is not None:
            for b in batches:
                w.write_batch(b)
        else:
            w.write_table(table_or_batches, max_chunksize=4)
    return sink.getvalue()


# ---- 1. pyarrow reads what we write --------------------------------------------------------
def expected_row(i):
    nul = i % 4 == 1
    return {
        "i8": None if nul else i * 9 - 60,
        "i16": -30000 + i * 1000,
        "i32": None if nul else i * -123456,
        "i64": i * 1000000000000007,
        "u8": i * 19,
        "u16": i * 5000,
        "u32": i * 300000000,
        "u64": i * 1400000000000000000,
        "f32": i * 0.5 - 1,
        "f64": None if nul else i / 3.0,
        "b": None if nul else i % 3 == 0,
        "s": None if nul else ("" if i == 6 else "row-%d-\u00e9\u2713" % i),
        "bin": bytes([i, 0, 255, i]),
        "t": None if nul else [float(i), i + 0.25, -float(i)],
        "ti": [i, -i * i],
    }


ours = subprocess.run([tool, "sample"], capture_output=True, timeout=60)
check("the helper writes its sample stream", ours.returncode == 0, ours.stderr)
try:
    reader = ipc.open_stream(pa.py_buffer(ours.stdout))
    batches = list(reader)
    table = pa.Table.from_batches(batches, schema=reader.schema)
    table.validate(full=True)
    check("pyarrow opens and fully validates our stream (3 batches: 5, 8, 0 rows)",
          [b.num_rows for b in batches] == [5, 8, 0], [b.num_rows for b in batches])
    got = table.to_pylist()
    want = [expected_row(i) for i in range(13)]
    check("pyarrow reads every value we wrote (15 column types, nulls, a mid-byte slice)",
          got == want, [(g, w) for g, w in zip(got, want) if g != w][:2])
    types = {f.name: str(f.type) for f in reader.schema}
    check("our schema has the Arrow types pyarrow expects",
          types["t"] == "fixed_size_list<item: float not null>[3]" and types["u64"] == "uint64"
          and types["s"] == "string" and types["bin"] == "binary" and types["b"] == "bool"
          and reader.schema.field("i16").nullable is False and reader.schema.field("s").nullable,
          types)
except Exception as e:  # noqa: BLE001 - a failure to read is the finding
    check("pyarrow reads our stream", False, repr(e))

# ---- 2. we read what pyarrow writes --------------------------------------------------------
n = 23
def col(f):
    return [None if i % 5 == 2 else f(i) for i in range(n)]

full = pa.table({
    "i8": pa.array(col(lambda i: -i), pa.int8()),
    "i16": pa.array(col(lambda i: i * 1000 - 9000), pa.int16()),
    "i32": pa.array(col(lambda i: i * 99999), pa.int32()),
    "i64": pa.array([i * -(2 ** 60) // 23 for i in range(n)], pa.int64()),
    "u8": pa.array(col(lambda i: 255 - i), pa.uint8()),
    "u16": pa.array(col(lambda i: 65535 - i), pa.uint16()),
    "u32": pa.array(col(lambda i: 4294967295 - i), pa.uint32()),
    "u64": pa.array(col(lambda i: 18446744073709551615 - i), pa.uint64()),
    "f32": pa.array(col(lambda i: i / 4.0), pa.float32()),
    "f64": pa.array(col(lambda i: i * 1e300 if i % 2 else -i / 7.0), pa.float64()),
    "b": pa.array(col(lambda i: i % 3 == 1), pa.bool_()),
    "s": pa.array(col(lambda i: "\u65e5\u672c" * (i % 4) + str(i)), pa.string()),
    "ls": pa.array(col(lambda i: "large-" + "x" * i), pa.large_string()),
    "bin": pa.array(col(lambda i: bytes(range(i % 7))), pa.binary()),
    "lbin": pa.array(col(lambda i: b"\xff" * (i % 3)), pa.large_binary()),
    "vec": pa.array(col(lambda i: [i * 0.5, -i, 1.0 / (i + 1), 0.0]), pa.list_(pa.float32(), 4)),
    "ivec": pa.array([[i, i + 1] for i in range(n)], pa.list_(pa.int16(), 2)),
})
want = [{k: norm(v) for k, v in r.items()} for r in full.to_pylist()]


def same(rows, expect):
    if len(rows) != len(expect):
        return False
    for g, w in zip(rows, expect):
        if g.keys() != w.keys():
            return False
        for k in g:
            if g[k] != w[k] and not (isinstance(w[k], float) and float(g[k]) == w[k]):
                return False
    return True


for legacy in (False, True):
    data = stream(full, use_legacy_format=legacy)
    rc, rows, tail, err = dump(data)
    check("we read pyarrow's stream of every type (%s framing, batches of 4 rows)"
          % ("legacy" if legacy else "current"),
          rc == 0 and same(rows, want) and tail == ["batches 6 rows 23"],
          (rc, err, tail, [(g, w) for g, w in zip(rows, want) if g != w][:2]))

sliced = full.slice(3, 13)  # arrays with offset 3: validity and offsets start mid-buffer
rc, rows, tail, err = dump(stream(sliced.to_batches(), schema=full.schema))
check("we read sliced arrays (non-zero offsets in every buffer)",
      rc == 0 and same(rows, want[3:16]), (rc, err, rows[:1], want[3:4]))

rc, rows, tail, err = dump(stream([pa.record_batch([pa.array([], pa.string())], names=["e"])]))
check("we read an empty batch", rc == 0 and rows == [] and tail == ["batches 1 rows 0"], (rc, err, tail))

t = pa.table({"d": pa.array([-1, 19000], pa.date32()),
              **{u: pa.array([-5, 2 ** 40], pa.timestamp(u)) for u in ("ms", "us", "ns")}})
rc, rows, tail, err = dump(stream(t))
check("we read date32 and timestamps in ms, us and ns (their int values)",
      rc == 0 and rows == [{"d": -1, "ms": -5, "us": -5, "ns": -5},
                           {"d": 19000, "ms": 2 ** 40, "us": 2 ** 40, "ns": 2 ** 40}],
      (rc, err, rows))

# ---- 3. refused with a clear message --------------------------------------------------------
def refused(name, data, *needles):
    rc, rows, tail, err = dump(data)
    check("refused: " + name, rc == 1 and all(s in err for s in needles) and "Sanitizer" not in err,
          (rc, err))


refused("a dictionary-encoded column",
        stream(pa.table({"d": pa.array(["a", "b", "a"]).dictionary_encode()})),
        'field "d"', "dictionary")
refused("a timestamp in seconds (ms, us and ns are read)",
        stream(pa.table({"ts": pa.array([1, 2], pa.timestamp("s"))})), 'field "ts"', "Timestamp",
        "unit 0")
refused("a variable-size list column",
        stream(pa.table({"l": pa.array([[1], [2, 3]])})), 'field "l"', "List")
refused("a float16 column",
        stream(pa.table({"h": pa.array([1, 2], pa.int8()).cast(pa.float16())})), 'field "h"', "16-bit")
refused("a compressed stream",
        stream(pa.table({"x": pa.array(range(100))}), compression="zstd"), "compressed")
refused("nulls inside a fixed-size list",
        stream(pa.table({"v": pa.array([[1.0, None]], pa.list_(pa.float64(), 2))})), '"v"', "null values inside")
good = stream(full)
refused("a stream cut inside a message", good[: len(good) // 2], "ends inside a message")
bad = bytearray(good)
bad[4:8] = (1 << 30).to_bytes(4, "little")
refused("a metadata length of 1 GiB", bytes(bad), "metadata length")

sys.exit(1 if failed else 0)

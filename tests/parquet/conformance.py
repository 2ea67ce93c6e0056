#!/usr/bin/env python3
"""Parquet reader conformance (issue 39): files written by two independent writers, pyarrow and
DuckDB, with every type, encoding, codec and page version the reader supports, nulls and several
row groups, are read by `streambatch run` (parquet source -> jsonl sink) and every value is
compared with what pyarrow reads. Then hostile files must fail cleanly, naming the file.

  conformance.py STREAMBATCH_BINARY WORKDIR
Prints one line per check and "N passed, N failed"; exits non-zero on any failure."""
import json, os, shutil, struct, subprocess, sys
import pyarrow as pa
import pyarrow.parquet as pq
import duckdb
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import check, finish  # noqa: E402

sb, work = sys.argv[1], sys.argv[2]



N = 3000  # rows; several row groups and pages per file


def table(nulls=True):
    def nv(vals, every=7):  # every 7th value null where the column is nullable
        return [None if nulls and i % every == 3 else v for i, v in enumerate(vals)]
    r = range(N)
    cols = {
        "id": pa.array(list(r), pa.int64()),
        "i8": pa.array(nv([(i * 37) % 256 - 128 for i in r]), pa.int8()),
        "i16": pa.array(nv([(i * 997) % 65536 - 32768 for i in r]), pa.int16()),
        "i32": pa.array(nv([(i * 2654435761) % 2**32 - 2**31 for i in r]), pa.int32()),
        "i64": pa.array(nv([(i * 0x9E3779B97F4A7C15) % 2**64 - 2**63 for i in r]), pa.int64()),
        "u8": pa.array(nv([(i * 31) % 256 for i in r]), pa.uint8()),
        "u16": pa.array(nv([(i * 7919) % 65536 for i in r]), pa.uint16()),
        "u32": pa.array(nv([(i * 2654435761) % 2**32 for i in r]), pa.uint32()),
        "u64": pa.array(nv([(i * 0x9E3779B97F4A7C15) % 2**64 for i in r]), pa.uint64()),
        "f32": pa.array(nv([i * 0.37 - 100.0 for i in r]), pa.float32()),
        "f64": pa.array(nv([i * 1e-3 - 1.5 + (i % 13) * 1e10 for i in r]), pa.float64()),
        "b": pa.array(nv([i % 3 == 0 for i in r], 5), pa.bool_()),
        "s": pa.array(nv([f"str-{i % 50}-é{'x' * (i % 9)}" for i in r]), pa.string()),
        "bin": pa.array(nv([f"bytes{i % 77}".encode() for i in r]), pa.binary()),
        "fb": pa.array(nv([f"{i % 10000:04d}".encode() for i in r]), pa.binary(4)),
        "d": pa.array(nv([i * 3 - 4000 for i in r]), pa.date32()),
        "tms": pa.array(nv([1_600_000_000_000 + i * 1001 for i in r]), pa.timestamp("ms")),
        "tus": pa.array(nv([1_600_000_000_000_000 + i * 7 for i in r]), pa.timestamp("us", "UTC")),
        "tns": pa.array(nv([1_600_000_000_000_000_000 + i * 13 for i in r]), pa.timestamp("ns")),
        "vec": pa.array([[float(i), i / 2.0, -i * 0.25, 1.0] for i in r], pa.list_(pa.float32())),
        "ivec": pa.array([[i, -i, i * 3] for i in r], pa.list_(pa.int64(), 3)),
        # lists of 8- and 16-bit integers: INT32 leaves annotated INT(8|16), 4 bytes a value in
        # the file (read as raw int32 bytes before 2026-11-30: a pre-decoded image's pixels came
        # back as 252, 0, 0, 0, 198, ...)
        "u8vec": pa.array([[(i * 31) % 256, 255, 0, i % 7] for i in r], pa.list_(pa.uint8())),
        "i8vec": pa.array([[(i * 37) % 256 - 128, -128, 127] for i in r], pa.list_(pa.int8())),
        "u16vec": pa.array([[(i * 7919) % 65536, 65535] for i in r], pa.list_(pa.uint16())),
        "i16vec": pa.array([[(i * 997) % 65536 - 32768, -1] for i in r], pa.list_(pa.int16(), 2)),
    }
    return pa.table(cols)


def expected(path, columns=None):
    t = pq.read_table(path, columns=columns)
    rows = []
    for row in t.cast(pa.schema([plain(f) for f in t.schema])).to_pylist():
        rows.append(row)
    return t.schema, rows


def plain(f):  # the value type streambatch reads each column as
    t = f.type
    if pa.types.is_timestamp(t):
        return pa.field(f.name, pa.int64())
    if pa.types.is_date32(t):
        return pa.field(f.name, pa.int32())
    if pa.types.is_fixed_size_list(t):
        return pa.field(f.name, pa.list_(t.value_type))
    return f


def same(schema, exp, got):
    if len(exp) != len(got):
        return f"{len(got)} rows, expected {len(exp)}"
    for k, (e, g) in enumerate(zip(exp, got)):
        if set(e) != set(g):
            return f"row {k}: columns {sorted(g)}, expected {sorted(e)}"
        for name, ev in e.items():
            gv = g[name]
            ft = schema.field(name).type
            if isinstance(ev, bytes):
                ev = ev.decode()
            if pa.types.is_float32(ft) and ev is not None and gv is not None:
                ok = struct.pack("<f", ev) == struct.pack("<f", gv)
            elif (pa.types.is_list(ft) or pa.types.is_fixed_size_list(ft)) and \
                    pa.types.is_float32(ft.value_type):
                ok = [struct.pack("<f", x) for x in ev] == [struct.pack("<f", x) for x in gv]
            else:
                ok = ev == gv and type(ev) is type(gv) or (isinstance(ev, float) and ev == gv)
            if not ok:
                return f"row {k}, column {name}: got {gv!r}, expected {ev!r}"
    return None


RUNS = [0]


def run(src_dir, out_dir, args=None, psize="1Gi", stages="", uri_prefix="file://"):
    RUNS[0] += 1  # a name and checkpoint of its own per run: no run resumes another
    spec = os.path.join(work, "p.yaml")
    ckpt = os.path.join(work, f"ckpt-{RUNS[0]}.json")
    a = json.dumps(args) if args else "{}"
    with open(spec, "w") as f:
        f.write(f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {{name: pq{RUNS[0]}}}
spec:
  source: {{uri: "{uri_prefix}{src_dir}/", format: parquet, partitionSize: {psize}, args: {a}}}
  stages:
  - {{name: id, op: identity}}{stages}
  sink: {{uri: "file://{out_dir}/", format: jsonl}}
""")
    shutil.rmtree(out_dir, ignore_errors=True)
    p = subprocess.run([sb, "run", spec, "--checkpoint", ckpt], capture_output=True, text=True, timeout=300)
    rows = []
    if p.returncode == 0:
        for fn in sorted(os.listdir(out_dir)):
            if fn.endswith(".jsonl"):
                with open(os.path.join(out_dir, fn)) as f:
                    rows += [json.loads(l) for l in f if l.strip()]
    return p, rows


def read_check(name, path, columns=None, psize="1Gi", order=False):
    d = os.path.join(work, "src")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    shutil.copy(path, d)
    p, got = run(d, os.path.join(work, "out"), {"columns": columns} if columns else None, psize)
    if p.returncode != 0:
        check(name, False, f"streambatch run failed: {p.stdout[-1500:]} {p.stderr[-1500:]}")
        return
    schema, exp = expected(path, columns)
    if order:  # several splits: compare as sets keyed by id
        got.sort(key=lambda r: r["id"])
        exp.sort(key=lambda r: r["id"])
    why = same(schema, exp, got)
    check(name, why is None, why)


os.makedirs(work, exist_ok=True)
T = table()
files = os.path.join(work, "files")
os.makedirs(files, exist_ok=True)

# 1. every codec, both page versions, dictionaries on (the writer's default)
for codec in ["NONE", "SNAPPY", "GZIP", "ZSTD", "LZ4", "BROTLI"]:
    for ver in ["1.0", "2.0"]:
        f = os.path.join(files, f"c-{codec}-{ver}.parquet")
        pq.write_table(T, f, compression=codec, data_page_version=ver, row_group_size=1000,
                       data_page_size=4096)
        read_check(f"pyarrow {codec} pages v{ver} dictionary", f)

# 2. every encoding without dictionaries, both page versions
enc = {"id": "DELTA_BINARY_PACKED", "i8": "DELTA_BINARY_PACKED", "i16": "BYTE_STREAM_SPLIT",
       "i32": "DELTA_BINARY_PACKED", "i64": "DELTA_BINARY_PACKED", "u8": "PLAIN",
       "u16": "DELTA_BINARY_PACKED", "u32": "BYTE_STREAM_SPLIT", "u64": "BYTE_STREAM_SPLIT",
       "f32": "BYTE_STREAM_SPLIT", "f64": "BYTE_STREAM_SPLIT", "b": "RLE",
       "s": "DELTA_BYTE_ARRAY", "bin": "DELTA_LENGTH_BYTE_ARRAY", "fb": "DELTA_BYTE_ARRAY",
       "d": "DELTA_BINARY_PACKED", "tms": "DELTA_BINARY_PACKED", "tus": "BYTE_STREAM_SPLIT",
       "tns": "PLAIN", "vec": "BYTE_STREAM_SPLIT", "ivec": "DELTA_BINARY_PACKED"}
for ver in ["1.0", "2.0"]:
    for codec in ["NONE", "ZSTD"]:
        f = os.path.join(files, f"e-{codec}-{ver}.parquet")
        pq.write_table(T, f, compression=codec, data_page_version=ver, use_dictionary=False,
                       column_encoding=enc, row_group_size=700, data_page_size=2048)
        read_check(f"pyarrow delta/byte-stream-split/RLE encodings {codec} pages v{ver}", f)
    f = os.path.join(files, f"plain-{ver}.parquet")
    pq.write_table(T, f, compression="SNAPPY", data_page_version=ver, use_dictionary=False,
                   row_group_size=1500)
    read_check(f"pyarrow PLAIN pages v{ver}", f)
    f = os.path.join(files, f"fbss-{ver}.parquet")
    pq.write_table(T.select(["id", "fb", "s"]), f, data_page_version=ver, use_dictionary=False,
                   column_encoding={"fb": "BYTE_STREAM_SPLIT", "s": "DELTA_LENGTH_BYTE_ARRAY"})
    read_check(f"pyarrow FIXED_LEN_BYTE_ARRAY BYTE_STREAM_SPLIT pages v{ver}", f)

# 3. no nulls (required columns), one row group; and nulls only
f = os.path.join(files, "req.parquet")
Tn = table(nulls=False)
pq.write_table(pa.table(Tn.columns, schema=pa.schema([pa.field(n, c.type, nullable=False)
                                                      for n, c in zip(Tn.column_names, Tn.columns)])), f)
read_check("pyarrow required columns", f)
f = os.path.join(files, "allnull.parquet")
pq.write_table(pa.table({"id": pa.array(range(500), pa.int64()),
                         "x": pa.array([None] * 500, pa.float64()),
                         "y": pa.array([None] * 500, pa.string())}), f)
read_check("pyarrow a column of nulls only", f)

# 4. args.columns, and row groups spread over splits (partitionSize smaller than the file)
f = os.path.join(files, "c-ZSTD-2.0.parquet")
read_check("args.columns reads the named columns in their order", f, ["s", "id", "vec"])
big = os.path.join(files, "many-rg.parquet")
pq.write_table(T, big, row_group_size=100, compression="NONE", use_dictionary=False)
read_check("30 row groups over splits of 16 KiB: every row once", big, psize="16Ki", order=True)

# 4b. what other writers' options add to a file: page index, page checksums, bloom filters,
# sorting columns, no Arrow schema, legacy list naming, dictionary arrays, large strings, and
# files with no rows at all
f = os.path.join(files, "extras.parquet")
T2 = T.append_column("dictcol", pa.array([f"k{i % 5}" for i in range(N)]).dictionary_encode())
T2 = T2.append_column("ls", pa.array([f"large-{i}" for i in range(N)], pa.large_string()))
kw = dict(write_page_index=True, write_page_checksum=True, store_schema=False,
          use_compliant_nested_type=False, row_group_size=1000,
          sorting_columns=[pq.SortingColumn(0)])
try:
    pq.write_table(T2, f, bloom_filter_options={"s": {"ndv": 100}}, **kw)
except TypeError:  # a pyarrow without bloom filter writing
    pq.write_table(T2, f, **kw)
read_check("pyarrow page index, checksums, sorting columns, legacy list names, dictionary "
           "and large strings", f)
f = os.path.join(files, "empty.parquet")
pq.write_table(T.slice(0, 0), f)
read_check("a file with no rows", f)

# 5. DuckDB as the writer
con = duckdb.connect()
for codec in ["uncompressed", "snappy", "gzip", "zstd", "lz4", "brotli"]:
    for ver in ["V1", "V2"]:
        f = os.path.join(files, f"duck-{codec}-{ver}.parquet")
        con.execute(f"""COPY (SELECT i::BIGINT AS id,
              CASE WHEN i % 5 = 1 THEN NULL ELSE (i * 7)::INTEGER END AS i32,
              CASE WHEN i % 6 = 1 THEN NULL ELSE (i % 250 - 125)::TINYINT END AS i8,
              (i * 1000003)::UBIGINT AS u64,
              CASE WHEN i % 4 = 1 THEN NULL ELSE i / 3.0 END AS f64,
              (i / 7.0)::FLOAT AS f32,
              i % 2 = 0 AS b,
              CASE WHEN i % 9 = 0 THEN NULL ELSE 'v' || (i % 37)::VARCHAR END AS s,
              DATE '2020-01-01' + (i % 400)::INTEGER AS d,
              TIMESTAMP '2021-03-04 05:06:07' + INTERVAL (i) SECOND AS ts,
              [i::FLOAT, (i * 2)::FLOAT] AS vec
            FROM range(5000) t(i)) TO '{f}'
            (FORMAT parquet, COMPRESSION {codec}, ROW_GROUP_SIZE 2048, PARQUET_VERSION {ver})""")
        read_check(f"duckdb {codec} {ver}", f)

# 5b. from S3 (MinIO, where `make deps` built it): ranged reads of the footer and of each row
# group's chunks, a file cut into splits, args.columns
def s3_part():
    import glob, socket, tempfile, time, urllib.request
    from pyarrow import fs
    bins = [os.environ.get("SB_MINIO_BIN", "")] + \
        sorted(glob.glob(os.path.expanduser("~/.cache/streambatch/minio-*/minio")))
    mbin = next((b for b in bins if b and os.access(b, os.X_OK)), None)
    if mbin is None:
        print("ok: s3: SKIPPED (no MinIO binary; `make deps` builds it)")
        return
    ports = []
    for _ in range(2):
        so = socket.socket()
        so.bind(("127.0.0.1", 0))
        ports.append(so.getsockname()[1])
        so.close()
    data = tempfile.mkdtemp(dir=work)
    env = dict(os.environ, MINIO_ROOT_USER="sbtestadmin", MINIO_ROOT_PASSWORD="sbtestsecret123",
               MINIO_BROWSER="off", MINIO_UPDATE="off")
    srv = subprocess.Popen([mbin, "server", "--quiet", "--address", f"127.0.0.1:{ports[0]}",
                            "--console-address", f"127.0.0.1:{ports[1]}", data], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{ports[0]}"
    try:
        for _ in range(100):
            try:
                if urllib.request.urlopen(url + "/minio/health/ready", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        s3 = fs.S3FileSystem(access_key="sbtestadmin", secret_key="sbtestsecret123",
                             endpoint_override=url, scheme="http", region="us-east-1",
                             allow_bucket_creation=True)
        s3.create_dir("pqdata")
        pq.write_table(T, "pqdata/in/t.parquet", filesystem=s3, row_group_size=200,
                       compression="ZSTD")
        os.environ.update(AWS_ACCESS_KEY_ID="sbtestadmin", AWS_SECRET_ACCESS_KEY="sbtestsecret123",
                          AWS_ENDPOINT_URL_S3=url, AWS_REGION="us-east-1")
        local = os.path.join(work, "s3copy.parquet")
        pq.write_table(T, local, row_group_size=200, compression="ZSTD")
        for cols, psize in ((None, "1Gi"), (["id", "s", "vec"], "16Ki")):
            p, got = run("s3://pqdata/in", os.path.join(work, "out"),
                         {"columns": cols} if cols else None, psize, uri_prefix="")
            if p.returncode != 0:
                check(f"s3 {cols} {psize}", False, p.stdout[-1500:] + p.stderr[-1500:])
                continue
            schema, exp = expected(local, cols)
            got.sort(key=lambda r: r["id"])
            exp.sort(key=lambda r: r["id"])
            why = same(schema, exp, got)
            check(f"s3: a ZSTD file of 15 row groups, columns {cols}, splits of {psize}",
                  why is None, why)
    finally:
        srv.kill()
        srv.wait()


s3_part()

# 6. what is refused, by name
def refused(name, tbl, want):
    d = os.path.join(work, "src")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    pq.write_table(tbl, os.path.join(d, "x.parquet"),
                   use_deprecated_int96_timestamps="t96" in tbl.column_names)
    p, _ = run(d, os.path.join(work, "out"))
    msg = p.stdout + p.stderr
    # a data error: the split's partition is errored (execution.maxErroredPartitions), named
    check(name, "errored partition" in msg and want in msg and "x.parquet" in msg,
          f"rc {p.returncode}: {msg[-800:]}")


refused("DECIMAL is refused naming the column", pa.table({"dec": pa.array([1, 2], pa.decimal128(5, 2))}),
        'column "dec" has type DECIMAL')
refused("a struct is refused naming the column",
        pa.table({"st": pa.array([{"a": 1}], pa.struct([("a", pa.int64())]))}), 'column "st" is a struct')
refused("a list of varying length is refused naming the column",
        pa.table({"l": pa.array([[1.0], [1.0, 2.0]], pa.list_(pa.float64()))}), 'column "l.list.element": row 1 has 2 list values')
refused("INT96 timestamps are refused naming the column",
        pa.table({"t96": pa.array([1, 2], pa.timestamp("ns"))}), 'column "t96" has type INT96')
refused("a map is refused", pa.table({"m": pa.array([[("a", 1)]], pa.map_(pa.string(), pa.int64()))}),
        'column "m" is a MAP')


# 7. hostile files: each must fail with a message naming the file (never crash, never hang)
def hostile(name, data, want):
    d = os.path.join(work, "src")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    with open(os.path.join(d, "bad.parquet"), "wb") as f:
        f.write(data)
    p, _ = run(d, os.path.join(work, "out"))
    msg = p.stdout + p.stderr
    check(f"hostile: {name}", "errored partition" in msg and "bad.parquet" in msg and want in msg
          and "Sanitizer" not in msg and "lost" in msg and ", 0 lost" in msg,
          f"rc {p.returncode}: {msg[-800:]}")


good = open(os.path.join(files, "plain-1.0.parquet"), "rb").read()
hostile("truncated footer", good[:-20], "")
hostile("wrong magic", good[:-4] + b"PAR2", "no PAR1 magic")
flen = struct.unpack("<I", good[-8:-4])[0]
hostile("footer length past the file", good[:-8] + struct.pack("<I", len(good)) + b"PAR1",
        "footer length")
# a page size past the chunk: the first page header's compressed_page_size set huge
plainf = os.path.join(work, "one.parquet")
pq.write_table(pa.table({"x": pa.array(range(100), pa.int32())}), plainf, use_dictionary=False,
               compression="NONE")
b = bytearray(open(plainf, "rb").read())
# PageHeader at byte 4: field 1 type (0x15 0x00), field 2 uncompressed (0x15 zigzag), field 3
# compressed (0x15 zigzag): rewrite field 3's varint as a huge size of the same byte length
i = 4
assert b[i] == 0x15
i += 2
assert b[i] == 0x15
i += 1
while b[i] & 0x80:
    i += 1
i += 1
assert b[i] == 0x15
j = i + 1
n = 1
while b[j + n - 1] & 0x80:
    n += 1
b[j:j + n] = bytes([0xff] * (n - 1) + [0x7f]) if n > 1 else bytes([0x7e])
hostile("a page size past the file", bytes(b), "page")
# a dictionary index out of range: the dictionary page's header says 1 entry where there are 2
dictf = os.path.join(work, "dict.parquet")
pq.write_table(pa.table({"s": pa.array(["a", "b"] * 50)}), dictf, compression="NONE",
               data_page_version="1.0")
b = bytearray(open(dictf, "rb").read())
off = pq.ParquetFile(dictf).metadata.row_group(0).column(0).dictionary_page_offset
# DictionaryPageHeader (PageHeader field 7, struct) begins with field 1 num_values = 2 (zigzag 4)
pos = max(b.find(b"\x4c\x15\x04", off, off + 48), b.find(b"\x3c\x15\x04", off, off + 48))
assert pos >= 0, "no dictionary page header found"
b[pos + 2] = 0x02
hostile("a dictionary index out of range", bytes(b), "dictionary index")
# a list<uint8> value out of its type's range: the file holds INT32s annotated INT(8, unsigned),
# one of them patched from 177 to 300 (plain, uncompressed, no statistics)
u8f = os.path.join(work, "u8.parquet")
pq.write_table(pa.table({"v": pa.array([[7, 77, 177]] * 100, pa.list_(pa.uint8()))}), u8f,
               compression="NONE", use_dictionary=False, write_statistics=False)
b = bytearray(open(u8f, "rb").read())
pos = b.find(b"\xb1\x00\x00\x00")
assert pos >= 0, "no value 177 found"
b[pos:pos + 4] = struct.pack("<i", 300)
hostile("a list<uint8> value out of range", bytes(b), "300 does not fit its uint8 type")
# a decompression bomb: a page whose declared uncompressed size is larger than what it inflates to
bombf = os.path.join(work, "bomb.parquet")
pq.write_table(pa.table({"z": pa.array([0] * 200000, pa.int64())}), bombf, compression="ZSTD",
               use_dictionary=False)
b = bytearray(open(bombf, "rb").read())
# PageHeader field 2 (uncompressed size): set it to 8 bytes less, so the data inflates past it
i = 6
v = 0; s = 0; st = i + 1; e = st
while True:
    v |= (b[e] & 0x7f) << s; s += 7
    if not b[e] & 0x80:
        break
    e += 1
size = (v >> 1) ^ -(v & 1)
new = size - 8
zz = (new << 1) ^ (new >> 63)
enc = []
while True:
    byte = zz & 0x7f; zz >>= 7
    enc.append(byte | (0x80 if zz else 0))
    if not zz:
        break
if len(enc) == e - st + 1:
    b[st:e + 1] = bytes(enc)
hostile("a page that inflates past its declared size", bytes(b), "declared")

finish()

#!/usr/bin/env python3
"""Parquet writer conformance (issue 39): files that `streambatch run` writes with a parquet sink
are read back by pyarrow (equal to the input, Table.validate(full=True), statistics equal to the
row groups' own min/max/null count), by DuckDB (read_parquet, equal) and by our own reader (a
second run from our files). Typed partitions (a parquet source of every written type, nulls,
several row groups, each codec), jsonl records typed by sink.args.schema or by the schema inferred
from the first sink partition; a record that does not fit and bad sink args are refused, naming
the row, field or argument.

  writer.py STREAMBATCH_BINARY WORKDIR
Prints one line per check and "N passed, N failed"; exits non-zero on any failure."""
import glob, json, os, shutil, subprocess, sys
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import duckdb
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import check, finish  # noqa: E402

sb, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
RUNS = [0]



N = 5000


def table():
    def nv(vals, every=7):
        return [None if i % every == 3 else v for i, v in enumerate(vals)]
    r = range(N)
    return pa.table({
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
        "zero": pa.array([0.0 if i % 2 else -0.0 for i in r], pa.float64()),
        "b": pa.array(nv([i % 3 == 0 for i in r], 5), pa.bool_()),
        "s": pa.array(nv([f"str-{i % 50}-é{'x' * (i % 9)}" for i in r]), pa.string()),
        "bin": pa.array(nv([bytes([i % 256, 0, 255]) * (i % 4) for i in r]), pa.binary()),
        "allnull": pa.array([None] * N, pa.int32()),
        "vec": pa.array([[float(i), i / 2.0, -i * 0.25, 1.0] for i in r],
                        pa.list_(pa.float32())),
        "ivec": pa.array([[i, -i, i * 3] for i in r], pa.list_(pa.int64())),
    })


def spec(src, fmt, sink, sink_args, psize="1Gi"):
    RUNS[0] += 1
    return f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {{name: pqw{RUNS[0]}}}
spec:
  source: {{uri: "file://{src}/", format: {fmt}, partitionSize: {psize}}}
  stages:
  - {{name: id, op: identity}}
  sink: {{uri: "file://{sink}/", format: parquet, args: {json.dumps(sink_args)}}}
"""


def run(text, sink):
    path = os.path.join(work, f"p{RUNS[0]}.yaml")
    with open(path, "w") as f:
        f.write(text)
    shutil.rmtree(sink, ignore_errors=True)
    return subprocess.run([sb, "run", path, "--checkpoint", os.path.join(work, f"ck{RUNS[0]}")],
                          capture_output=True, text=True, timeout=300)


def parts(d):
    return sorted(glob.glob(os.path.join(d, "part-*.parquet")))


def read_ours(d):
    """Our files via pyarrow: each validated in full, then concatenated and sorted by id."""
    ts = []
    for f in parts(d):
        t = pq.read_table(f)
        t.validate(full=True)
        ts.append(t)
    t = pa.concat_tables(ts)
    return t.sort_by("id") if "id" in t.column_names else t


def stats_ok(d):
    """Every chunk's statistics equal its row group's own min, max and null count."""
    for f in parts(d):
        pf = pq.ParquetFile(f)
        for g in range(pf.metadata.num_row_groups):
            rg = pf.read_row_group(g)
            for k, name in enumerate(rg.column_names):
                st = pf.metadata.row_group(g).column(k).statistics
                col = rg.column(name)
                if st is None or not st.has_null_count:
                    return f"{f} rg {g} {name}: no statistics"
                if pa.types.is_list(col.type):
                    col = pc.list_flatten(col)
                if st.null_count != col.null_count:
                    return f"{f} rg {g} {name}: null_count {st.null_count}, {col.null_count} nulls"
                mm = pc.min_max(col).as_py()
                if mm["min"] is None:
                    if st.has_min_max:
                        return f"{f} rg {g} {name}: min/max for a column of nulls"
                    continue
                if not st.has_min_max or st.min != mm["min"] or st.max != mm["max"]:
                    return (f"{f} rg {g} {name}: min/max {st.min if st.has_min_max else None!r}/"
                            f"{st.max if st.has_min_max else None!r}, data {mm}")
    return None


def duck_rows(d):
    q = f"SELECT * FROM read_parquet('{d}/part-*.parquet') ORDER BY id"
    return duckdb.sql(q).fetchall()


def typed_round_trip(codec, rg_size):
    src, out, back = (os.path.join(work, x) for x in ("src", f"out-{codec}", f"back-{codec}"))
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    t = table()
    pq.write_table(t, os.path.join(src, "a.parquet"), row_group_size=1700)
    args = {"compression": codec, "rowGroupSize": rg_size}
    p = run(spec(src, "parquet", out, args, psize="256Ki"), out)
    name = f"typed {codec} rowGroupSize {rg_size}"
    if p.returncode != 0:
        check(name, False, p.stderr[-1500:])
        return
    got = read_ours(out)
    ngroups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in parts(out))
    exp = t.to_pylist()
    check(f"{name}: pyarrow reads {len(parts(out))} parts, {ngroups} row groups, equal",
          got.to_pylist() == exp and (ngroups > len(parts(out))) == (rg_size < 1 << 20),
          f"{got.num_rows} rows, {ngroups} row groups")
    check(f"{name}: schema", got.schema.field("s").type == pa.string() and
          got.schema.field("u64").type == pa.uint64() and
          pa.types.is_list(got.schema.field("vec").type), str(got.schema))
    st = stats_ok(out)
    check(f"{name}: statistics", st is None, st)
    md = pq.ParquetFile(parts(out)[0]).metadata.row_group(0)
    enc = {md.column(k).path_in_schema: (md.column(k).encodings, md.column(k).has_dictionary_page)
           for k in range(md.num_columns)}
    check(f"{name}: strings dictionary-encoded, numbers PLAIN",
          "RLE_DICTIONARY" in enc["s"][0] and enc["s"][1] and not enc["id"][1] and
          "PLAIN" in enc["id"][0], str(enc))
    drows = duck_rows(out)
    erows = [tuple(r.values()) for r in exp]
    check(f"{name}: duckdb read_parquet equal", drows == erows,
          next((f"row {i}: {a} != {b}" for i, (a, b) in enumerate(zip(drows, erows)) if a != b),
               f"{len(drows)} rows"))
    p = run(spec(out, "parquet", back, {"compression": codec}), back)  # our reader, our files
    ok = p.returncode == 0 and read_ours(back).to_pylist() == exp
    check(f"{name}: our reader reads our files", ok, p.stderr[-1500:])


def records():
    src, out = os.path.join(work, "js"), os.path.join(work, "out-js")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    recs = []
    for i in range(2000):
        r = {"id": i, "name": f"n{i}é" if i % 5 else None, "x": i * 0.5 - 3, "ok": i % 2 == 0,
             "big": (-1) ** i * (2**53 - i), "skip": [i]}
        if i % 7 == 0:
            del r["x"]  # absent: null
        recs.append(r)
    with open(os.path.join(src, "a.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(r) for r in recs) + "\n")
    schema = [{"name": "id", "type": "int64", "nullable": False}, {"name": "name", "type": "string"},
              {"name": "x", "type": "double"}, {"name": "ok", "type": "bool"},
              {"name": "big", "type": "int64"}]
    p = run(spec(src, "jsonl", out, {"schema": schema, "rowGroupSize": 20000}, "32Ki"), out)
    if p.returncode != 0:
        check("records with a schema", False, p.stderr[-1500:])
        return
    exp = [{k: r.get(k) for k in ("id", "name", "x", "ok", "big")} for r in recs]
    got = read_ours(out)
    check(f"records with a schema: pyarrow equal ({len(parts(out))} parts)",
          got.to_pylist() == exp and len(parts(out)) > 1, str(got.to_pylist()[:3]))
    check("records: id required, the rest optional",
          not got.schema.field("id").nullable and got.schema.field("x").nullable, str(got.schema))
    st = stats_ok(out)
    check("records: statistics", st is None, st)
    check("records: duckdb equal", duck_rows(out) == [tuple(r.values()) for r in exp])
    with open(os.path.join(src, "a.jsonl"), "a") as f:
        f.write('{"id": 5, "ok": "yes"}\n')
    p = run(spec(src, "jsonl", out, {"schema": schema}), out)
    check("records: a value that does not fit is a data error naming the record and field",
          p.returncode != 0 and "record 2000" in p.stderr and 'field \\"ok\\"' in p.stderr,
          p.stderr[-800:])


def inferred():
    """jsonl records without sink.args.schema: the schema is inferred from the run's first sink
    partition and every part has it (several tasks on two workers); pyarrow and DuckDB read the
    inferred columns, types and nulls; a later record that does not fit is a data error naming
    the partition, the record and the field."""
    src, out = os.path.join(work, "jsi"), os.path.join(work, "out-jsi")
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    recs = []
    for i in range(3000):
        r = {"id": i, "x": i * 0.25 if i % 4 else i, "name": f"n{i}é" if i % 5 else None,
             "ok": i % 3 == 0, "tags": {"k": [i, "}"]} if i % 2 else [i], "big": 2**60 + i,
             "mixed": i if i % 2 else f"s{i}", "none": None}
        if i < 20:  # only in the first partition: a part that inferred its own would lack it
            r["early"] = i
        if i % 7 == 0:
            del r["x"]  # absent: null
        recs.append(r)
    for k in range(3):  # three files: three splits, tasks on both workers
        with open(os.path.join(src, f"{k}.jsonl"), "w") as f:
            f.write("\n".join(json.dumps(r) for r in recs[k * 1000:(k + 1) * 1000]) + "\n")
    p = run(spec(src, "jsonl", out, {}, "16Ki"), out)
    if p.returncode != 0:
        check("records, schema inferred", False, p.stderr[-1500:])
        return
    schemas = {str(pq.read_schema(f)) for f in parts(out)}
    check(f"inferred: every part ({len(parts(out))}) has the same schema",
          len(schemas) == 1 and len(parts(out)) > 3, str(schemas)[:800])
    got = read_ours(out)
    # in order of first appearance: record 0 has no "x"
    want = pa.schema([("id", pa.int64()), ("name", pa.string()), ("ok", pa.bool_()),
                      ("tags", pa.string()), ("big", pa.string()), ("mixed", pa.string()),
                      ("none", pa.string()), ("early", pa.int64()), ("x", pa.float64())])
    check("inferred: columns, their order and types (int64, double, string, bool, json text)",
          got.schema.remove_metadata() == want, str(got.schema))

    def as_json(v):
        return None if v is None else json.dumps(v)
    exp = [{"id": r["id"], "name": r["name"], "ok": r["ok"], "tags": as_json(r["tags"]),
            "big": str(r["big"]), "mixed": as_json(r["mixed"]), "none": None,
            "early": r.get("early"), "x": None if r.get("x") is None else float(r["x"])}
           for r in recs]
    check("inferred: pyarrow equal (nulls, absent fields, json texts kept)", got.to_pylist() == exp,
          next((f"row {i}: {a} != {b}" for i, (a, b) in enumerate(zip(got.to_pylist(), exp))
                if a != b), "lengths differ"))
    check("inferred: duckdb equal", duck_rows(out) == [tuple(r.values()) for r in exp])
    with open(os.path.join(src, "2.jsonl"), "a") as f:
        f.write('{"id": "seven", "x": 1.5}\n')
    p = run(spec(src, "jsonl", out, {}, "16Ki"), out)
    check("inferred: a later record of another type is a data error naming partition, record, "
          "field", p.returncode != 0 and "(partition s0-t" in p.stderr and "record " in p.stderr
          and 'field \\"id\\"' in p.stderr, p.stderr[-800:])
    with open(os.path.join(src, "2.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(r) for r in recs[2000:2500] + [dict(recs[2500], late=1)]) + "\n")
    p = run(spec(src, "jsonl", out, {}, "16Ki"), out)
    check("inferred: a later record with a field the schema lacks is a data error naming it",
          p.returncode != 0 and 'field \\"late\\" is not in the schema inferred' in p.stderr,
          p.stderr[-800:])
    p = run(spec(src, "jsonl", out, {"inferSchema": False}), out)
    ok = p.returncode == 0 and read_ours(out).schema.names == ["record"]
    check("inferSchema: false writes the records as one record column", ok, p.stderr[-800:])


def refused():
    src, out = os.path.join(work, "js"), os.path.join(work, "out-bad")
    cases = [({"compression": "lz4"}, "spec.sink.args.compression"),
             ({"rowGroupSize": 0}, "spec.sink.args.rowGroupSize"),
             ({"schema": [{"name": "a", "type": "int32"}]}, "spec.sink.args.schema[0].type"),
             ({"schema": [{"name": "a", "type": "int64"}, {"name": "a", "type": "bool"}]},
              "named twice"),
             ({"schema": []}, "spec.sink.args.schema"),
             ({"shema": []}, "did you mean"),
             ({"inferSchema": "yes"}, "spec.sink.args.inferSchema"),
             ({"inferSchema": True, "schema": [{"name": "a", "type": "int64"}]},
              "either schema or inferSchema")]
    for args, want in cases:
        path = os.path.join(work, "bad.yaml")
        with open(path, "w") as f:
            f.write(spec(src, "jsonl", out, args))
        p = subprocess.run([sb, "validate", path], capture_output=True, text=True, timeout=60)
        check(f"validate refuses {json.dumps(args)}", p.returncode != 0 and want in p.stdout + p.stderr,
              (p.stdout + p.stderr)[-600:])


def s3_example():
    """api/examples/parquet-to-parquet.yaml against MinIO (where `make deps` built it): Parquet
    from a bucket, Parquet into a bucket, read back by pyarrow over S3."""
    import socket, tempfile, time, urllib.request
    from pyarrow import fs
    bins = [os.environ.get("SB_MINIO_BIN", "")] + \
        sorted(glob.glob(os.path.expanduser("~/.cache/streambatch/minio-*/minio")))
    mbin = next((b for b in bins if b and os.access(b, os.X_OK)), None)
    if mbin is None:
        print("ok: s3 example: SKIPPED (no MinIO binary; `make deps` builds it)")
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
        s3.create_dir("datasets")
        n = 3000
        t = pa.table({"id": pa.array(range(n), pa.int64()),
                      "lang": [["en", "fr", None][i % 3] for i in range(n)],
                      "stars": pa.array([i % 5 for i in range(n)], pa.int8()),
                      "text": [f"review {i} é" for i in range(n)],
                      "embedding": [[i * 0.5, -1.0, 2.0] for i in range(n)],
                      "junk": [b"x"] * n})
        for k in range(3):
            pq.write_table(t.slice(k * 1000, 1000), f"datasets/reviews-parquet/2026-11/{k}.parquet",
                           filesystem=s3, compression="SNAPPY", row_group_size=300)
        os.environ.update(AWS_ACCESS_KEY_ID="sbtestadmin", AWS_SECRET_ACCESS_KEY="sbtestsecret123",
                          AWS_ENDPOINT_URL_S3=url, AWS_REGION="us-east-1")
        top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(top, "api/examples/parquet-to-parquet.yaml")) as f:
            text = "\n".join(l for l in f.read().splitlines() if "credentialsSecret" not in l)
        path = os.path.join(work, "example.yaml")
        with open(path, "w") as f:
            f.write(text.replace("partitionSize: 32Mi", "partitionSize: 32Ki"))
        p = subprocess.run([sb, "run", path, "--checkpoint", os.path.join(work, "ck-example")],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0:
            check("s3 example", False, p.stdout[-1500:] + p.stderr[-1500:])
            return
        out = "datasets/reviews-parquet-slim/2026-11"
        names = sorted(i.path for i in s3.get_file_info(fs.FileSelector(out))
                       if i.path.endswith(".parquet"))
        got = pa.concat_tables([pq.read_table(nm, filesystem=s3) for nm in names]).sort_by("id")
        got.validate(full=True)
        exp = t.select(["id", "stars", "text", "embedding"]).to_pylist()
        check(f"s3 example: {len(names)} parts in the bucket, pyarrow reads them equal",
              got.to_pylist() == exp and len(names) > 1, str(got.to_pylist()[:2]))
    finally:
        srv.kill()
        srv.wait()


def modes():
    """sink.mode with parquet parts: append adds parts, overwrite leaves its own, errorIfExists
    refuses a sink that holds any."""
    src, out = os.path.join(work, "jsm"), os.path.join(work, "out-modes")
    shutil.rmtree(src, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(src)
    with open(os.path.join(src, "a.jsonl"), "w") as f:
        f.write('{"id": 1}\n{"id": 2}\n')
    got = []
    for mode in ("append", "append", "overwrite", "errorIfExists"):
        text = spec(src, "jsonl", out, {"schema": [{"name": "id", "type": "int64"}]})
        text = text.replace("format: parquet,", f"format: parquet, mode: {mode},")
        path = os.path.join(work, f"m{RUNS[0]}.yaml")
        with open(path, "w") as f:
            f.write(text)
        p = subprocess.run([sb, "run", path, "--checkpoint", os.path.join(work, f"ckm{RUNS[0]}")],
                           capture_output=True, text=True, timeout=120)
        n = len(parts(out))
        rows = sum(pq.read_table(f).num_rows for f in parts(out))
        got.append((mode, p.returncode == 0, n, rows))
    check("modes: append, append, overwrite, errorIfExists",
          got == [("append", True, 1, 2), ("append", True, 2, 4), ("overwrite", True, 1, 2),
                  ("errorIfExists", False, 1, 2)], str(got))


for codec, rg in (("zstd", 40000), ("snappy", 1 << 26), ("gzip", 100000), ("none", 30000)):
    typed_round_trip(codec, rg)
records()
inferred()
refused()
modes()
s3_example()
finish()

"""report.py RESULTS NROWS FILE_BYTES CUT BEFORE AFTER VERSIONS: the Markdown section of
scripts/bench-parquet.sh from its results (one JSON line per run: measure.py's figures, the output
digest's match with streambatch's, and for streambatch the bytes its summary says it fetched)."""
import json
import statistics
import sys

res_path, nrows, fbytes, cut, before, after, versions = sys.argv[1:8]
nrows, fbytes = int(nrows), int(fbytes)
runs = [json.loads(l) for l in open(res_path) if l.strip()]
names = {"sb": "streambatch", "pyarrow": "pyarrow.dataset", "duckdb": "DuckDB", "daft": "Daft",
         "ray": "Ray Data"}


def med(q, s, key):
    v = [r["m"][key] for r in runs if r["q"] == q and r["system"] == s and r["ok"] and r["m"]]
    return statistics.median(v) if v else None


def table(q, title):
    print(f"\n{title}\n")
    print("| system | wall s | cpu s | peak memory (Pss) | rows out | output equal | streambatch's speed-up |")
    print("|---|---|---|---|---|---|---|")
    sb = med(q, "sb", "wall")
    for s in names:
        rs = [r for r in runs if r["q"] == q and r["system"] == s]
        if not rs:
            continue
        ok = all(r["ok"] for r in rs)
        w, c, p = med(q, s, "wall"), med(q, s, "cpu"), med(q, s, "peak_pss")
        if not ok or w is None:
            print(f"| {names[s]} | failed | | | | | |")
            continue
        match = "yes" if all(r["match"] for r in rs) else "**no**"
        up = f"{w / sb:.2f}x" if s != "sb" and sb else ""
        print(f"| {names[s]} | {w:.2f} | {c:.2f} | {p / 2**20:.0f} MiB | {rs[0]['rows']} | {match} | {up} |")


print("## Parquet: filter, project, write (scripts/bench-parquet.sh)\n")
print(f"Input: one Parquet file of {fbytes / 2**20:.0f} MiB written by pyarrow (zstd, row groups of "
      f"32768 rows, {nrows} rows; 8 columns: id, k, a (int), x, y (double), s, t (string), vec "
      f"(64 float32); tests/bench/parquet/gen.py). Pipeline: `k < 20` (a fifth of the rows) -> "
      f"columns id, x, s, vec -> Parquet (zstd). Each system with 2 CPUs, the page cache warm; "
      f"outputs compared by row count and a digest of their values sorted by id "
      f"(tests/bench/parquet/digest.py). Speed-up: the peer's wall time over streambatch's. "
      f"{versions}. Before: {before}; after: {after} (the machine is shared with other jobs: "
      f"figures move with its load).")
table("main", "Filter `k < 20`, project, write:")
sel = [r for r in runs if r["q"] == "sel" and r["system"] == "sb" and r["ok"]]
table("sel", f"Selective filter `id >= {cut}` (the last 1% of ids: about 1% of the row groups):")
if sel:
    rd = statistics.median(r["read"] for r in sel)
    print(f"\nstreambatch fetched {rd / 2**20:.1f} MiB of the {fbytes / 2**20:.0f} MiB file "
          f"({100 * rd / fbytes:.2f}%; the goal: at most 5%): the footer and the chunks of the "
          f"row groups whose statistics allow `id >= {cut}`; the others were skipped.")

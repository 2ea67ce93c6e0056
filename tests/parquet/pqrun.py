"""One `streambatch run` of a parquet-to-parquet pipeline for the parquet test scripts
(pushdown.py, pageindex.py): writes the spec (source, the given stage lines, sink), runs it with
--summary-json, and returns the process, the output's rows as pyarrow reads them (file by file,
in name order) and the summary (empty when the run failed). The workers' logs are kept in
WORK/run-TAG (logs_of reads them)."""
import json, os, shutil, subprocess
import pyarrow.parquet as pq


def run_pipeline(sb, work, tag, src, out, stages, psize="1Gi"):
    spec, summ = os.path.join(work, f"{tag}.yaml"), os.path.join(work, f"sum-{tag}.json")
    with open(spec, "w") as f:
        f.write(f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {{name: {tag}}}
spec:
  source: {{uri: "file://{src}/", format: parquet, partitionSize: {psize}}}
  stages:
{stages}
  sink: {{uri: "file://{out}/", format: parquet}}
""")
    shutil.rmtree(out, ignore_errors=True)
    rd = os.path.join(work, f"run-{tag}")
    shutil.rmtree(rd, ignore_errors=True)
    p = subprocess.run([sb, "run", spec, "--checkpoint", os.path.join(work, f"ck-{tag}"),
                        "--summary-json", summ, "--run-dir", rd], capture_output=True, text=True,
                       timeout=300)
    rows, s = [], {}
    if p.returncode == 0:
        for fn in sorted(os.listdir(out)):
            if fn.endswith(".parquet"):
                rows += pq.read_table(os.path.join(out, fn)).to_pylist()
        with open(summ) as f:
            s = json.load(f)
    return p, rows, s


def logs_of(work, tag):
    """The workers' logs of run TAG, concatenated."""
    rd, text = os.path.join(work, f"run-{tag}"), ""
    for fn in sorted(os.listdir(rd)) if os.path.isdir(rd) else []:
        if fn.endswith(".log"):
            with open(os.path.join(rd, fn), errors="replace") as f:
                text += f.read()
    return text

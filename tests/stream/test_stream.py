"""The stream:// sink end to end (run by tests/stream/test-stream.sh): `streambatch run --serve`
and trainer ranks reading it with streambatch.iter_batches, in separate processes.

usage: test_stream.py STREAMBATCH_BIN WORKDIR
Prints "ok/FAIL <check>" per check and "stream-test: N passed, N failed" last."""
import json
import os
import subprocess
import sys
import time

BIN, WORK = sys.argv[1], sys.argv[2]
HERE = os.path.dirname(os.path.abspath(__file__))
NREC = 10000
passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok   {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()


def make_source():
    src = os.path.join(WORK, "in")
    os.makedirs(src, exist_ok=True)
    lines = []
    for f in range(10):  # 10 files: splits whose order a seed shuffles
        with open(os.path.join(src, f"part-{f:02d}.jsonl"), "w") as out:
            for i in range(f * 1000, (f + 1) * 1000):
                line = json.dumps({"id": i, "text": f"record {i} " + "x" * (i % 37)})
                lines.append(line)
                out.write(line + "\n")
    return src, lines


def spec(src, name, budget="1Mi", part="16Ki", sink_args="", op="identity"):
    path = os.path.join(WORK, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata:
  name: {name}
spec:
  source:
    uri: file://{src}/*.jsonl
    format: jsonl
    partitionSize: {part}
  stages:
    - name: keep
      op: {op}
  sink:
    uri: stream://
    format: jsonl
{sink_args}  execution:
    memoryBudget: {budget}
""")
    return path


def serve(path, epochs, seed=None, cpus=2, extra=()):
    name = os.path.basename(path)[:-5]
    summary = os.path.join(WORK, f"{name}.summary.json")
    cmd = [BIN, "run", path, "--cpus", str(cpus), "--serve", "127.0.0.1:0", "--summary-json",
           summary, "--progress-interval-ms", "1000"]
    if epochs is not None:  # None: the spec's sink.args.epochs (default 1)
        cmd += ["--epochs", str(epochs)]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    cmd += list(extra)
    err = open(os.path.join(WORK, f"{name}.stderr"), "w")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    info = json.loads(p.stdout.readline())
    return p, info, summary


def ranks(info, world, epochs, bsz, drop_last=True, shuffle=0, seed=None, fmt="numpy",
          pause=None, tag="r", balance=None, per_row=None):
    procs, outs = [], []
    for r in range(world):
        out = os.path.join(WORK, f"{tag}-{r}.json")
        args = [sys.executable, os.path.join(HERE, "consume.py"), info["address"],
                info["tokenFile"], str(r), str(world), str(epochs), str(bsz),
                "1" if drop_last else "0", str(shuffle), "-" if seed is None else str(seed), fmt,
                out]
        if pause is not None and r == 0:
            args += [str(pause[0]), str(pause[1])]
        elif balance is not None or per_row is not None:
            args += ["-1", "0"]
        if balance is not None or per_row is not None:
            args += [balance or "-", str(per_row[r] if per_row else 0)]
        procs.append(subprocess.Popen(args))
        outs.append(out)
    codes = [p.wait(timeout=300) for p in procs]
    res = [json.load(open(o)) if c == 0 else None for o, c in zip(outs, codes)]
    return codes, res


def finish(p, name):
    try:
        code = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        code = "timeout"
    check(f"{name}: the server exits 0 once every rank ended every epoch", code == 0, code)


def splits_test(src, world, drop_last):
    name = f"split{world}{'d' if drop_last else ''}"
    p, info, _ = serve(spec(src, name), epochs=2, seed=11)
    codes, res = ranks(info, world, 2, 256, drop_last=drop_last, shuffle=300, seed=5, tag=name)
    ok = all(c == 0 for c in codes)
    check(f"{world} ranks, drop_last={drop_last}: every rank read 2 epochs", ok, codes)
    finish(p, name)
    if not ok:
        return
    for e in range(2):
        ids = [i for r in res for i in r["epochs"][e]["ids"]]
        counts = [len(r["epochs"][e]["sizes"]) for r in res]
        sizes = [s for r in res for s in r["epochs"][e]["sizes"]]
        if drop_last:
            check(f"{world} ranks epoch {e}: no record twice, fewer than 2 batches per rank "
                  f"dropped", len(set(ids)) == len(ids) and NREC - len(ids) < 2 * 256 * world,
                  f"{len(ids)} rows, {len(set(ids))} distinct")
            check(f"{world} ranks epoch {e}: drop_last gives every rank the same number of "
                  f"whole batches", len(set(counts)) == 1 and set(sizes) == {256}, counts)
        else:
            check(f"{world} ranks epoch {e}: every record exactly once across the ranks",
                  sorted(ids) == list(range(NREC)), f"{len(ids)} rows, {len(set(ids))} distinct")
            check(f"{world} ranks epoch {e}: batch counts differ by at most one",
                  max(counts) - min(counts) <= 1 and all(s == 256 for r in res
                                                         for s in r["epochs"][e]["sizes"][:-1]),
                  counts)
    for r in res:
        a, b = r["epochs"][0]["ids"], r["epochs"][1]["ids"]
        check(f"{world} ranks, rank {r['rank']}: epoch 1's order differs from epoch 0's",
              a != b, "same order")


def order_test(src):
    """One rank, one worker: the deal is the plan's split order, so the order is a function of
    (seed, epoch, rank) alone: the same seed gives the same order, epochs and seeds differ."""
    got = []
    for k, seed in enumerate((7, 7, 8)):
        name = f"order{k}"
        p, info, _ = serve(spec(src, name), epochs=2, seed=seed, cpus=1)
        codes, res = ranks(info, 1, 2, 128, drop_last=False, shuffle=500, seed=seed, tag=name)
        finish(p, name)
        if codes[0] != 0:
            check(f"order run {k} read", False, codes)
            return
        got.append([e["ids"] for e in res[0]["epochs"]])
    check("the same seed gives the same order in each epoch", got[0] == got[1])
    check("epochs 0 and 1 differ with a seed", got[0][0] != got[0][1])
    check("another seed gives another order", got[0][0] != got[2][0])
    check("every epoch still has every record once",
          all(sorted(e) == list(range(NREC)) for g in got for e in g))


def formats_test(src, lines):
    for fmt in ("numpy", "pyarrow", "rows"):
        try:
            __import__({"numpy": "numpy", "pyarrow": "pyarrow", "rows": "json"}[fmt])
        except ImportError:
            print(f"skip {fmt}: the module is not importable here")
            continue
        name = f"fmt-{fmt}"
        p, info, _ = serve(spec(src, name), epochs=1)
        codes, res = ranks(info, 1, 1, 1000, drop_last=False, fmt=fmt, tag=name)
        finish(p, name)
        ok = codes[0] == 0
        ids = res[0]["epochs"][0]["ids"] if ok else []
        check(f"format {fmt}: every record, its id as in the source",
              ok and sorted(ids) == list(range(NREC)), codes)
        if fmt == "numpy" and ok:
            texts = res[0]["epochs"][0]["texts"]
            check("format numpy: the record column holds the source lines' bytes",
                  sorted(texts) == sorted(lines))


def slow_consumer_test(src):
    """A consumer that stops reading: the pipeline pauses with the budget full (the stream's
    partitions held for it), memory stays within budget + one partition, and all of it comes
    once the consumer reads again."""
    name = "slow"
    budget, part = 96 * 1024, 16 * 1024
    p, info, summary = serve(spec(src, name, budget="96Ki", part="16Ki"), epochs=1)
    t0 = time.time()
    codes, res = ranks(info, 1, 1, 64, drop_last=False, pause=(1, 3.0), tag=name)
    finish(p, name)
    took = time.time() - t0
    ok = codes[0] == 0
    check("slow consumer: every record once after it resumed",
          ok and sorted(res[0]["epochs"][0]["ids"]) == list(range(NREC)), codes)
    s = json.load(open(summary))
    text = json.dumps(s)
    peak = s.get("peakPartitionBytes")
    total = sum(len(l) for l in open(os.path.join(src, "part-00.jsonl"))) * 10
    check("slow consumer: partitions in flight peaked within budget + one partition, a "
          "fraction of the output", peak is not None and peak <= budget + part and peak < total / 3,
          f"peak {peak}, budget {budget}, output ~{total}: {text[:300]}")
    check("slow consumer: the run waited for it (took past its 3 s pause)", took >= 3.0, took)


def share_test(src):
    """Per-rank shares of the budget: 2 ranks of 4000 records (4 of the 10 files); rank 1 stops
    reading after its first batch for 6 s. Rank 0 is not held one batch past it: rank 1's rows
    are dealt ahead into its share of the budget (1Mi / 2, which holds the epoch's ~260 KB), so
    rank 0 reads its whole share of the epoch and ends while rank 1 is still paused; the
    partitions in flight stay within budget + one partition; then rank 1 reads its rows and the
    epoch is whole: no record twice, the same number of whole batches on both ranks (drop_last),
    fewer than two batches per rank dropped (drop_last's promise)."""
    sub = os.path.join(WORK, "in4")
    os.makedirs(sub, exist_ok=True)
    for f in range(4):
        name = f"part-{f:02d}.jsonl"
        if not os.path.exists(os.path.join(sub, name)):
            os.symlink(os.path.join(src, name), os.path.join(sub, name))
    import re
    import urllib.request
    name, budget, part = "share", 1024 * 1024, 16 * 1024
    port = free_port()
    p, info, summary = serve(spec(sub, name, budget="1Mi", part="16Ki"), epochs=1,
                             extra=["--metrics-addr", f"127.0.0.1:{port}"])
    base = [sys.executable, os.path.join(HERE, "consume.py"), info["address"], info["tokenFile"]]
    common = ["2", "1", "64", "1", "0", "-", "numpy"]
    outs = [os.path.join(WORK, f"{name}-{r}.json") for r in range(2)]
    procs = [subprocess.Popen(base + ["0"] + common + [outs[0]]),
             subprocess.Popen(base + ["1"] + common + [outs[1], "1", "6.0"])]
    codes = [procs[0].wait(timeout=120)]
    held = None
    try:  # rank 0 is done; rank 1 (paused) still holds its rows
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            m = re.search(r'streambatch_stream_rank_held_bytes\{[^}]*rank="1"[^}]*\} (\S+)',
                          r.read().decode())
            held = float(m.group(1)) if m else None
    except OSError as e:
        held = str(e)
    codes.append(procs[1].wait(timeout=120))
    finish(p, name)
    ok = codes == [0, 0]
    check("shares: both ranks read the epoch", ok, codes)
    check("shares: the metrics show rank 1 holding its rows dealt ahead, within its share",
          isinstance(held, float) and 0 < held <= budget / 2, held)
    if not ok:
        return
    r0, r1 = (json.load(open(o)) for o in outs)
    check("shares: rank 0 read its whole share and ended while rank 1 was still paused",
          r0["ended_at"] < r1["paused"][1],
          f"rank 0 ended {r0['ended_at'] - r1['paused'][0]:.2f} s after rank 1 paused (6 s)")
    s = json.load(open(summary))
    peak = s.get("peakPartitionBytes")
    check("shares: partitions in flight peaked within budget + one partition",
          peak is not None and peak <= budget + part, f"peak {peak}, budget {budget}")
    e0, e1 = r0["epochs"][0], r1["epochs"][0]
    ids = e0["ids"] + e1["ids"]
    # drop_last's promise (docs/training.md): fewer than two batches' rows per rank dropped.
    # Ranks are dealt within a batch of each other, so the common count, floor(min rows /
    # batch), can leave more than a batch per rank: 30 batches each (3,840 rows) was seen once
    check("shares: after rank 1 resumed the epoch is whole: no record twice, the same whole "
          "batches on both ranks, fewer than two batches per rank dropped",
          len(set(ids)) == len(ids) and set(ids) <= set(range(4000)) and
          4000 - len(ids) < 2 * 2 * 64
          and len(e0["sizes"]) == len(e1["sizes"]) and set(e0["sizes"] + e1["sizes"]) == {64},
          f"{len(ids)} rows, {len(set(ids))} distinct, batches {len(e0['sizes'])} and "
          f"{len(e1['sizes'])}")


def prefetch_run(src, name, prefetch):
    """One rank in this process reading an epoch in batches of 500 with a 0.15 s step: per step
    the rows dealt to it and the partitions fetched during it (a partition dealt in several
    slices is fetched once), the rows in hand at its end (dealt, not yet yielded), the time
    blocked in next(), and the ids."""
    import streambatch
    p, info, _ = serve(spec(src, name), epochs=1)
    it = streambatch.iter_batches(info["address"], batch_size=500, batch_format="numpy",
                                  drop_last=False, token_file=info["tokenFile"], timeout_s=120,
                                  prefetch=prefetch)
    ids, during, waits = [], [], []
    while True:
        t = time.time()
        batch = next(it, None)
        waits.append(time.time() - t)
        if batch is None:
            break
        ids += [json.loads(r)["id"] for r in batch["record"]]
        before = it.stats()
        time.sleep(0.15)  # the step
        after = it.stats()
        during.append((after["dealt"] - before["dealt"], after["fetches"] - before["fetches"],
                       after["dealt"] - after["rows"]))
    finish(p, name)
    return ids, during, waits


def prefetch_test(src):
    """The next batch's partitions are fetched while the trainer works on a batch (not inside
    next()), and without prefetch they are not: the control shows the measure tells them apart.
    The prefetched rows are not acknowledged early: restart_test covers that, prefetch on."""
    ids, during, waits = prefetch_run(src, "prefetch", True)
    steps = during[:-1]  # the last batch has nothing after it to fetch
    rest = [NREC - 500 * (k + 1) for k in range(len(steps))]
    check("prefetch: every record once; at the end of each step the next batch's rows were in "
          "hand (dealt and fetched while the trainer slept)",
          sorted(ids) == list(range(NREC)) and sum(f for _, f, _ in steps) > 0
          and all(h >= min(500, r) for (_, _, h), r in zip(steps, rest)),
          f"dealt, fetched, in hand per step {during}, waits {[round(w, 4) for w in waits]}")
    ids0, during0, waits0 = prefetch_run(src, "noprefetch", False)
    check("prefetch=False: every record once, nothing dealt or fetched during a step (all "
          "inside next())", sorted(ids0) == list(range(NREC)) and not any(d or f for d, f, _ in during0),
          f"dealt, fetched per step {during0}")
    med = (lambda v: sorted(v)[len(v) // 2])
    print(f"     median time blocked in next(): {med(waits[1:]) * 1e3:.2f} ms with prefetch, "
          f"{med(waits0[1:]) * 1e3:.2f} ms without (after the first batch)")


def grouped_fetch_test(src):
    """Partitions of a few KiB dealt in one reply come from each worker in one Data.Fetch stream
    (sb_data_fetch_many), not one stream each: with 1 KiB partitions a batch of 500 rows is
    ~30 partitions from 2 workers. Every record still comes once."""
    import streambatch
    p, info, _ = serve(spec(src, "grouped", part="1Ki"), epochs=1)
    it = streambatch.iter_batches(info["address"], batch_size=500, batch_format="numpy",
                                  drop_last=False, token_file=info["tokenFile"], timeout_s=120)
    ids, st = [], {}
    for batch in it:
        ids += [json.loads(r)["id"] for r in batch["record"]]
        st = it.stats()  # (the last batch's: the stream is closed once the epoch ends)
    finish(p, "grouped")
    print(f"     {st.get('fetches')} partitions fetched in {st.get('streams')} streams")
    check("grouped fetch: every record once, and the partitions came in at most a quarter as "
          "many streams (a worker's dealt together share one)",
          sorted(ids) == list(range(NREC)) and st["fetches"] >= 100
          and 0 < st["streams"] * 4 <= st["fetches"],
          f"{len(ids)} rows, {len(set(ids))} distinct; stats {st}")


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def lbbsp_test(src):
    """LB-BSP: two ranks, rank 1's step twice as slow per row (a sleep per row of its batch).
    The batch sizes move toward 2:1, every iteration's sizes sum to the global batch (2 x 100),
    both ranks yield the same number of batches (drop_last), no record comes twice, and the
    controller's metrics show each rank's batch and step time while it runs."""
    import re
    import threading
    import urllib.request
    name = "lbbsp"
    port = free_port()
    p, info, _ = serve(spec(src, name, budget="1Mi", part="16Ki"), epochs=1,
                       extra=["--metrics-addr", f"127.0.0.1:{port}"])
    scraped, done = [], threading.Event()

    def scrape():
        while not done.is_set():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
                if "streambatch_stream_rank_step_seconds" in text:
                    scraped.append(text)
            except OSError:
                pass
            done.wait(0.2)

    t = threading.Thread(target=scrape)
    t.start()
    codes, res = ranks(info, 2, 1, 100, drop_last=True, tag=name, balance="lbbsp",
                       per_row=[0.0002, 0.0004])
    done.set()
    t.join()
    finish(p, name)
    ok = all(c == 0 for c in codes)
    check("lbbsp: both ranks read the epoch", ok, codes)
    if not ok:
        return
    s0, s1 = res[0]["epochs"][0]["sizes"], res[1]["epochs"][0]["sizes"]
    ids = res[0]["epochs"][0]["ids"] + res[1]["epochs"][0]["ids"]
    check("lbbsp: the same number of batches on both ranks (drop_last)", len(s0) == len(s1),
          f"{len(s0)} vs {len(s1)}")
    check("lbbsp: every iteration's sizes sum to the global batch (200)",
          all(a + b == 200 for a, b in zip(s0, s1)), list(zip(s0, s1)))
    check("lbbsp: no record twice, fewer than 2 iterations dropped",
          len(set(ids)) == len(ids) and NREC - len(ids) < 2 * 200, f"{len(ids)} rows")
    late = sorted(s0[len(s0) // 2:])
    med = late[len(late) // 2] if late else 0
    check("lbbsp: equal at first, then the fast rank's batch moves toward 2/3 of 200 (133)",
          s0[0] == 100 and 115 <= med <= 150, f"sizes rank 0: {s0}")
    last = scraped[-1] if scraped else ""
    got = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'streambatch_stream_rank_batch_rows\{[^}]*rank="(\d)"[^}]*\} (\S+)', last)}
    step = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'streambatch_stream_rank_step_seconds\{[^}]*rank="(\d)"[^}]*\} (\S+)', last)}
    check("lbbsp: metrics show each rank's batch (summing to 200) and a step time",
          set(got) == {"0", "1"} and got["0"] + got["1"] == 200 and step.get("1", 0) > 0,
          f"{got} {step} {last[-400:]}")


def restart_test(src):
    """A rank killed mid-epoch and restarted (same rank, same epoch): rank 0 SIGKILLs itself
    while working on its 10th batch (a shuffle window of 200 rows, so what it consumed is not a
    prefix of what it was dealt); a new rank-0 process reads the rest. Its first rows include
    that unacknowledged batch; nothing rank 0 had acknowledged comes again; rank 1 gets none of
    it; and across the ranks every record comes exactly once."""
    name = "restart"
    p, info, _ = serve(spec(src, name, budget="256Ki", part="16Ki"), epochs=1)
    base = [sys.executable, os.path.join(HERE, "consume.py"), info["address"], info["tokenFile"]]
    common = ["2", "1", "64", "0", "200", "3", "numpy"]
    out = {k: os.path.join(WORK, f"{name}-{k}.json") for k in ("dead", "again", "one")}
    dead = subprocess.Popen(base + ["0"] + common + [out["dead"], "-1", "0", "-", "0", "10"])
    one = subprocess.Popen(base + ["1"] + common + [out["one"]])
    again = None
    try:
        code_dead = dead.wait(timeout=120)
        again = subprocess.Popen(base + ["0"] + common + [out["again"]])
        codes = [again.wait(timeout=120), one.wait(timeout=120)]
    except subprocess.TimeoutExpired as e:
        # a hang is a failed check with what the server said, not an exception that skips
        # the cases after this one
        for q in (dead, one, again, p):
            if q is not None and q.poll() is None:
                q.kill()
        with open(os.path.join(WORK, f"{name}.stderr")) as f:
            tail = f.read()[-1500:]
        check("restart: rank 0 died by SIGKILL mid-epoch, its restart and rank 1 read the rest",
              False, f"{' '.join(map(str, e.cmd[-3:]))} timed out; the server's last words:\n{tail}")
        return
    finish(p, name)
    check("restart: rank 0 died by SIGKILL mid-epoch, its restart and rank 1 read the rest",
          code_dead == -9 and codes == [0, 0], f"{code_dead} {codes}")
    if codes != [0, 0] or code_dead != -9:
        return
    got = {k: json.load(open(v))["epochs"][0] for k, v in out.items()}
    d, a, o = got["dead"], got["again"], got["one"]
    acked = d["ids"][:-d["sizes"][-1]]  # all but the batch it died on
    last = d["ids"][-d["sizes"][-1]:]
    check("restart: the batch it died on was dealt again to the restarted rank, and to no other",
          len(d["sizes"]) == 10 and set(last) <= set(a["ids"]) and not set(last) & set(o["ids"]),
          f"{len(d['sizes'])} batches; {len(set(last) - set(a['ids']))} not again")
    check("restart: nothing it had acknowledged came again",
          not set(acked) & set(a["ids"]), f"{len(set(acked) & set(a['ids']))} again")
    ids = acked + a["ids"] + o["ids"]
    check("restart: every record exactly once across the ranks (the acknowledged rows, the "
          "restarted rank's, rank 1's)", sorted(ids) == list(range(NREC)),
          f"{len(ids)} rows, {len(set(ids))} distinct")


def example_test():
    """api/examples/training/train.py (the documented training example), numpy backend: two
    ranks with equal batches, then LB-BSP with rank 1 slowed; each must learn the labels with the
    same number of steps on both ranks (the script checks and exits 0)."""
    script = os.path.join(HERE, "..", "..", "api", "examples", "training", "train.py")
    env = dict(os.environ, STREAMBATCH_BIN=BIN)
    for extra in ([], ["--balance", "lbbsp", "--slow-rank", "1"]):
        r = subprocess.run([sys.executable, script, "--rows", "4000", "--backend", "numpy"] + extra,
                           capture_output=True, text=True, timeout=120, env=env)
        lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        check(f"training example {' '.join(extra) or '(equal batches)'}: learned, exit 0",
              r.returncode == 0 and len(lines) == 3 and lines[-1]["accuracy"] >= 0.9,
              f"rc {r.returncode}: {r.stdout[-300:]} {r.stderr[-300:]}")


def stream_backlog(port):
    """The run's metrics: {worker id: stream partitions made and not yet dealt} it holds."""
    import re
    import urllib.request
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'streambatch_stream_partitions_waiting\{[^}]*worker="([^"]+)"[^}]*\} (\S+)', text)}


def worker_pid(run_pid, worker_id):
    """The pid of the run's worker process started with --id worker_id (None if none)."""
    with open(f"/proc/{run_pid}/task/{run_pid}/children") as f:
        kids = [int(x) for x in f.read().split()]
    for k in kids:
        try:
            argv = open(f"/proc/{k}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--id" in argv and argv[argv.index(b"--id") + 1].decode() == worker_id:
            return k
    return None


def kill_holder(p, port, least, killed):
    """A thread (started) that SIGKILLs the run p's worker holding the most stream partitions
    not yet dealt, once one holds at least `least` (the run's metrics on port), and appends
    (worker id, its backlog) to killed; it gives up after 30 s or when the run ends."""
    import signal
    import threading

    def killer():
        deadline = time.time() + 30
        while time.time() < deadline and p.poll() is None:
            backlog = stream_backlog(port)
            if backlog and max(backlog.values()) >= least:
                wid = max(backlog, key=backlog.get)
                pid = worker_pid(p.pid, wid)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)
                    killed.append((wid, int(backlog[wid])))
                    return
            time.sleep(0.05)

    t = threading.Thread(target=killer)
    t.start()
    return t


def read_and_kill(path, epochs, cpus, least):
    """Serves path with its metrics on, two ranks read `epochs` epochs in batches of 64 (rank 0
    pausing 5 s after its second batch), while kill_holder kills the worker holding `least`
    partitions not yet dealt. Returns (killed, the ranks' exit codes, their results, the
    summary's path)."""
    port = free_port()
    p, info, summary = serve(path, epochs=epochs, cpus=cpus,
                             extra=["--metrics-addr", f"127.0.0.1:{port}"])
    killed = []
    t = kill_holder(p, port, least, killed)
    name = os.path.basename(path)[:-5]
    codes, res = ranks(info, 2, epochs, 64, drop_last=False, pause=(2, 5.0), tag=name)
    t.join()
    finish(p, name)
    return killed, codes, res, summary


def worker_kill_test(src):
    """A worker SIGKILLed while two ranks read: its partitions are re-made by lineage (those
    not dealt yet, and those dealt but not yet read, which the rank reports), and every record
    still reaches exactly one rank. Rank 0 pauses after 2 batches, so the dealer holds rank 1
    too and the budget fills with partitions not dealt; the run's metrics say which worker holds
    the most of them (streambatch_stream_partitions_waiting), and that one is killed: the
    lineage re-make must then happen, whatever the timing."""
    killed, codes, res, summary = read_and_kill(spec(src, "kill", budget="256Ki"), 1, 2, 2)
    check("worker killed: the worker holding the most partitions not yet dealt (at least 2, "
          "from the run's metrics) was SIGKILLed mid-epoch", len(killed) == 1, killed)
    ok = all(c == 0 for c in codes)
    ids = [i for r in res for i in r["epochs"][0]["ids"]] if ok else []
    check("worker killed: every record exactly once across the 2 ranks",
          ok and sorted(ids) == list(range(NREC)),
          f"codes {codes}, {len(ids)} rows, {len(set(ids))} distinct")
    s = json.load(open(summary))
    check("worker killed: the run re-made partitions (lineage)",
          s.get("partitionsRecovered", 0) >= 1 or s.get("tasksRerun", 0) >= 1,
          json.dumps(s)[:300])


def cache_test(src):
    """sink.args.cacheEpochs: 2 epochs of 2 ranks from one read of the source. The budget
    (256Ki) is well under the output (~650 KB), so the kept partitions must leave it (the
    workers' stores keep them) for epoch 0 to finish. Every record exactly once per epoch across
    the ranks, epoch 1 in another order (the seed shuffles the kept partitions), and the source
    stage read each record once (its rowsOut: 20000 when each epoch re-reads the source)."""
    name = "cache"
    p, info, summary = serve(spec(src, name, budget="256Ki", part="16Ki",
                                  sink_args="    args: {cacheEpochs: true}\n"), epochs=2, seed=3)
    codes, res = ranks(info, 2, 2, 256, drop_last=False, tag=name)
    finish(p, name)
    ok = all(c == 0 for c in codes)
    check("cacheEpochs: both ranks read 2 epochs", ok, codes)
    if not ok:
        return
    for e in range(2):
        ids = [i for r in res for i in r["epochs"][e]["ids"]]
        check(f"cacheEpochs epoch {e}: every record exactly once across the ranks",
              sorted(ids) == list(range(NREC)), f"{len(ids)} rows, {len(set(ids))} distinct")
    order = [[i for r in res for i in r["epochs"][e]["ids"]] for e in range(2)]
    check("cacheEpochs: epoch 1 is dealt in another order (shuffled by the seed)",
          order[0] != order[1], "same order")
    s = json.load(open(summary))
    src_rows = s["stages"][0]["rowsOut"] if s.get("stages") else None
    check("cacheEpochs: the source was read once (the source stage made each record once)",
          src_rows == NREC, f"rowsOut {src_rows}: {json.dumps(s)[:300]}")
    cache_kill_test(src)
    bad = [("{cacheEpochs: 1}", "cacheEpochs"), ("{cacheEpochs: true, keep: 1}", "keep")]
    for args, word in bad:
        path = spec(src, "cachebad", sink_args=f"    args: {args}\n")
        r = subprocess.run([BIN, "validate", path], capture_output=True, text=True, timeout=60)
        check(f"validate refuses sink.args {args} on a stream:// sink, naming {word}",
              r.returncode != 0 and word in r.stdout + r.stderr,
              f"rc {r.returncode}: {(r.stdout + r.stderr)[-300:]}")


def cache_kill_test(src):
    """cacheEpochs with its one worker SIGKILLed once epoch 0 is made and the kept partitions
    are queued for epoch 1 (the metrics' backlog then exceeds one epoch's ~40 partitions; the
    1Mi budget holds all of epoch 0 while rank 0 pauses): the kept partitions are re-made by
    lineage and both epochs still give every record exactly once."""
    killed, codes, res, summary = read_and_kill(
        spec(src, "cachekill", sink_args="    args: {cacheEpochs: true}\n"), 2, 1, 45)
    check("cacheEpochs, worker killed: the worker holding epoch 0's kept partitions (a backlog "
          "past one epoch) was SIGKILLed", len(killed) == 1, killed)
    ok = all(c == 0 for c in codes)
    for e in range(2):
        ids = [i for r in res for i in r["epochs"][e]["ids"]] if ok else []
        check(f"cacheEpochs, worker killed, epoch {e}: every record exactly once across the ranks",
              ok and sorted(ids) == list(range(NREC)),
              f"codes {codes}, {len(ids)} rows, {len(set(ids))} distinct")
    s = json.load(open(summary))
    check("cacheEpochs, worker killed: the kept partitions were re-made (lineage)",
          s.get("partitionsRecovered", 0) >= 1, json.dumps(s)[:300])


def limit_test(src):
    """limit into a stream:// sink with sink.args.cacheEpochs: validate accepts it (it used to
    refuse it, saying the epochs read the source again, which with cacheEpochs they do not), and
    it runs: 2 epochs of 2 ranks, each epoch exactly the source's first 1500 records once across
    the ranks. What cannot run is refused by `run --serve` with its reason: several epochs
    reading the source again (an exchange is planned once for the whole run), and --seed (it
    shuffles the source's read order, limit takes the first rows)."""
    lim = "limit\n      args: {rows: 1500}"
    # (epochs from sink.args, not --epochs: the spec's way, which the operator uses)
    cached = spec(src, "limit", sink_args="    args: {cacheEpochs: true, epochs: 2}\n", op=lim)
    r = subprocess.run([BIN, "validate", cached], capture_output=True, text=True, timeout=60)
    check("limit into a stream:// sink with cacheEpochs: validate accepts it", r.returncode == 0,
          f"rc {r.returncode}: {(r.stdout + r.stderr)[-300:]}")
    p, info, _ = serve(cached, epochs=None)
    codes, res = ranks(info, 2, 2, 100, drop_last=False, tag="limit")
    finish(p, "limit")
    ok = all(c == 0 for c in codes)
    for e in range(2):
        ids = [i for x in res for i in x["epochs"][e]["ids"]] if ok else []
        check(f"limit + cacheEpochs epoch {e}: the first 1500 records, each once across the ranks",
              ok and sorted(ids) == list(range(1500)), f"codes {codes}, {len(ids)} rows")
    plain = spec(src, "limitplain", op=lim)
    for path, args, want in ((plain, ["--epochs", "2"], "an exchange is planned once"),
                             (cached, ["--seed", "3"], "takes the source's first rows")):
        r = subprocess.run([BIN, "run", path, "--serve", "127.0.0.1:0"] + args,
                           capture_output=True, text=True, timeout=60)
        check(f"run --serve {os.path.basename(path)} {' '.join(args)}: exit 2, says why",
              r.returncode == 2 and want in r.stderr, f"rc {r.returncode}: {r.stderr[-300:]}")


def c_api_test(src):
    """The C API without Python: api/examples/consumer/count.c reads a whole epoch."""
    exe = os.path.join(os.path.dirname(os.environ["STREAMBATCH_CONSUMER_LIB"]), "stream-count")
    name = "capi"
    p, info, _ = serve(spec(src, name), epochs=1)
    r = subprocess.run([exe, info["address"], info["tokenFile"], "0", "1", "0", "100"],
                       capture_output=True, text=True, timeout=120)
    finish(p, name)
    want = sum(len(json.dumps({"id": i, "text": f"record {i} " + "x" * (i % 37)}))
               for i in range(NREC))
    check("C API: one epoch, every row and byte, batches of 100, the record column as utf8",
          r.returncode == 0 and f"rows {NREC} bytes {want} batches {NREC // 100}" in r.stdout
          and "column record type 13" in r.stdout, f"rc {r.returncode}: {r.stdout} {r.stderr}")


def buffers_test():
    """The kit copies a batch's fixed-width columns into buffers it reuses (ingest.py, _Buffers):
    a buffer never changes under a batch the trainer still holds, and a trainer that drops its
    batches gets the same few buffers back. 4,000 rows of Parquet (int64 id, a list of 16
    float32 per row: a fixed-size list), batches of 100."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import streambatch
    d = os.path.join(WORK, "pq")
    os.makedirs(d, exist_ok=True)
    n, k = 4000, 16
    ids = np.arange(n, dtype=np.int64)
    vec = (ids[:, None] * k + np.arange(k)).astype(np.float32)
    vals = pa.array(vec.reshape(-1))
    lists = pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)), vals)
    for f in range(4):
        part = slice(f * 1000, (f + 1) * 1000)
        pq.write_table(pa.table({"id": ids[part], "vec": lists[part]}), os.path.join(d, f"p{f}.parquet"))
    path = os.path.join(WORK, "buffers.yaml")
    with open(path, "w") as f:
        f.write(f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {{name: buffers}}
spec:
  source: {{uri: "file://{d}/", format: parquet, partitionSize: 16Ki}}
  stages: [{{name: keep, op: identity}}]
  sink: {{uri: "stream://", format: jsonl}}
  execution: {{memoryBudget: 4Mi}}
""")
    p, info, _ = serve(path, epochs=2)
    held, bad = [], []
    try:
        it = streambatch.iter_batches(info["address"], batch_size=100, epoch=0, drop_last=False,
                                      token_file=info["tokenFile"])
        for b in it:  # epoch 0: every batch kept, then each checked at the end
            held.append(b)
            b["vec"][:] = -1.0  # the arrays are the trainer's to write
        for b in held:
            if not (b["vec"] == -1.0).all():
                bad.append("a held batch's vec changed after the trainer wrote it")
                break
        got = np.sort(np.concatenate([b["id"] for b in held]))
        check("buffers: held batches keep their rows (every id once in epoch 0, none rewritten)",
              not bad and np.array_equal(got, ids) and len(set(map(id, (b["id"].base.obj for b in held)))) == len(held),
              bad or f"{len(got)} ids")
        held.clear()
        it = streambatch.iter_batches(info["address"], batch_size=100, epoch=1, drop_last=False,
                                      token_file=info["tokenFile"])
        rows = 0
        for b in it:  # epoch 1: each batch dropped before the next
            i = b["id"]
            if not np.array_equal(b["vec"], vec[i]):
                bad.append(f"epoch 1: the vec of ids {i[:3]}... is not the source's")
                break
            rows += len(i)
        made = it._bufs.made
        check("buffers: a trainer that drops its batches gets the same buffers back "
              f"({made} made for 2 columns x {rows // 100} batches)",
              not bad and rows == n and made <= 2 * streambatch.ingest._Buffers.KEEP, bad or made)
    except Exception as e:  # e.g. a read-only array, or no _bufs: the check fails, the run goes on
        check("buffers: the batches read, written and checked", False, repr(e))
    finally:
        finish(p, "buffers")


def cli_test(src):
    """`run` refuses what does not go together, exit 2 with the reason, before starting."""
    stream = spec(src, "cli")
    files = spec(src, "clif")
    with open(files) as f:
        text = f.read().replace("uri: stream://", f"uri: file://{WORK}/out")
    with open(files, "w") as f:
        f.write(text)
    cases = [([stream], "spec.sink.uri is stream://: serve it with --serve HOST:PORT"),
             ([files, "--serve", "127.0.0.1:0"], "--serve serves a stream:// sink"),
             ([stream, "--serve", "127.0.0.1:0", "--resume"], "keeps no checkpoint"),
             ([files, "--epochs", "2"], "--epochs and --seed go with --serve"),
             ([stream, "--serve", "nohost"], "--serve wants HOST:PORT"),
             ([stream, "--serve", "127.0.0.1:0", "--epochs", "0"], "--epochs")]
    for args, want in cases:
        r = subprocess.run([BIN, "run"] + args, capture_output=True, text=True, timeout=60)
        check(f"run {os.path.basename(args[0])} {' '.join(args[1:])}: exit 2, says why",
              r.returncode == 2 and want in r.stderr, f"rc {r.returncode}: {r.stderr[-300:]}")


def main():
    os.makedirs(WORK, exist_ok=True)
    src, lines = make_source()
    only = os.environ.get("SB_STREAM_ONLY", "")  # e.g. "split3,slow" while working on one
    tests = [("split2", lambda: splits_test(src, 2, drop_last=False)),
             ("split3", lambda: splits_test(src, 3, drop_last=True)),
             ("order", lambda: order_test(src)),
             ("formats", lambda: formats_test(src, lines)),
             ("slow", lambda: slow_consumer_test(src)),
             ("share", lambda: share_test(src)),
             ("kill", lambda: worker_kill_test(src)),
             ("cache", lambda: cache_test(src)),
             ("capi", lambda: c_api_test(src)),
             ("limit", lambda: limit_test(src)),
             ("prefetch", lambda: prefetch_test(src)),
             ("grouped", lambda: grouped_fetch_test(src)),
             ("lbbsp", lambda: lbbsp_test(src)),
             ("restart", lambda: restart_test(src)),
             ("example", example_test),
             ("buffers", buffers_test),
             ("cli", lambda: cli_test(src))]
    for name, run in tests:
        if not only or name in only.split(","):
            run()
    print(f"stream-test: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()

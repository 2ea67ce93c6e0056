"""One trainer rank for tests/stream/test-stream.sh: reads epochs of a stream:// sink with
streambatch.iter_batches and writes what it got as JSON (per epoch: the batch sizes and the
records' ids in the order they came).

usage: consume.py ADDRESS TOKEN_FILE RANK WORLD EPOCHS BATCH DROP_LAST SHUFFLE SEED FORMAT OUT
       [PAUSE_AFTER_BATCHES PAUSE_S [BALANCE STEP_S_PER_ROW [DIE_AFTER]]]
SEED "-" is none; FIRST_EPOCH in the environment: the first epoch read (0). With
PAUSE_AFTER_BATCHES (-1: none), the rank stops reading for PAUSE_S seconds
after that many batches of epoch 0 (a slow consumer; "paused" in the output: when it stopped and
went on; "ended_at": when it read its last epoch). BALANCE ("-": equal batches, or "lbbsp")
is iter_batches' balance; STEP_S_PER_ROW makes each step sleep that long per row of its batch (a
trainer whose step time grows with the batch, as LB-BSP assumes). With DIE_AFTER the rank writes
what it got after that many batches of epoch 0 (the last one it was working on: acknowledged only
by the next request, which never comes) and SIGKILLs itself."""
import json
import os
import signal
import sys
import time

import streambatch


def ids_of(batch, fmt):
    """The records' "id" fields, checked against the record text where there is one."""
    if fmt == "numpy":
        recs = batch["record"]
        assert recs.dtype == object and all(isinstance(r, bytes) for r in recs), recs[:2]
        return [json.loads(r)["id"] for r in recs], len(recs)
    if fmt == "pyarrow":
        recs = batch.column(batch.schema.get_field_index("record")).to_pylist()
        return [json.loads(r)["id"] for r in recs], batch.num_rows
    if fmt == "rows":
        return [json.loads(r["record"])["id"] for r in batch], len(batch)
    raise SystemExit(f"format {fmt}?")


def main():
    a = sys.argv[1:]
    address, token_file, rank, world, epochs, bsz = a[0], a[1], int(a[2]), int(a[3]), int(a[4]), int(a[5])
    drop_last, shuffle, seed, fmt, out = a[6] == "1", int(a[7]), None if a[8] == "-" else int(a[8]), a[9], a[10]
    pause_after = int(a[11]) if len(a) > 11 else -1
    pause_s = float(a[12]) if len(a) > 12 else 0
    balance = None if len(a) <= 13 or a[13] == "-" else a[13]
    per_row = float(a[14]) if len(a) > 14 else 0
    die_after = int(a[15]) if len(a) > 15 else -1
    result = {"rank": rank, "epochs": []}
    # FIRST_EPOCH (env): the epochs before it are not read (a rank going on after a takeover)
    for e in range(int(os.environ.get("FIRST_EPOCH", "0")), epochs):
        sizes, ids, texts = [], [], []
        for k, batch in enumerate(streambatch.iter_batches(
                address, batch_size=bsz, batch_format=fmt, rank=rank, world_size=world, epoch=e,
                drop_last=drop_last, local_shuffle_buffer=shuffle, seed=seed,
                token_file=token_file, timeout_s=120, balance=balance)):
            got, n = ids_of(batch, fmt)
            if per_row > 0:
                time.sleep(per_row * n)
            sizes.append(n)
            ids.extend(got)
            if fmt == "numpy":
                texts.extend(r.decode() for r in batch["record"])
            if e == 0 and k + 1 == pause_after:
                result["paused"] = [time.time()]
                time.sleep(pause_s)
                result["paused"].append(time.time())
            if e == 0 and k + 1 == die_after:
                result["epochs"].append({"sizes": sizes, "ids": ids, "texts": texts})
                with open(out, "w") as f:
                    json.dump(result, f)
                os.kill(os.getpid(), signal.SIGKILL)
        result["epochs"].append({"sizes": sizes, "ids": ids, "texts": texts})
    result["ended_at"] = time.time()
    with open(out, "w") as f:
        json.dump(result, f)


main()

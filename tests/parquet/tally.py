"""The tally the parquet test scripts share (conformance.py, writer.py, pushdown.py,
pageindex.py): check() prints one line per check, finish() prints the "N passed, N failed" line
that make test counts and exits non-zero on any failure."""
import sys

counts = {"passed": 0, "failed": 0}


def check(name, ok, detail=""):
    if ok:
        counts["passed"] += 1
        print(f"ok: {name}")
    else:
        counts["failed"] += 1
        print(f"FAIL: {name}: {detail}"[:3000])


def finish():
    print(f"{counts['passed']} passed, {counts['failed']} failed")
    sys.exit(1 if counts["failed"] else 0)

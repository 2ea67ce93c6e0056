"""measure.py LOG CMD...: runs CMD and prints one JSON line {wall, cpu, peak_rss, peak_pss}.

wall: seconds from fork to the exit of CMD's process (start-up and imports included).
cpu: user + system seconds of CMD and every process below it that was waited for.
peak_rss / peak_pss: the largest sum, over CMD and every process below it, of VmRSS (sampled
every 20 ms; shared pages count in every process that maps them) and of Pss (every 100 ms; a
page shared by n processes counts 1/n in each), in bytes. The list of processes is refreshed
every 100 ms (a scan of /proc: 3-4 ms of CPU on the shared 2-CPU machine, so not every 20 ms). This process is a child subreaper, so
daemons a run starts (Ray's GCS, raylet, workers) stay below it even if their parent exits.
Whatever is still running below it 10 s after CMD exits is killed (by pid) and counted as a
failure. CMD's stdout/stderr go to LOG.
"""
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
PAGE = os.sysconf("SC_PAGE_SIZE")


def children_map():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(root):
    kids, out, todo = children_map(), [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rss(pid):
    try:
        with open("/proc/%d/statm" % pid) as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, ValueError, IndexError):
        return 0


def pss(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def main():
    log, cmd = sys.argv[1], sys.argv[2:]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    me = os.getpid()
    peak_rss = peak_pss = 0
    with open(log, "w") as lf:
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)
        n, pids = 0, []
        while proc.poll() is None:
            if n % 5 == 0:  # the tree (a scan of /proc, ~4 ms here) and Pss every 100 ms
                pids = [p for p in tree(me) if p != me]
                peak_pss = max(peak_pss, sum(pss(p) for p in pids))
            peak_rss = max(peak_rss, sum(rss(p) for p in pids))
            n += 1
            time.sleep(0.02)
        wall = time.monotonic() - t0
    rc = proc.returncode
    # leftovers (daemons that outlive the command): wait, then kill them by pid
    deadline = time.monotonic() + 10
    left = []
    while time.monotonic() < deadline:
        left = [p for p in tree(me) if p != me]
        try:
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        except ChildProcessError:
            pass
        if not left:
            break
        time.sleep(0.1)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    try:
        while os.waitpid(-1, 0)[0] > 0:
            pass
    except ChildProcessError:
        pass
    ru = os.times()
    print(json.dumps({"rc": rc, "wall": round(wall, 3), "cpu": round(ru.children_user + ru.children_system, 3),
                      "peak_rss": peak_rss, "peak_pss": peak_pss, "leftovers": len(left)}))
    return 0 if rc == 0 and not left else 1


if __name__ == "__main__":
    sys.exit(main())

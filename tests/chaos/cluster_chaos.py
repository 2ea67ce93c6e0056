#!/usr/bin/env python3
"""cluster_chaos.py -- the chaos run on the test cluster: random Pipelines applied one after the
other to the operator (helm install of helm/streambatch on tests/k8s/cluster.sh, every pod a
container of our own images, every Pipeline reading and writing MinIO with keys from a Secret),
while the faults a real cluster has are injected at random times, and every output row is
checked against the same independent computation as chaos.py's.

Run through scripts/chaos-cluster.sh (`make chaos-cluster DURATION=<seconds>`), which bounds the
time and stops the cluster whatever happens. Per pipeline (seed <master>-<index>, logged; `--seed
S --only I` replays pipeline I, faults included):

  * input, stages and expected rows from chaos.py (write_input, gen_pipeline, expected_rows, and
    the all-to-all ops and their model: add_a2a, a2a_model, check_a2a; a join's right side in
    the bucket; no targeted reduce-phase kill: the status shows no stage's progress); the
    source and the sink are s3:// (no path is shared by the host and a pod); every stage gets
    resources {cpu: 500m} and workers {min: 1, max: 2 or 3};
  * faults, 0-4 at random times after `kubectl apply`: delete a worker pod (graceful, or forced
    with grace period 0), SIGKILL or SIGSTOP (1-6 s) a worker container's process, SIGKILL the
    leading controller's process (the other replica takes the Lease), restart the API server
    (SIGKILL, down 0-4 s, up again on the same port: every watch and connection breaks);
  * the Pipeline must reach Succeeded with exactly the expected rows (in order under
    preserveOrder), _manifest.json and _SUCCESS; Failed counts as "failed clean" only without
    _SUCCESS; no phase within --pipeline-limit is a hang; worker pods must be gone within 120 s
    of its deletion; a controller container that restarted more often than we killed it, or a
    sanitizer/segfault line in any pod's log, is a crash.

The last line is "chaos-cluster: N passed, M failed"; exit status 1 when any failed.
"""
import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos  # noqa: E402  (the generators, the model of the ops, MinIO and its S3 client)

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
K8S = os.path.join(REPO, "tests", "k8s")
SYS, REL, DEPLOY, LEASE, NS = "sb-system", "sb", "sb-streambatch", "streambatch-controller", "chaos"
log = chaos.log
Interrupted = chaos.Interrupted


def run(argv, env=None, timeout=120, check=True):
    r = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       stdin=subprocess.DEVNULL, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (" ".join(argv[:4]), r.returncode, r.stdout[-1500:]))
    return r


class Cluster:
    """The test cluster, the operator installed by helm, MinIO and the namespace for Pipelines."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.state = os.path.join(cfg.work, "cluster")
        self.bin = run([os.path.join(K8S, "build.sh"), "--print-bin-dir"]).stdout.strip()
        self.env = dict(os.environ, STREAMBATCH_CLUSTER_DIR=self.state,
                        KUBECONFIG=os.path.join(self.state, "kubeconfig"),
                        PATH=self.bin + ":" + os.environ["PATH"],
                        HELM_CACHE_HOME=os.path.join(cfg.work, "helm/cache"),
                        HELM_CONFIG_HOME=os.path.join(cfg.work, "helm/config"),
                        HELM_DATA_HOME=os.path.join(cfg.work, "helm/data"),
                        SB_K8S_NODES="name=sb-cpu-0,cpu=64,memory=256Gi name=sb-cpu-1,cpu=64,memory=256Gi")
        self.minio = None
        self.up = False
        self.reported = set()  # pod logs with a crash line already counted
        self.leader_kills = 0  # controller processes SIGKILLed by the run, in all
        self.extra_restarts = 0  # controller restarts nobody caused, reported so far

    def kubectl(self, *args, timeout=60, check=True):
        return run(["kubectl", "--request-timeout=20s"] + list(args), env=self.env, timeout=timeout,
                   check=check)

    def start(self, minio_bin):
        t0 = time.monotonic()
        images = os.path.join(self.cfg.work, "images")
        run([os.path.join(REPO, "scripts", "images.sh")], timeout=900,
            env=dict(os.environ, SB_IMAGES_DIR=images, SB_BIN_DIR=self.cfg.bin_dir))
        conf = os.path.join(self.cfg.work, "images.conf")
        with open(conf, "w") as f:
            f.write("sb-oci/*  oci:%s/oci:{name}-{tag}\n" % images)
        self.env["SB_K8S_IMAGES"] = conf
        log("chaos-cluster: images built (%.0f s)" % (time.monotonic() - t0))
        self.up = True
        run([os.path.join(K8S, "cluster.sh"), "up"], env=self.env, timeout=300)
        log("chaos-cluster: cluster up (%.0f s)" % (time.monotonic() - t0))
        self.minio = chaos.MinIO(minio_bin, self.cfg.work)
        log("chaos-cluster: MinIO (pid %d) on %s" % (self.minio.proc.pid, self.minio.url))
        self.kubectl("create", "namespace", NS)
        lits = ["--from-literal=%s=%s" % kv for kv in sorted(self.minio.env().items())]
        self.kubectl("-n", NS, "create", "secret", "generic", "s3-creds", *lits)
        run(["helm", "install", REL, os.path.join(REPO, "helm", "streambatch"), "-n", SYS,
             "--create-namespace", "--set", "image.repository=sb-oci/controller",
             "--set", "workerImage.repository=sb-oci/worker",
             "--set", "workerGpuImage.repository=sb-oci/worker-gpu"], env=self.env, timeout=120)
        self.kubectl("-n", SYS, "rollout", "status", "deployment/" + DEPLOY, "--timeout=120s", timeout=150)
        end = time.monotonic() + 60
        while self.leader_pod() is None:
            if time.monotonic() > end:
                raise RuntimeError("nobody holds Lease %s/%s" % (SYS, LEASE))
            time.sleep(0.5)
        log("chaos-cluster: operator installed, leader %s (%.0f s)" % (self.leader_pod(), time.monotonic() - t0))

    def stop(self):
        if self.minio is not None:
            self.minio.stop()
        if self.up:
            run([os.path.join(K8S, "cluster.sh"), "down"], env=self.env, timeout=120, check=False)

    # ---- what runs where
    def get_json(self, *args):
        r = self.kubectl("get", *args, "-o", "json", check=False)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except ValueError:
            return None

    def controller_pods(self):
        d = self.get_json("-n", SYS, "pods", "-l", "app.kubernetes.io/name=streambatch-controller")
        return d["items"] if d else []

    def leader_pod(self):
        d = self.get_json("-n", SYS, "lease", LEASE)
        holder = (d or {}).get("spec", {}).get("holderIdentity") or ""
        for p in self.controller_pods():
            if holder.startswith(p["metadata"]["name"]):
                return p["metadata"]["name"]
        return None

    def controller_restarts(self):
        n = 0
        for p in self.controller_pods():
            for c in p.get("status", {}).get("containerStatuses", []) or []:
                n += c.get("restartCount", 0)
        return n

    def lease_exits(self):
        """How many times a controller process exited because it lost the Lease (by design:
        it could not renew within the renew deadline, e.g. while the API server was down, and
        exits so that a new process competes again): such a restart is not a crash."""
        n = 0
        for f in glob.glob(os.path.join(self.state, "pods", SYS + "_*", "controller.log")):
            try:
                with open(f, errors="replace") as fh:
                    n += sum(1 for line in fh if "lost the leader lease; exiting" in line)
            except OSError:
                pass
        return n

    def worker_pods(self, name, running=False):
        args = ["-n", NS, "pods", "-l", "streambatch.dev/pipeline=" + name]
        if running:
            args += ["--field-selector", "status.phase=Running"]
        d = self.get_json(*args)
        return [p["metadata"]["name"] for p in d["items"]] if d else []

    def pod_pid(self, ns, pod, container):
        files = sorted(glob.glob(os.path.join(self.state, "pods", "%s_%s_*" % (ns, pod), container + ".pid")),
                       key=os.path.getmtime)
        for f in reversed(files):
            try:
                pid = int(open(f).read().split()[0])
                os.kill(pid, 0)
                return pid
            except (OSError, ValueError, IndexError):
                continue
        return None

    def restart_apiserver(self, down_s):
        run([os.path.join(K8S, "cluster.sh"), "restart-apiserver", "%.1f" % down_s], env=self.env, timeout=150)


class ClusterPipeline(chaos.Pipeline):
    """One Pipeline on the operator; check_output is chaos.Pipeline's (the same model)."""

    def __init__(self, cfg, stats, idx, cluster):  # pylint: disable=super-init-not-called
        self.cfg, self.st, self.idx, self.cl = cfg, stats, idx, cluster
        self.seed = "%d-%d" % (cfg.seed, idx)
        self.rng = random.Random(self.seed)
        self.dir = os.path.join(cfg.work, "p%05d" % idx)
        self.name = "chaos-%d" % idx
        self.events = []
        self.stopped = {}  # pid -> time to SIGCONT
        self.leader_kills = 0

    def setup(self):
        rng = self.rng
        os.makedirs(self.dir)
        self.fmt = rng.choice(["jsonl", "jsonl", "csv"])
        self.files, self.total = chaos.write_input(rng, os.path.join(self.dir, "in"), self.fmt)
        self.preserve = rng.random() < 0.3
        wmax = rng.choice([2, 3])
        ra = self.draw_a2a()
        self.stages, self.target_s = chaos.gen_pipeline(rng, self.fmt, self.total, wmax, self.ordered_in())
        psize = rng.choice([4096, 8192, 16384, 49152])
        execution = {"maxTaskRetries": rng.choice([3, 5, 10]), "stallTimeout": "60s",
                     "mode": rng.choice(["streaming", "streaming", "staged", "static"]),
                     "memoryBudget": psize * rng.choice([4, 16, 64])}
        if self.preserve:
            execution["preserveOrder"] = True
        self.exec = execution
        self.sink_fmt = "csv" if self.fmt == "csv" and rng.random() < 0.6 else "jsonl"
        self.out = os.path.join(self.dir, "out")
        self.pfx = "c%05d-%d/" % (self.idx, os.getpid())
        s3 = self.cl.minio.s3
        self.add_a2a(ra, wmax, psize, self.right_object)  # chaos.py's ops and model (no reduce_kill here)
        for s in self.stages:
            s["resources"] = {"cpu": "500m"}
            s["workers"] = {"min": 1, "max": wmax}
        for name in sorted(os.listdir(os.path.join(self.dir, "in"))):
            with open(os.path.join(self.dir, "in", name), "rb") as f:
                s3.put(self.pfx + "in/" + name, f.read())
        # `kubectl apply` (client-side) deletes a field whose value is null, so missingKey goes
        # as the string "null", which the engine takes the same way (docs/pipeline-api.md)
        stages = [dict(st, args=dict(st["args"], missingKey="null"))
                  if "missingKey" in st.get("args", {}) and st["args"]["missingKey"] is None else st
                  for st in self.stages]
        spec = {"source": {"uri": "s3://%s/%sin/" % (chaos.S3_BUCKET, self.pfx), "format": self.fmt,
                           "partitionSize": psize, "credentialsSecret": "s3-creds"},
                "stages": stages,
                "sink": {"uri": "s3://%s/%sout/" % (chaos.S3_BUCKET, self.pfx), "format": self.sink_fmt,
                         "credentialsSecret": "s3-creds"},
                "execution": execution}
        self.manifest = os.path.join(self.dir, "pipeline.json")
        with open(self.manifest, "w") as f:
            json.dump({"apiVersion": "streambatch.dev/v1alpha1", "kind": "Pipeline",
                       "metadata": {"name": self.name, "namespace": NS}, "spec": spec}, f, indent=1)
        kinds = ["pod_delete", "pod_delete", "worker_kill", "worker_stop", "leader_kill", "apiserver_restart"]
        plan = []
        for _ in range(rng.choice([0, 1, 2, 2, 3, 4])):
            k = rng.choice(kinds)
            if k in ("leader_kill", "apiserver_restart") and any(x == k for _, x in plan):
                k = "pod_delete"  # one of each per pipeline: the run must still end in bounded time
            # while it runs: pods start in 2-5 s, then about target_s of work
            plan.append((rng.uniform(1.0, self.target_s + 4.0), k))
        self.plan = sorted(plan)
        self.desc = "seed %s: %s %d files %d rows, partitionSize %d, %s, workers max %d, stages %s, sink %s, faults %s" % (
            self.seed, self.fmt, len(self.files), self.total, psize,
            json.dumps(execution, separators=(",", ":")), wmax,
            json.dumps([[s["op"], s.get("args", {})] for s in self.stages], ensure_ascii=True, separators=(",", ":")),
            self.sink_fmt, ["%.1f:%s" % p for p in self.plan])

    def right_object(self, data):
        """A join's right side, in the bucket (read by the worker pods with the source's keys)."""
        self.cl.minio.s3.put(self.pfx + "right.jsonl", data)
        return "s3://%s/%sright.jsonl" % (chaos.S3_BUCKET, self.pfx)

    # ---- faults
    def inject(self, kind):
        cl, rng = self.cl, self.rng
        if kind in ("pod_delete", "worker_kill", "worker_stop"):
            pods = cl.worker_pods(self.name, running=True)
            if kind != "pod_delete":  # a pod being deleted may still say Running
                pods = [p for p in pods if cl.pod_pid(NS, p, "worker") is not None]
            if not pods:
                self.ev("%s: no running worker pod" % kind)
                return False
            pod = rng.choice(sorted(pods))
            if kind == "pod_delete":
                force = rng.random() < 0.3
                cl.kubectl("-n", NS, "delete", "pod", pod, "--wait=false",
                           *(["--grace-period=0", "--force"] if force else []), check=False)
                self.ev("deleted pod %s%s" % (pod, " (forced)" if force else ""))
                return True
            pid = cl.pod_pid(NS, pod, "worker")
            if pid is None:
                self.ev("%s: no process for %s" % (kind, pod))
                return False
            if kind == "worker_kill":
                os.kill(pid, signal.SIGKILL)
                self.ev("SIGKILL worker %s (pid %d)" % (pod, pid))
            else:
                os.kill(pid, signal.SIGSTOP)
                self.stopped[pid] = time.monotonic() + rng.uniform(1, 6)
                self.ev("SIGSTOP worker %s (pid %d)" % (pod, pid))
            return True
        if kind == "leader_kill":
            lp = cl.leader_pod()
            pid = cl.pod_pid(SYS, lp, "controller") if lp else None
            if pid is None:
                self.ev("leader_kill: no leader process (%s)" % lp)
                return False
            os.kill(pid, signal.SIGKILL)
            self.leader_kills += 1
            self.ev("SIGKILL leading controller %s (pid %d)" % (lp, pid))
            return True
        if kind == "apiserver_restart":
            down = rng.uniform(0, 4)
            t = time.monotonic()
            cl.restart_apiserver(down)
            self.ev("API server restarted (down %.1f s, ready again after %.1f s)" % (down, time.monotonic() - t))
            return True
        raise ValueError(kind)

    def cont_stopped(self, everything=False):
        now = time.monotonic()
        for pid, until in list(self.stopped.items()):
            if everything or now >= until:
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
                self.ev("SIGCONT pid %d" % pid)
                del self.stopped[pid]

    def sample_pods(self):
        """Each worker pod's creation, PodScheduled and Ready times (the API's, whole seconds):
        how long pods took to be bound and to start under the faults (reported)."""
        d = self.cl.get_json("-n", NS, "pods", "-l", "streambatch.dev/pipeline=" + self.name)
        for p in (d or {}).get("items", []):
            name = p["metadata"]["name"]
            conds = {c["type"]: c.get("lastTransitionTime") for c in p.get("status", {}).get("conditions", []) or []
                     if c.get("status") == "True"}
            rec = self.pods.setdefault(name, {"created": p["metadata"].get("creationTimestamp")})
            for k in ("PodScheduled", "Ready"):
                if conds.get(k):
                    rec[k] = conds[k]

    def pod_latencies(self):
        """(seconds from creation to PodScheduled, to Ready) of the slowest pod of this run"""
        def ts(x):
            return time.mktime(time.strptime(x, "%Y-%m-%dT%H:%M:%SZ")) if x else None
        sched = ready = 0.0
        for rec in self.pods.values():
            c = ts(rec.get("created"))
            if c is None:
                continue
            if rec.get("PodScheduled"):
                sched = max(sched, ts(rec["PodScheduled"]) - c)
            if rec.get("Ready"):
                ready = max(ready, ts(rec["Ready"]) - c)
        return sched, ready

    def phase(self):
        d = self.cl.get_json("-n", NS, "pipeline", self.name)
        st = (d or {}).get("status", {})
        return st.get("phase"), st

    def run(self):
        cl = self.cl
        self.t0 = time.monotonic()
        self.lease_exits0 = cl.lease_exits()
        cl.kubectl("apply", "-f", self.manifest)
        self.ev("applied")
        plan = list(self.plan)
        self.hung, self.status, self.final = False, {}, None
        self.pods = {}
        next_sample = 0.0
        while True:
            now = time.monotonic() - self.t0
            ph, st = self.phase()
            if st:
                self.status = st
            if ph in ("Succeeded", "Failed"):
                self.final = ph
                break
            if now > self.cfg.pipeline_limit:
                self.hung = True
                break
            while plan and plan[0][0] <= now:
                _, kind = plan.pop(0)
                try:
                    if self.inject(kind):
                        self.st.faults[kind] += 1
                except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
                    self.ev("%s failed: %s" % (kind, e))
                    self.st.c["fault_errors"] += 1
            self.cont_stopped()
            if now >= next_sample:
                self.sample_pods()
                next_sample = now + 2.0
            time.sleep(0.3)
        self.cont_stopped(everything=True)
        self.wall = time.monotonic() - self.t0
        self.sched_s, self.ready_s = self.pod_latencies()
        self.st.c["slow_pod_starts"] += self.ready_s > 30
        self.ev("%s after %.1f s; slowest worker pod: scheduled after %.0f s, Ready after %.0f s" % (
            self.final or "no end", self.wall, self.sched_s, self.ready_s))

    def crash_reports(self):
        out = []
        # cumulative since the install: a restart shows in the pod status a little after the
        # log line of a lease exit, possibly in the next pipeline's window
        cl = self.cl
        lease_exits = cl.lease_exits()
        self.st.c["lease_exits"] += lease_exits - self.lease_exits0
        cl.leader_kills += self.leader_kills
        extra = cl.controller_restarts() - cl.leader_kills - lease_exits
        if extra > cl.extra_restarts:
            out.append("controller containers restarted %d more times than killed or exited for a "
                       "lost Lease" % (extra - cl.extra_restarts))
            cl.extra_restarts = extra
        for f in glob.glob(os.path.join(self.cl.state, "pods", "*", "*.log")):
            if f in self.cl.reported:
                continue
            try:
                with open(f, errors="replace") as fh:
                    for line in fh:
                        if chaos.CRASH_RE.search(line):
                            self.cl.reported.add(f)
                            out.append("%s: %s" % (os.path.relpath(f, self.cl.state), line.strip()[:300]))
                            break
            except OSError:
                pass
        return out

    def check(self):
        st = self.st
        problems = []
        try:
            st.c["s3_objects_read"] += self.cl.minio.s3.mirror(self.pfx + "out/", self.out)
        except Exception as e:  # noqa: BLE001 -- any failure to read back is a problem of this run
            problems.append("reading the S3 output back: %s" % e)
        succ = os.path.exists(os.path.join(self.out, "_SUCCESS"))
        crashes = self.crash_reports()
        if crashes:
            problems.append("crash: " + " | ".join(crashes)[:3000])
            st.c["crashes"] += 1
        verdict = None
        if self.hung:
            problems.append("hung: phase %r after %d s: %s" % (self.status.get("phase"), self.cfg.pipeline_limit,
                                                               json.dumps(self.status)[:600]))
            st.c["hung"] += 1
        elif self.final == "Succeeded" and not succ:
            problems.append("Succeeded without _SUCCESS")
        elif self.final == "Failed" and succ:
            problems.append("Failed but _SUCCESS written")
        elif self.final == "Failed":
            verdict = "failed-clean"
            st.c["failed_clean"] += 1
            self.failure = self.status.get("message") or ""
            st.fail_kinds[self.status.get("reason") or "other"] += 1
        parts = self.status.get("partitions") or {}
        st.c["partitions_recovered"] += parts.get("recovered") or 0
        st.c["partitions_total"] += parts.get("total") or 0
        if succ and self.final == "Succeeded":
            verdict = "succeeded"
            st.c["succeeded"] += 1
            problems += self.check_output()
        # deletion: the Pipeline and its worker pods gone within 120 s (after an API server
        # restart the agent's watch can take over a minute to come back: docs/testing.md)
        self.cl.kubectl("-n", NS, "delete", "pipeline", self.name, "--wait=false", check=False)
        end = time.monotonic() + 120
        while time.monotonic() < end:
            if not self.cl.worker_pods(self.name) and self.cl.get_json("-n", NS, "pipeline", self.name) is None:
                break
            time.sleep(0.5)
        else:
            left = self.cl.worker_pods(self.name)
            problems.append("120 s after its deletion: Pipeline %s, worker pods %s" % (
                "still there" if self.cl.get_json("-n", NS, "pipeline", self.name) else "gone", left))
            st.c["leftover_pods"] += len(left)
        if problems:
            st.c["bad"] += 1
            st.problems.append((self.seed, self.desc, problems, self.events))
        return verdict, problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=120, help="seconds of pipelines (default 120)")
    ap.add_argument("--bin-dir", required=True, help="the binaries the images are built from")
    ap.add_argument("--work", required=True, help="an empty directory for the cluster, data and logs")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", default=None, help="run only pipelines I[,J...] of --seed")
    ap.add_argument("--pipeline-limit", type=int, default=300, help="seconds before a run counts as hung")
    cfg = ap.parse_args()
    cfg.seed = cfg.seed if cfg.seed is not None else int.from_bytes(os.urandom(3), "big")
    only = [int(x) for x in cfg.only.split(",")] if cfg.only else None
    os.makedirs(cfg.work, exist_ok=True)
    stats = chaos.Stats()

    def on_signal(sig, _frame):
        raise Interrupted("signal %d" % sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    minio_bin = chaos.find_minio()
    if minio_bin is None:
        log("chaos-cluster: no MinIO (SB_MINIO_BIN, or scripts/minio.sh to build it)")
        log("chaos-cluster: 0 passed, 1 failed")
        return 1
    log("chaos-cluster: seed %d, %d s, bin %s, work %s" % (cfg.seed, cfg.duration, cfg.bin_dir, cfg.work))
    cl = Cluster(cfg)
    interrupted = setup_error = None
    pipe = None
    t_start = time.monotonic()
    idx = only.pop(0) if only else 0
    try:
        try:
            cl.start(minio_bin)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
            setup_error = str(e)
        t_end = time.monotonic() + cfg.duration
        while setup_error is None:
            pipe = ClusterPipeline(cfg, stats, idx, cl)
            pipe.setup()
            log("[%d] %s" % (idx, pipe.desc))
            pipe.run()
            verdict, problems = pipe.check()
            stats.c["pipelines"] += 1
            log("[%d] %s in %.1f s%s%s" % (
                idx, verdict or "BAD", pipe.wall,
                ": " + pipe.failure[:800] if verdict == "failed-clean" else "",
                "".join("\n    PROBLEM " + p for p in problems)))
            if problems or os.environ.get("SB_CHAOS_VERBOSE") == "1":
                for e in pipe.events:
                    log("    " + e)
            pipe = None
            if cfg.only is not None:
                if not only:
                    break
                idx = only.pop(0)
                continue
            idx += 1
            if time.monotonic() >= t_end:
                break
    except Interrupted as e:
        interrupted = str(e)
    finally:
        if pipe is not None:
            pipe.cont_stopped(everything=True)
        cl.stop()
    c = stats.c
    log("")
    log("chaos-cluster report (seed %d%s)" % (cfg.seed, ", interrupted: " + interrupted if interrupted else ""))
    if setup_error:
        log("  SETUP FAILED: %s" % setup_error[-2000:])
    log("  wall time            %.0f s" % (time.monotonic() - t_start))
    log("  pipelines run        %d" % c["pipelines"])
    log("  succeeded            %d" % c["succeeded"])
    log("  failed clean         %d (%s)" % (c["failed_clean"], ", ".join(
        "%s %d" % kv for kv in sorted(stats.fail_kinds.items())) or "none"))
    log("  faults injected      %d (%s)" % (sum(stats.faults.values()), ", ".join(
        "%s %d" % kv for kv in sorted(stats.faults.items())) or "none"))
    log("  faults not injected  %d (errors)" % c["fault_errors"])
    log("  all-to-all pipelines %d (%s)" % (sum(stats.a2a.values()), ", ".join(
        "%s %d" % kv for kv in sorted(stats.a2a.items())) or "none"))
    log("  partitions           %d (%d re-made by lineage after a loss)" % (
        c["partitions_total"], c["partitions_recovered"]))
    log("  s3 objects read back %d" % c["s3_objects_read"])
    log("  bytes checked        %d" % c["bytes_checked"])
    log("  rows checked         %d (expected %d)" % (c["rows_checked"], c["rows_expected"]))
    log("  rows lost            %d" % c["rows_lost"])
    log("  rows duplicated      %d" % c["rows_duplicated"])
    log("  rows unexpected      %d" % c["rows_unexpected"])
    log("  order violations     %d" % c["order_violations"])
    log("  crashes              %d (controller exits for a lost Lease, by design: %d)" % (
        c["crashes"], c["lease_exits"]))
    log("  hung runs            %d" % c["hung"])
    log("  pipelines with a worker pod Ready > 30 s after its creation: %d" % c["slow_pod_starts"])
    log("  leftover worker pods %d" % c["leftover_pods"])
    for seed, _desc, problems, _ in stats.problems:
        log("  BAD %s: %s" % (seed, "; ".join(problems)[:600]))
    bad = c["bad"] + (1 if interrupted or setup_error else 0)
    log("chaos-cluster: %d passed, %d failed" % (c["pipelines"] - c["bad"], bad))
    return 1 if (bad or c["pipelines"] == 0) else 0


if __name__ == "__main__":
    sys.exit(main())

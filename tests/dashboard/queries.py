#!/usr/bin/env python3
"""The Grafana dashboard's queries, checked (tests/dashboard/test-dashboard.sh runs this).

  queries.py static DASHBOARD METRICS_MD
      every panel has queries; every metric a query names is in docs/metrics.md; counters
      (_total) and histogram series (_bucket/_sum/_count) are used only through rate() or
      increase(); pipeline figures filter on $namespace and $pipeline; every query parses
      (promtool check rules on a rules file made of them). Prints one line per problem.
  queries.py eval DASHBOARD PROMETHEUS_URL PIPELINE [--operator]
      evaluates every query (variables substituted) through Prometheus' HTTP API and fails
      naming each panel whose query returns no series. Panels of the operator's own figures
      (reconciles, work queue, leader, Pipelines by phase) are evaluated only with --operator.
Exit status 0 when nothing is wrong.
"""
import json
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

OPERATOR_METRICS = ("controller_runtime_", "workqueue_", "streambatch_leader", "streambatch_pipelines")
WRAPPERS = ("rate", "increase")


def panels(dash):
    for p in dash.get("panels", []):
        if p.get("type") == "row":
            yield from p.get("panels", [])
        else:
            yield p


def queries(dash):
    for p in panels(dash):
        for t in p.get("targets", []):
            yield p, t.get("expr", "")


def metric_names(expr):
    names = set()
    for m in re.finditer(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{|\[)", expr):
        names.add(m.group(1))
    for m in re.finditer(r"\b((?:streambatch|controller_runtime|workqueue|process)_[a-zA-Z0-9_]*)", expr):
        names.add(m.group(1))
    return {n for n in names if n not in ("sum", "by", "rate", "increase", "histogram_quantile", "max")}


def substitute(expr, pipeline=".*", rate="15s", rng="5m"):
    return (expr.replace("$__rate_interval", rate).replace("$__range", rng)
            .replace("$namespace", ".*").replace("$pipeline", pipeline))


def operator_only(expr):
    return any(m.startswith(OPERATOR_METRICS) for m in metric_names(expr))


def static(dash_path, md_path):
    dash = json.load(open(dash_path))
    documented = set(re.findall(r"`((?:streambatch|controller_runtime|workqueue)_[a-z_]+)`", open(md_path).read()))
    problems = []
    rules = []
    for p in panels(dash):
        if not p.get("targets"):
            problems.append(f"panel '{p.get('title')}': no query")
    for p, expr in queries(dash):
        title = p.get("title")
        for name in metric_names(expr):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            if name not in documented and base not in documented:
                problems.append(f"panel '{title}': {name} is not in docs/metrics.md")
            counter = name.endswith("_total") or re.search(r"_seconds_(bucket|sum|count)$", name)
            if counter:
                for m in re.finditer(re.escape(name), expr):
                    before = expr[:m.start()]
                    inside = [w for w in WRAPPERS if re.search(w + r"\(\s*$", before)]
                    if not inside:
                        problems.append(f"panel '{title}': counter {name} used without rate()/increase()")
            if name.startswith("streambatch_") and not operator_only(expr):
                if 'namespace=~"$namespace"' not in expr or 'pipeline=~"$pipeline"' not in expr:
                    problems.append(f"panel '{title}': {name} does not filter on $namespace and $pipeline")
        rules.append({"record": "streambatch:dashboard:q%d" % len(rules), "expr": substitute(expr)})
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as f:
        json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)  # JSON is YAML
        path = f.name
    r = subprocess.run(["promtool", "check", "rules", path], capture_output=True, text=True)
    if r.returncode != 0:
        problems.append("promtool check rules: " + (r.stdout + r.stderr).strip())
    for line in problems:
        print(line)
    print(f"{len(rules)} queries in {sum(1 for _ in panels(dash))} panels: {len(problems)} problems")
    return 1 if problems else 0


def evaluate(dash_path, url, pipeline, operator):
    dash = json.load(open(dash_path))
    failed = 0
    checked = 0
    for p, expr in queries(dash):
        if operator_only(expr) and not operator:
            continue
        q = substitute(expr, pipeline=pipeline)
        with urllib.request.urlopen(url + "/api/v1/query?" + urllib.parse.urlencode({"query": q}), timeout=10) as r:
            res = json.load(r)
        checked += 1
        n = len(res.get("data", {}).get("result", []))
        if res.get("status") != "success" or n == 0:
            failed += 1
            print(f"NO DATA  panel '{p.get('title')}': {q}")
        else:
            print(f"ok ({n} series)  panel '{p.get('title')}'")
    print(f"{checked} queries evaluated, {failed} without data")
    return 1 if failed or checked == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "static":
        sys.exit(static(sys.argv[2], sys.argv[3]))
    if len(sys.argv) >= 5 and sys.argv[1] == "eval":
        sys.exit(evaluate(sys.argv[2], sys.argv[3].rstrip("/"), sys.argv[4], "--operator" in sys.argv[5:]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)

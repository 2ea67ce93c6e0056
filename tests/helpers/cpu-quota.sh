#!/usr/bin/env bash
# Confines a running process to a CPU quota from outside, as a sick or noisy node would
# (issue 15: stragglers made slow by a cgroup CPU quota instead of SIGSTOP duty cycles).
#   cpu-quota.sh add NAME PERCENT PID   make cgroup NAME with PERCENT% of one CPU (CFS quota,
#                                       100 ms period), move PID (all its threads) into it;
#                                       prints the cgroup's directory
#   cpu-quota.sh remove DIR             SIGKILL what is still in it, then remove it
# cgroup v1's cpu controller (/sys/fs/cgroup/cpu) or cgroup v2 with the cpu controller enabled
# (cpu.max). Exit 3 when neither can be used here (not root, no controller): callers skip.
set -euo pipefail
period=100000
v1=/sys/fs/cgroup/cpu
v2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
case ${1:-} in
  add)
    name=$2 pct=$3 pid=$4
    quota=$((period * pct / 100))
    if [[ -w $v1/cpu.cfs_quota_us || ( -d $v1 && -w $v1 ) ]] && [[ -f $v1/cpu.cfs_quota_us ]]; then
      d=$v1/$name
      mkdir "$d" 2>/dev/null || { echo "cpu-quota: cannot create $d" >&2; exit 3; }
      echo "$period" >"$d/cpu.cfs_period_us" && echo "$quota" >"$d/cpu.cfs_quota_us"
    elif [[ -n $v2 ]] && grep -qw cpu "$v2/cgroup.controllers" 2>/dev/null; then
      grep -qw cpu "$v2/cgroup.subtree_control" 2>/dev/null || echo +cpu >"$v2/cgroup.subtree_control" 2>/dev/null ||
        { echo "cpu-quota: cannot enable the cpu controller in $v2" >&2; exit 3; }
      d=$v2/$name
      mkdir "$d" 2>/dev/null || { echo "cpu-quota: cannot create $d" >&2; exit 3; }
      echo "$quota $period" >"$d/cpu.max"
    else
      echo "cpu-quota: no cgroup cpu controller here" >&2; exit 3
    fi
    echo "$pid" >"$d/cgroup.procs" || { rmdir "$d"; echo "cpu-quota: cannot move $pid" >&2; exit 1; }
    echo "$d"
    ;;
  remove)
    d=$2
    [[ -d $d ]] || exit 0
    for _ in $(seq 50); do # (cgroup files have size 0: read them)
      pids=$(cat "$d/cgroup.procs" 2>/dev/null || true)
      [[ -n $pids ]] || break
      kill -KILL $pids 2>/dev/null || true
      sleep 0.1
    done
    rmdir "$d"
    ;;
  *) echo "usage: $0 add NAME PERCENT PID | remove DIR" >&2; exit 2 ;;
esac

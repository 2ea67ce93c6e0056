# Shell functions the benchmark scripts share; sourced (`. scripts/bench-lib.sh`) from the
# repository root.

# CPU time other tasks waited for over the last 60 s (PSI avg60), and the load average: one
# line for a benchmark's report, before and after it runs.
pressure() {
  local p=""
  [[ -r /proc/pressure/cpu ]] && p=$(awk '/^some/ { sub("avg60=", "", $3); print $3 "%" }' /proc/pressure/cpu)
  echo "CPU pressure ${p:-n/a}, load $(cut -d' ' -f1-3 /proc/loadavg)"
}

# median and range ("lo-hi", 2 decimals) of numbers given as arguments, or one per line on stdin
# when there are none.
median() {
  if (($#)); then printf '%s\n' "$@"; else cat; fi |
    sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}
range() {
  if (($#)); then printf '%s\n' "$@"; else cat; fi |
    sort -g | awk 'NR==1{lo=$1} {hi=$1} END {printf "%.2f-%.2f", lo, hi}'
}

# wall_cpu LOG CMD...: runs CMD (stdout and stderr into LOG) and prints "wall cpu": its wall
# seconds and the CPU seconds (user + sys) of it and the children it waited for. CMD failing:
# LOG's tail on stderr, status 1.
wall_cpu() {
  local log=$1 t
  shift
  t=$( { TIMEFORMAT='%R %U %S'; time "$@" >"$log" 2>&1; } 2>&1 ) || { tail -20 "$log" >&2; return 1; }
  awk '{ printf "%s %.3f\n", $1, $2 + $3 }' <<<"$t"
}

# bench_venv DIR IMPORT PIP-SPEC...: the cached venv DIR (installed once; a failed install says
# so on stderr), then whether its python imports IMPORT (status 0/1).
bench_venv() {
  local d=$1 m=$2 py=$1/bin/python
  shift 2
  if [[ ! -x $py ]] || ! "$py" -c "import $m" 2>/dev/null; then
    echo "bench: installing $* into $d (once)" >&2
    rm -rf "$d"
    { python3 -m venv "$d" && timeout 900 "$d/bin/pip" install -q --disable-pip-version-check "$@"; } >&2 ||
      echo "bench: $* could not be installed; not measured" >&2
  fi
  "$py" -c "import $m" 2>/dev/null
}

# bench_peers NAME SYSTEMS: the peer systems' Python interpreters, from the cached venvs
# (installed once by bench_venv). Sets tool (the Ray venv's python, with numpy and pyarrow, for
# the generators and checks; without it NAME says so and exits), py[SYSTEM] for each of pyarrow,
# ray, duckdb and daft named in SYSTEMS (comma-separated) that is installed, and have: sb, then
# those, in SYSTEMS' order. The caller declares `declare -A py`.
bench_peers() {
  local name=$1 systems=$2 s cache=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch
  have=(sb)
  bench_venv "$cache/bench-ray-venv" 'ray.data, numpy, pyarrow' 'ray[data]>=2.9,<3' ||
    { echo "$name: needs numpy and pyarrow (the Ray venv)" >&2; exit 1; }
  tool=$cache/bench-ray-venv/bin/python
  for s in ${systems//,/ }; do
    case $s in
    pyarrow | ray) py[$s]=$tool ;;
    duckdb) bench_venv "$cache/parquet-venv" duckdb 'pyarrow==26.0.1' 'duckdb==2.0.1' &&
      py[duckdb]=$cache/parquet-venv/bin/python ;;
    daft) bench_venv "$cache/bench-daft-venv" daft 'daft==0.7.26' && py[daft]=$cache/bench-daft-venv/bin/python ;;
    esac
    [[ -n ${py[$s]:-} ]] && have+=("$s")
  done
  return 0
}

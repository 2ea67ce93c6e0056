# Shell functions the benchmark scripts share; sourced (`. scripts/bench-lib.sh`) from the
# repository root.

# CPU time other tasks waited for over the last 60 s (PSI avg60), and the load average: one
# line for a benchmark's report, before and after it runs.
pressure() {
  local p=""
  [[ -r /proc/pressure/cpu ]] && p=$(awk '/^some/ { sub("avg60=", "", $3); print $3 "%" }' /proc/pressure/cpu)
  echo "CPU pressure ${p:-n/a}, load $(cut -d' ' -f1-3 /proc/loadavg)"
}

#!/usr/bin/env bash
# The SHAPE=coarse rounds of bench-stragglers.sh (issue 42), sourced by it after its setup (run,
# $work, $rounds, median, range, sum); prints a markdown section with every run's figure and the
# load average the machine had around each round. Each round's defaults run is also printed at
# once on stderr as one line ("coarse round R/N: defaults X.XXXx the bound ..."), and the last
# line on stderr says how many of them were within 1.15x. ONLY=defaults skips the two ablations
# (none of the mechanisms, no copies): the goal's 5 runs take half the time.
only=${ONLY:-}
[[ -z $only || $only == defaults ]] || { echo "bench: ONLY=defaults or unset" >&2; exit 2; }
z=() h=() b=() o=() n=() a=() oc=() nc=() ac=() kc=() loads=()
for r in $(seq "$rounds"); do
  echo "bench: stragglers (coarse) round $r/$rounds" >&2
  l0=$(cut -d' ' -f1 /proc/loadavg)
  run zero 0 2 "" "$work/p0.yaml"
  read -r fixed _ _ <"$work/res"
  z+=("$fixed")
  run one 0 1
  read -r s _ _ <"$work/res"
  h+=("$s")
  bound=$(awk -v s="$s" -v f="$fixed" 'BEGIN {print f + (s - f) / 1.1}')
  b+=("$bound")
  if [[ -z $only ]]; then
    run off 1 2 tail-sizing,speculation,drain,earliest-finish
    read -r s _ c <"$work/res"
    o+=("$(awk -v s="$s" -v b="$bound" 'BEGIN {printf "%.3f", s / b}')") oc+=("$c")
    run nospec 1 2 speculation
    read -r s _ c <"$work/res"
    n+=("$(awk -v s="$s" -v b="$bound" 'BEGIN {printf "%.3f", s / b}')") nc+=("$c")
  fi
  run all 1 2
  read -r s _ c <"$work/res"
  ratio=$(awk -v s="$s" -v b="$bound" 'BEGIN {printf "%.3f", s / b}')
  a+=("$ratio") ac+=("$c")
  k=$(python3 -c 'import json, sys; print(sum(x.get("cancelled", 0) for x in json.load(open(sys.argv[1]))["stages"]))' "$work/all.json")
  pw=$(python3 -c 'import json, sys; print("%.2f" % json.load(open(sys.argv[1]))["wallSeconds"])' "$work/all.json")
  kc+=("$k")
  loads+=("$l0-$(cut -d' ' -f1 /proc/loadavg)")
  printf 'coarse round %d/%d: defaults %sx the bound (%.2f s, the pipeline itself %s s; bound %.2f s = F %.2f + (one worker %.2f - F) / 1.1; %s cop%s, %s cancelled; load %s)\n' \
    "$r" "$rounds" "$ratio" "$s" "$pw" "$bound" "$fixed" "${h[-1]}" "$c" "$([[ $c == 1 ]] && echo y || echo ies)" "$k" "${loads[-1]}" >&2
done
within=$(printf '%s\n' "${a[@]}" | awk '$1 <= 1.15 {k++} END {print k + 0}')
echo "coarse: $within of $rounds within 1.15x of the bound (defaults: ${a[*]})" >&2
echo
echo "## A sick worker, coarse tasks (scripts/bench-stragglers.sh, SHAPE=coarse; issue 42)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs shared with other work; $rounds rounds, each"
echo "round's runs back to back, whole processes, outputs checked equal. $mb MiB of jsonl in 8"
echo "files (partitionSize $psize: one task per file) -> bench.spin ($ms_per_mb ms of CPU per MB,"
echo "about 1 s a task) -> jsonl, one op that writes the sink, --cpus 2: 4 tasks per worker. One"
echo "worker stopped with SIGSTOP 180 ms of every 200 ms from its start (10x slower)."
echo "Bound = F + W / 1.1, F the time of the same pipeline with no work (msPerMB 0), F + W that of"
echo "one healthy worker alone. Every run's time / bound, in round order; copies summed."
echo
echo "| run | per round | median | copies |"
echo "|---|---|---|---|"
printf '| fixed cost F (no work), s | %s | %.2f | |\n' "${z[*]}" "$(median "${z[@]}")"
printf '| one healthy worker alone, s | %s | %.2f | |\n' "${h[*]}" "$(median "${h[@]}")"
printf '| bound, s | %s | %.2f | |\n' "$(printf '%.2f ' "${b[@]}")" "$(median "${b[@]}")"
if [[ -z $only ]]; then
  printf '| throttled, SB_SCHED_OFF=tail-sizing,speculation,drain,earliest-finish | %s | %.2f | %s |\n' \
    "${o[*]}" "$(median "${o[@]}")" "$(sum "${oc[@]}")"
  printf '| throttled, no copies (SB_SCHED_OFF=speculation; as before issue 42) | %s | %.2f | %s |\n' \
    "${n[*]}" "$(median "${n[@]}")" "$(sum "${nc[@]}")"
fi
printf '| throttled, defaults | %s | %.2f | %s |\n' "${a[*]}" "$(median "${a[@]}")" "$(sum "${ac[@]}")"
echo
echo "Losing attempts cancelled in the defaults runs: ${kc[*]}. Load average (1 min) at the start"
echo "and end of each round: ${loads[*]}. Goal (issue 42): the defaults within 1.15x of the bound"
echo "in every run: $within of $rounds within 1.15x."

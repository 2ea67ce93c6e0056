# shellcheck shell=bash
# 10-readme-path.sh — a case file of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), sourced after the suite's release is installed. Issue 38, item 4:
# `helm test` passes with the README's own values on the project's cluster. The values are read
# from README.md's "Try it locally" (its `helm install` line: whatever it sets, the rest are the
# chart's defaults, so the images are streambatch/controller, streambatch/worker at the chart's
# appVersion, which the cluster's image table must run as containers of our images). The
# suite's release is upgraded to exactly those values (a second release would be a second
# operator acting on the same Pipelines, and the CRD belongs to the first), its controller pods
# are checked to run the README's image in containers as uid 65532, `helm test` must pass, and
# the suite's own values are put back.
# Uses the suite's helpers (opcheck, in_container, pod_pid, controller_pods, figure).

README_VALUES=()
readme_values() { # the README's helm install line -> README_VALUES (its --set/-f arguments)
  local line
  line=$(awk '/^## Try it locally/ {on = 1; next} /^## / {on = 0} on && /^helm install / {print; exit}' "$repo/README.md")
  [[ -n $line ]] || { echo "README.md has no 'helm install' line under '## Try it locally'"; return 1; }
  echo "README: $line"
  line=${line%%#*}
  local -a w; read -r -a w <<<"$line"
  local i=4 # helm install NAME CHART ...
  [[ ${w[3]} == helm/streambatch ]] || { echo "the README installs ${w[3]}, not helm/streambatch"; return 1; }
  while ((i < ${#w[@]})); do
    case ${w[i]} in
      -n | --namespace) i=$((i + 2)) ;;
      --create-namespace | --wait) i=$((i + 1)) ;;
      --set | --set-string | -f | --values) README_VALUES+=("${w[i]}" "${w[i + 1]}"); i=$((i + 2)) ;;
      *) echo "the README's helm install has '${w[i]}', which this test does not know"; return 1 ;;
    esac
  done
  # what only the tests knew (issue 38): the README must not need it
  [[ " ${README_VALUES[*]} " != *sb-oci* ]] || { echo "the README still needs the tests' sb-oci images"; return 1; }
  local shown="the defaults of the chart"; ((${#README_VALUES[@]})) && shown="${README_VALUES[*]}"; echo "the README's values: $shown"
}

readme_pods_only() { # every controller pod runs the README's image
  local imgs
  imgs=$(kubectl -n "$SYS" get pods -l app.kubernetes.io/name=streambatch-controller \
    -o 'jsonpath={range .items[*]}{.spec.containers[0].image}{"\n"}{end}') || return 1
  [[ -n $imgs ]] && ! grep -qv '^streambatch/controller:' <<<"$imgs"
}
readme_helm_test() {
  readme_values || return 1
  # the suite's image table must run the README's images (streambatch/*) as our containers
  grep -qE '^(\*/)?streambatch/\*[[:space:]]+oci:' "${SB_K8S_IMAGES:-$repo/tests/k8s/images.conf}" || {
    echo "the cluster's image table ($SB_K8S_IMAGES) has no 'streambatch/* oci:...' rule: the README's images would stay ErrImagePull"
    return 1
  }
  local t0 rc=0 p pid img
  t0=$(now)
  helm upgrade "$REL" "$CHART" -n "$SYS" --reset-values "${README_VALUES[@]}" >/dev/null || return 1
  kubectl -n "$SYS" rollout status "deployment/$DEPLOY" --timeout=120s || rc=1
  # rollout status returns while the old pods still terminate: wait until they are gone
  if ((rc == 0)) && ! until_ok 90 readme_pods_only; then
    echo "old controller pods still there: $(controller_pods)"; rc=1
  fi
  if ((rc == 0)); then
    for p in $(controller_pods); do
      img=$(kubectl -n "$SYS" get pod "$p" -o 'jsonpath={.spec.containers[0].image}')
      [[ $img == streambatch/controller:* ]] || { echo "$p runs $img, not the README's streambatch/controller"; rc=1; }
      until_ok 30 pod_pid "$SYS" "$p" controller >/dev/null || { echo "$p: no process"; rc=1; continue; }
      pid=$(pod_pid "$SYS" "$p" controller)
      in_container "$pid" streambatch-controller || rc=1
    done
  fi
  if ((rc == 0)); then
    helm test "$REL" -n "$SYS" --timeout 180s >"$tmp/readme-test.out" 2>&1 || { cat "$tmp/readme-test.out"; rc=1; }
    cat $(ls -t "$STATE"/pods/"${SYS}_$DEPLOY"-test_*/test.log 2>/dev/null | head -n 1) 2>/dev/null | tail -4
    grep -q "Phase: *Succeeded" "$tmp/readme-test.out" || { echo "helm test did not report Phase Succeeded"; rc=1; }
    figure "README path: helm upgrade to the README's values + helm test: $(since "$t0") s"
  fi
  # the suite's own values again, whatever happened
  helm upgrade "$REL" "$CHART" -n "$SYS" --reset-values "${HELM_IMAGES[@]}" \
    --set controller.maxPendingPods="$MAX_PENDING" >/dev/null &&
    kubectl -n "$SYS" rollout status "deployment/$DEPLOY" --timeout=120s >/dev/null ||
    { echo "putting the suite's values back failed"; rc=1; }
  return "$rc"
}
opcheck "r10: helm test passes with the README's own values (its images as containers, uid 65532)" readme_helm_test

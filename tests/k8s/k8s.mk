# tests/k8s/k8s.mk - the local Kubernetes test cluster (included by the top Makefile).
#   make k8s-build     build and cache etcd, kube-apiserver/-controller-manager/-scheduler,
#                      kubectl, helm and sb-node-agent (first run: minutes; then instant)
#   make cluster-up    start a cluster; state in $${STREAMBATCH_CLUSTER_DIR:-/tmp/streambatch-cluster}
#   make cluster-down  stop it (only the processes cluster-up started) and remove the state
#   make minio-up      MinIO on 127.0.0.1 for that cluster's Pipelines (scripts/minio-local.sh):
#                      prints endpoint and credentials; make minio-down stops it
#   make k8s-selftest  start a private cluster, check it works, stop it (part of `make test`)
#   make k8s-operator-test  the operator end to end: helm install of helm/streambatch on a
#                      private cluster, Pipelines applied with kubectl (part of `make test`)
#   make k8s-lifecycle-test  the same setup, then the case files tests/k8s/lifecycle/NN-*.sh:
#                      what a user meets around a run (failures, checkpoints at scale, the
#                      README's path, uninstall) (part of `make test`)
#   make chaos-cluster DURATION=S  the chaos run on a private cluster: Pipelines on the operator
#                      under pod deletion, worker and leader kills, API server restarts
#                      (scripts/chaos-cluster.sh); chaos-cluster-test (2 minutes) in `make test`
#   make chart-crd     copy api/crd/pipelines.streambatch.dev.yaml into the Helm chart's crd/
#                      and deploy/grafana/streambatch.json into its dashboards/ (the operator
#                      and dashboard tests fail when a copy differs)
# See docs/testing.md.
K8S_DIR := tests/k8s

.PHONY: k8s-build cluster-up cluster-down cluster-status k8s-selftest k8s-operator-test chart-crd
k8s-build:
	@$(K8S_DIR)/build.sh
cluster-up: k8s-build
	@$(K8S_DIR)/cluster.sh up
cluster-down:
	@$(K8S_DIR)/cluster.sh down
cluster-status:
	@$(K8S_DIR)/cluster.sh status
# MinIO beside the cluster (README "Try it locally"): bucket demo with sample input, endpoint and
# credentials printed; state under the cluster dir; minio-down stops only the server it started
.PHONY: minio-up minio-down
minio-up:
	@scripts/minio-local.sh up
minio-down:
	@scripts/minio-local.sh down
k8s-selftest: k8s-build
	@$(K8S_DIR)/selftest.sh
# The chart carries its own copy of the CRD (crd/, rendered by templates/crd.yaml); the
# source of truth is api/crd/.
CHART_CRD := helm/streambatch/crd/pipelines.streambatch.dev.yaml
chart-crd:
	@cp api/crd/pipelines.streambatch.dev.yaml $(CHART_CRD) && echo "  CRD    $(CHART_CRD)"
	@cp deploy/grafana/streambatch.json helm/streambatch/dashboards/streambatch.json && \
	  echo "  DASH   helm/streambatch/dashboards/streambatch.json"
k8s-operator-test: k8s-build build
	@$(K8S_DIR)/operator-test.sh
.PHONY: k8s-lifecycle-test
k8s-lifecycle-test: k8s-build build
	@SB_OPTEST_SUITE=lifecycle $(K8S_DIR)/operator-test.sh
CHAOS_CLUSTER_TEST_DURATION ?= 120
.PHONY: chaos-cluster chaos-cluster-test
chaos-cluster: k8s-build build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/chaos-cluster.sh $(DURATION)
chaos-cluster-test: k8s-build build
	@SB_BIN_DIR=$(abspath $(BINDIR)) scripts/chaos-cluster.sh $(CHAOS_CLUSTER_TEST_DURATION)

# `make test` builds first (outside the per-suite time limit: a cold build takes minutes),
# then runs the self-test as one of the slower suites.
BUILD_EXTRA += k8s-build
TEST_EXTRA += k8s-selftest k8s-operator-test k8s-lifecycle-test chaos-cluster-test

# tests/k8s/k8s.mk - the local Kubernetes test cluster (included by the top Makefile).
#   make k8s-build     build and cache etcd, kube-apiserver/-controller-manager/-scheduler,
#                      kubectl, helm and sb-node-agent (first run: minutes; then instant)
#   make cluster-up    start a cluster; state in $${STREAMBATCH_CLUSTER_DIR:-/tmp/streambatch-cluster}
#   make cluster-down  stop it (only the processes cluster-up started) and remove the state
#   make k8s-selftest  start a private cluster, check it works, stop it (part of `make test`)
# See docs/testing.md.
K8S_DIR := tests/k8s

.PHONY: k8s-build cluster-up cluster-down cluster-status k8s-selftest
k8s-build:
	@$(K8S_DIR)/build.sh
cluster-up: k8s-build
	@$(K8S_DIR)/cluster.sh up
cluster-down:
	@$(K8S_DIR)/cluster.sh down
cluster-status:
	@$(K8S_DIR)/cluster.sh status
k8s-selftest: k8s-build
	@$(K8S_DIR)/selftest.sh

# `make test` builds first (outside the per-suite time limit: a cold build takes minutes),
# then runs the self-test as one of the slower suites.
BUILD_EXTRA += k8s-build
TEST_EXTRA += k8s-selftest

package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

const (
	heartbeatEvery = 10 * time.Second
	leaseSeconds   = 40
	kubeletVersion = "v1.35.4" // matches the control plane built next to the agent
)

type nodeSpec struct {
	name     string
	capacity v1.ResourceList
	labels   map[string]string
}

// parseNodeSpec reads "name=N,cpu=4,memory=16Gi,nvidia.com/gpu=1,label:KEY=VALUE".
// "pods" defaults to 110 as on a kubelet.
func parseNodeSpec(s string) (*nodeSpec, error) {
	n := &nodeSpec{capacity: v1.ResourceList{}, labels: map[string]string{}}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("node spec %q: %q is not KEY=VALUE", s, kv)
		}
		switch {
		case k == "name":
			n.name = v
		case strings.HasPrefix(k, "label:"):
			n.labels[strings.TrimPrefix(k, "label:")] = v
		default:
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("node spec %q: %s: %v", s, k, err)
			}
			n.capacity[v1.ResourceName(k)] = q
		}
	}
	if n.name == "" {
		return nil, fmt.Errorf("node spec %q has no name=", s)
	}
	if _, ok := n.capacity[v1.ResourcePods]; !ok {
		n.capacity[v1.ResourcePods] = resource.MustParse("110")
	}
	if _, ok := n.capacity[v1.ResourceEphemeralStorage]; !ok {
		n.capacity[v1.ResourceEphemeralStorage] = resource.MustParse("100Gi")
	}
	return n, nil
}

func (n *nodeSpec) object() *v1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": n.name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     runtime.GOARCH,
		"beta.kubernetes.io/os":  "linux",
		"streambatch.dev/agent":  "sb-node-agent",
	}
	for k, v := range n.labels {
		labels[k] = v
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: labels},
		Status:     n.status(),
	}
}

func (n *nodeSpec) status() v1.NodeStatus {
	now := metav1.Now()
	cond := func(t v1.NodeConditionType, st v1.ConditionStatus, reason, msg string) v1.NodeCondition {
		return v1.NodeCondition{Type: t, Status: st, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	host, _ := os.Hostname()
	return v1.NodeStatus{
		Capacity:    n.capacity.DeepCopy(),
		Allocatable: n.capacity.DeepCopy(),
		Phase:       v1.NodeRunning,
		Conditions: []v1.NodeCondition{
			cond(v1.NodeMemoryPressure, v1.ConditionFalse, "KubeletHasSufficientMemory", "sb-node-agent declares its capacity"),
			cond(v1.NodeDiskPressure, v1.ConditionFalse, "KubeletHasNoDiskPressure", "sb-node-agent declares its capacity"),
			cond(v1.NodePIDPressure, v1.ConditionFalse, "KubeletHasSufficientPID", "sb-node-agent declares its capacity"),
			cond(v1.NodeReady, v1.ConditionTrue, "KubeletReady", "sb-node-agent is posting ready status"),
		},
		Addresses: []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "127.0.0.1"}, {Type: v1.NodeHostName, Address: n.name}},
		NodeInfo: v1.NodeSystemInfo{
			MachineID: "sb-" + n.name, SystemUUID: "sb-" + n.name, BootID: host,
			KernelVersion: "local", OSImage: "sb-node-agent (local processes)",
			ContainerRuntimeVersion: "sb-node-agent://1", KubeletVersion: kubeletVersion,
			KubeProxyVersion: kubeletVersion, OperatingSystem: "linux", Architecture: runtime.GOARCH,
		},
	}
}

// mergeConditions keeps each condition's transition time when its status did not change.
func mergeConditions(old, cur []v1.NodeCondition) []v1.NodeCondition {
	for i := range cur {
		for _, o := range old {
			if o.Type == cur[i].Type && o.Status == cur[i].Status {
				cur[i].LastTransitionTime = o.LastTransitionTime
			}
		}
	}
	return cur
}

func (a *agent) registerNode(ctx context.Context, n *nodeSpec) error {
	obj := n.object()
	_, err := a.cs.CoreV1().Nodes().Create(ctx, obj, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := a.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for k, v := range obj.Labels {
				if cur.Labels == nil {
					cur.Labels = map[string]string{}
				}
				cur.Labels[k] = v
			}
			cur, err = a.cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{})
			if err != nil {
				return err
			}
			st := n.status()
			st.Conditions = mergeConditions(cur.Status.Conditions, st.Conditions)
			cur.Status = st
			_, err = a.cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
	}
	if err != nil {
		return err
	}
	return a.renewLease(ctx, n)
}

func (a *agent) renewLease(ctx context.Context, n *nodeSpec) error {
	leases := a.cs.CoordinationV1().Leases(v1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, n.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		node, err := a.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		l = &coordv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: n.name, Namespace: v1.NamespaceNodeLease,
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}},
			Spec: coordv1.LeaseSpec{HolderIdentity: ptr.To(n.name), LeaseDurationSeconds: ptr.To(int32(leaseSeconds)), RenewTime: &now},
		}
		_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	l.Spec.HolderIdentity = ptr.To(n.name)
	l.Spec.LeaseDurationSeconds = ptr.To(int32(leaseSeconds))
	l.Spec.RenewTime = &now
	_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	return err
}

// heartbeat renews the node lease and the Ready condition's heartbeat, as a kubelet does.
func (a *agent) heartbeat(ctx context.Context, n *nodeSpec) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.renewLease(ctx, n); err != nil && ctx.Err() == nil {
			klog.Warningf("node %s: lease: %v", n.name, err)
		}
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			cur, err := a.cs.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				_, err = a.cs.CoreV1().Nodes().Create(ctx, n.object(), metav1.CreateOptions{})
				return err
			}
			if err != nil {
				return err
			}
			st := n.status()
			st.Conditions = mergeConditions(cur.Status.Conditions, st.Conditions)
			st.Images = cur.Status.Images
			cur.Status = st
			_, err = a.cs.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil && ctx.Err() == nil {
			klog.Warningf("node %s: status: %v", n.name, err)
		}
	}
}

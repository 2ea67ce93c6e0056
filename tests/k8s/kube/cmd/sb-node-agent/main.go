// sb-node-agent stands in for the kubelet in the streambatch test cluster (no container
// runtime here): it registers Nodes with declared capacity, keeps them Ready through node
// leases and status heartbeats, and runs every pod bound to its nodes as local processes.
//
//	sb-node-agent --kubeconfig K --ca-file CA --state-dir DIR --images TABLE \
//	   --node name=sb-cpu-0,cpu=4,memory=16Gi --node name=sb-gpu-0,cpu=4,memory=16Gi,nvidia.com/gpu=1
//
// See docs/testing.md for the image table, pod IPs and how pods reach the API server.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(s string) error { *m = append(*m, s); return nil }

type agent struct {
	cs         kubernetes.Interface
	nodes      map[string]*nodeSpec
	images     []imageRule
	stateDir   string
	caPEM      []byte
	apiHost    string
	apiPort    string
	backoff    time.Duration
	maxBackoff time.Duration
	ctx        context.Context // cancelled when the agent shuts down

	mu    sync.Mutex
	pods  map[types.UID]*podRunner
	ended map[types.UID]time.Time // pods whose runner has finished: late events are ignored
	ips   map[string]types.UID
	ipSeq int
	wg    sync.WaitGroup
}

func main() {
	var nodeSpecs multiFlag
	kubeconfig := flag.String("kubeconfig", "", "admin kubeconfig the agent uses")
	caFile := flag.String("ca-file", "", "cluster CA certificate, written as ca.crt for pods")
	stateDir := flag.String("state-dir", "", "cluster state directory (pods/ is created below it)")
	imagesFile := flag.String("images", "", "image table: lines 'IMAGE-PATTERN PROGRAM [ARG...]'")
	backoff := flag.Duration("restart-backoff", time.Second, "first container restart delay (doubles)")
	maxBackoff := flag.Duration("max-restart-backoff", 20*time.Second, "longest container restart delay")
	ipBlock := flag.Int("pod-ip-block", 0, "pod IPs start at 127.0.BLOCK.2 (0-249); clusters running side by side use different blocks")
	flag.BoolVar(&cpuCFSQuota, "cpu-cfs-quota", false, "enforce containers' limits.cpu as a CFS quota (kubelet's flag; off: the suites' timings were measured without it)")
	flag.Var(&nodeSpecs, "node", "node to register: name=N,RESOURCE=QTY,...,label:KEY=VALUE (repeatable)")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *stateDir == "" || *imagesFile == "" || *caFile == "" {
		fmt.Fprintln(os.Stderr, "sb-node-agent: --kubeconfig, --ca-file, --state-dir and --images are required")
		os.Exit(2)
	}
	if len(nodeSpecs) == 0 {
		nodeSpecs = multiFlag{"name=sb-cpu-0,cpu=4,memory=16Gi",
			"name=sb-gpu-0,cpu=4,memory=16Gi,nvidia.com/gpu=1,label:streambatch.dev/gpu=true"}
	}
	if *ipBlock < 0 || *ipBlock > 249 {
		fmt.Fprintln(os.Stderr, "sb-node-agent: --pod-ip-block must be 0-249")
		os.Exit(2)
	}
	if err := run(*kubeconfig, *caFile, *stateDir, *imagesFile, nodeSpecs, *backoff, *maxBackoff, *ipBlock); err != nil {
		fmt.Fprintln(os.Stderr, "sb-node-agent:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, caFile, stateDir, imagesFile string, nodeSpecs []string, backoff, maxBackoff time.Duration, ipBlock int) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 50, 100
	cfg.UserAgent = "sb-node-agent"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return fmt.Errorf("server %q: %v", cfg.Host, err)
	}
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	images, err := loadImages(imagesFile)
	if err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	a := &agent{cs: cs, nodes: map[string]*nodeSpec{}, images: images, stateDir: stateDir, caPEM: caPEM,
		apiHost: host, apiPort: port, backoff: backoff, maxBackoff: maxBackoff, ctx: ctx,
		pods: map[types.UID]*podRunner{}, ended: map[types.UID]time.Time{}, ips: map[string]types.UID{},
		ipSeq: ipBlock * 253}
	for _, s := range nodeSpecs {
		n, err := parseNodeSpec(s)
		if err != nil {
			return err
		}
		a.nodes[n.name] = n
	}
	if err := os.MkdirAll(filepath.Join(stateDir, "pods"), 0o755); err != nil {
		return err
	}
	for _, n := range a.nodes {
		if err := a.registerNode(ctx, n); err != nil {
			return fmt.Errorf("register node %s: %v", n.name, err)
		}
		go a.heartbeat(ctx, n)
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o interface{}) { a.podChanged(o.(*v1.Pod)) },
		UpdateFunc: func(_, o interface{}) { a.podChanged(o.(*v1.Pod)) },
		DeleteFunc: func(o interface{}) {
			if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				o = t.Obj
			}
			if p, ok := o.(*v1.Pod); ok {
				a.podGone(p)
			}
		},
	})
	factory.Start(ctx.Done())
	klog.Infof("sb-node-agent: %d node(s) registered, api server %s:%s", len(a.nodes), host, port)
	fmt.Println("sb-node-agent ready")
	<-ctx.Done()
	klog.Info("sb-node-agent: shutting down, stopping pod processes")
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		klog.Warning("sb-node-agent: pod processes still running after 15s")
	}
	return nil
}

func (a *agent) podChanged(p *v1.Pod) {
	if _, ours := a.nodes[p.Spec.NodeName]; !ours {
		return
	}
	a.mu.Lock()
	if _, done := a.ended[p.UID]; done {
		a.mu.Unlock()
		return
	}
	r := a.pods[p.UID]
	if r == nil {
		r = newPodRunner(a, p)
		a.pods[p.UID] = r
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			r.run()
			a.mu.Lock()
			delete(a.pods, p.UID)
			for uid, t := range a.ended {
				if time.Since(t) > 10*time.Minute {
					delete(a.ended, uid)
				}
			}
			a.ended[p.UID] = time.Now()
			a.mu.Unlock()
		}()
	}
	a.mu.Unlock()
	r.update(p, false)
}

func (a *agent) podGone(p *v1.Pod) {
	a.mu.Lock()
	r := a.pods[p.UID]
	a.mu.Unlock()
	if r != nil {
		r.update(p, true)
	}
}

// allocIP hands out the next free loopback address 127.0.X.Y (Y 2..254, from 127.0.BLOCK.2 on), cycling
// so that a freed address is not reused at once.
func (a *agent) allocIP(uid types.UID) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	const n = 253 * 250
	for i := 0; i < n; i++ {
		k := (a.ipSeq + i) % n
		ip := fmt.Sprintf("127.0.%d.%d", k/253, 2+k%253)
		if _, used := a.ips[ip]; !used {
			a.ipSeq = (k + 1) % n
			a.ips[ip] = uid
			return ip
		}
	}
	return "127.0.0.1"
}

func (a *agent) freeIP(ip string, uid types.UID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ips[ip] == uid {
		delete(a.ips, ip)
	}
}

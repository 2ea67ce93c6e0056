package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// ctr is the agent's view of one container of a pod (guarded by podRunner.mu).
type ctr struct {
	spec     v1.Container
	init     bool
	state    v1.ContainerState
	last     v1.ContainerState
	restarts int32
	ready    bool
	started  bool
	image    string  // program that stands for the image
	img      *ociImg // the OCI image it runs from, when the image table says oci:
	cid      string  // containerID of the running instance
	logPath  string
}

// podRunner owns the processes of one pod, from its binding to the deletion of its object.
type podRunner struct {
	a    *agent
	uid  types.UID
	ns   string
	name string

	stopCh   chan struct{} // closed once deletion is requested or the object is gone
	stopOnce sync.Once
	changed  chan struct{} // status needs writing
	done     chan struct{} // run() returned

	mu        sync.Mutex
	pod       *v1.Pod // newest object seen (informer or our own writes)
	gone      bool
	podIP     string
	dir       string
	saDir     string
	startTime metav1.Time
	setupDone bool
	initDone  bool
	phase     v1.PodPhase // terminal phase, once decided
	inits     []*ctr
	ctrs      []*ctr

	syncMu sync.Mutex
}

func newPodRunner(a *agent, p *v1.Pod) *podRunner {
	r := &podRunner{a: a, uid: p.UID, ns: p.Namespace, name: p.Name, pod: p,
		stopCh: make(chan struct{}), changed: make(chan struct{}, 1), done: make(chan struct{}),
		startTime: now()}
	if p.DeletionTimestamp != nil {
		close(r.stopCh)
		r.stopOnce.Do(func() {})
	}
	r.dir = filepath.Join(a.stateDir, "pods", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, string(p.UID)[:8]))
	for _, c := range p.Spec.InitContainers {
		r.inits = append(r.inits, &ctr{spec: c, init: true, logPath: filepath.Join(r.dir, c.Name+".log"),
			state: waiting("PodInitializing", "")})
	}
	for _, c := range p.Spec.Containers {
		st := waiting("ContainerCreating", "")
		if len(p.Spec.InitContainers) > 0 {
			st = waiting("PodInitializing", "")
		}
		r.ctrs = append(r.ctrs, &ctr{spec: c, logPath: filepath.Join(r.dir, c.Name+".log"), state: st})
	}
	return r
}

func waiting(reason, msg string) v1.ContainerState {
	return v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason, Message: msg}}
}

func rvNewer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 != nil || err2 != nil || x >= y
}

func (r *podRunner) update(p *v1.Pod, gone bool) {
	r.mu.Lock()
	if gone {
		r.gone = true
	} else if rvNewer(p.ResourceVersion, r.pod.ResourceVersion) {
		r.pod = p
	}
	stop := gone || p.DeletionTimestamp != nil
	r.mu.Unlock()
	if stop {
		r.stopOnce.Do(func() { close(r.stopCh) })
	}
}

func (r *podRunner) latest() *v1.Pod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pod
}

func (r *podRunner) stopping() bool {
	select {
	case <-r.stopCh:
		return true
	case <-r.a.ctx.Done():
		return true
	default:
		return false
	}
}

// sleep waits d unless the pod is being stopped; it reports whether it slept the whole time.
func (r *podRunner) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stopCh:
		return false
	case <-r.a.ctx.Done():
		return false
	}
}

func (r *podRunner) kick() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *podRunner) set(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	r.kick()
}

func (r *podRunner) run() {
	defer close(r.done)
	p := r.latest()
	if p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
		// Finished before this agent started: nothing to run, only the deletion to complete.
		r.phase = p.Status.Phase
		select {
		case <-r.stopCh:
			r.finish()
		case <-r.a.ctx.Done():
		}
		return
	}
	go r.statusLoop()
	if p.Spec.HostNetwork {
		r.podIP = "127.0.0.1"
	} else {
		r.podIP = r.a.allocIP(r.uid)
		defer r.a.freeIP(r.podIP, r.uid)
	}
	klog.Infof("pod %s/%s: bound to %s, pod IP %s", r.ns, r.name, p.Spec.NodeName, r.podIP)
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		klog.Errorf("pod %s/%s: %v", r.ns, r.name, err)
	}
	if r.setupToken(p) {
		r.set(func() { r.setupDone = true })
		if r.runInits(p) {
			r.runMain(p)
		}
	}
	if !r.stopping() {
		// Terminal: keep the status until the pod object is deleted.
		select {
		case <-r.stopCh:
		case <-r.a.ctx.Done():
		}
	}
	r.finish()
}

// finish completes a deletion the way the kubelet does: once no process is left, write the
// final status and delete the object with grace period 0.
func (r *podRunner) finish() {
	if r.a.ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	gone := r.gone
	if r.phase == "" {
		r.phase = v1.PodFailed
		ok := len(r.ctrs) > 0
		for _, c := range r.ctrs {
			if c.state.Terminated == nil || c.state.Terminated.ExitCode != 0 {
				ok = false
			}
		}
		if ok {
			r.phase = v1.PodSucceeded
		}
	}
	for _, c := range append(append([]*ctr{}, r.inits...), r.ctrs...) {
		c.ready = false
		if c.state.Terminated == nil && !c.init {
			c.state = v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137,
				Reason: "ContainerStatusUnknown", Message: "The container could not be located when the pod was deleted",
				FinishedAt: now()}}
		}
	}
	r.mu.Unlock()
	if gone {
		return
	}
	r.syncStatus()
	ctx, cancel := context.WithTimeout(r.a.ctx, 30*time.Second)
	defer cancel()
	err := r.a.cs.CoreV1().Pods(r.ns).Delete(ctx, r.name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &r.uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		klog.Errorf("pod %s/%s: delete: %v", r.ns, r.name, err)
	} else {
		klog.Infof("pod %s/%s: processes ended, pod object deleted", r.ns, r.name)
	}
}

// setupToken writes ca.crt, namespace and a bound service-account token (TokenRequest API)
// into <pod dir>/serviceaccount when the pod mounts a service-account token (the
// ServiceAccount admission plugin adds that volume unless automounting is off), and keeps
// the token fresh. It reports false if the pod was stopped before that worked.
func (r *podRunner) setupToken(p *v1.Pod) bool {
	var src *v1.ServiceAccountTokenProjection
	for _, vol := range p.Spec.Volumes {
		if vol.Projected == nil {
			continue
		}
		for _, s := range vol.Projected.Sources {
			if s.ServiceAccountToken != nil {
				src = s.ServiceAccountToken
			}
		}
	}
	if src == nil {
		return true
	}
	dir := filepath.Join(r.dir, "serviceaccount")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		klog.Errorf("pod %s/%s: %v", r.ns, r.name, err)
	}
	_ = writeAtomic(filepath.Join(dir, "ca.crt"), r.a.caPEM)
	_ = writeAtomic(filepath.Join(dir, "namespace"), []byte(p.Namespace))
	delay := r.a.backoff
	for {
		exp, err := r.requestToken(p, src, dir)
		if err == nil {
			r.mu.Lock()
			r.saDir = dir
			r.mu.Unlock()
			go r.refreshToken(p, src, dir, exp)
			return true
		}
		klog.Warningf("pod %s/%s: service account token: %v", r.ns, r.name, err)
		r.set(func() {
			for _, c := range append(append([]*ctr{}, r.inits...), r.ctrs...) {
				c.state = waiting("CreateContainerConfigError", "service account token: "+err.Error())
			}
		})
		if !r.sleep(delay) {
			return false
		}
		delay = min(2*delay, r.a.maxBackoff)
	}
}

func (r *podRunner) requestToken(p *v1.Pod, src *v1.ServiceAccountTokenProjection, dir string) (time.Time, error) {
	var aud []string
	if src.Audience != "" {
		aud = []string{src.Audience}
	}
	exp := int64(3607)
	if src.ExpirationSeconds != nil {
		exp = *src.ExpirationSeconds
	}
	sa := p.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ctx, cancel := context.WithTimeout(r.a.ctx, 15*time.Second)
	defer cancel()
	tr, err := r.a.cs.CoreV1().ServiceAccounts(p.Namespace).CreateToken(ctx, sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{Audiences: aud, ExpirationSeconds: &exp,
			BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}},
	}, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, err
	}
	return tr.Status.ExpirationTimestamp.Time, writeAtomic(filepath.Join(dir, "token"), []byte(tr.Status.Token))
}

// refreshToken renews the token once 80% of its lifetime has passed, as the kubelet does.
func (r *podRunner) refreshToken(p *v1.Pod, src *v1.ServiceAccountTokenProjection, dir string, exp time.Time) {
	for {
		wait := time.Until(exp) * 4 / 5
		if wait < time.Second {
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.done:
			t.Stop()
			return
		case <-r.stopCh:
			t.Stop()
			return
		}
		e, err := r.requestToken(p, src, dir)
		if err != nil {
			klog.Warningf("pod %s/%s: refreshing token: %v", r.ns, r.name, err)
			exp = time.Now().Add(10 * time.Second)
			continue
		}
		exp = e
	}
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// runInits runs the init containers one after another; false if the pod must not go on.
func (r *podRunner) runInits(p *v1.Pod) bool {
	policy := v1.RestartPolicyOnFailure
	if p.Spec.RestartPolicy == v1.RestartPolicyNever {
		policy = v1.RestartPolicyNever
	}
	for _, c := range r.inits {
		code, stopped := r.containerLoop(c, policy)
		if stopped {
			return false
		}
		if code != 0 {
			r.set(func() { r.phase = v1.PodFailed })
			return false
		}
	}
	r.set(func() {
		r.initDone = true
		for _, c := range r.ctrs {
			c.state = waiting("ContainerCreating", "")
		}
	})
	return true
}

// runMain runs all app containers at once and returns when none will run again.
func (r *podRunner) runMain(p *v1.Pod) {
	policy := p.Spec.RestartPolicy
	if policy == "" {
		policy = v1.RestartPolicyAlways
	}
	codes := make([]int32, len(r.ctrs))
	var wg sync.WaitGroup
	for i, c := range r.ctrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = r.containerLoop(c, policy)
		}()
	}
	wg.Wait()
	if r.stopping() {
		return
	}
	phase := v1.PodSucceeded
	for _, code := range codes {
		if code != 0 {
			phase = v1.PodFailed
		}
	}
	klog.Infof("pod %s/%s: all containers exited, phase %s", r.ns, r.name, phase)
	r.set(func() { r.phase = phase })
}

// containerLoop starts the container, and restarts it (with back-off) as policy says.
// It returns the last exit code and whether it ended because the pod is being stopped.
func (r *podRunner) containerLoop(c *ctr, policy v1.RestartPolicy) (int32, bool) {
	delay := r.a.backoff
	var code int32 = -1
	for {
		if r.stopping() {
			return code, true
		}
		argv, env, dir, reason, err := r.prepare(c)
		if err != nil {
			klog.Warningf("pod %s/%s container %s: %s: %v", r.ns, r.name, c.spec.Name, reason, err)
			r.set(func() { c.state = waiting(reason, err.Error()) })
			if reason == "ErrImagePull" {
				// as the kubelet: the pull error shows until its next sync, then the back-off
				// until the next pull, so a pod alternates ErrImagePull and ImagePullBackOff
				if !r.sleep(min(delay, time.Second)) {
					return code, true
				}
				r.set(func() {
					c.state = waiting("ImagePullBackOff", fmt.Sprintf("Back-off pulling image %q", c.spec.Image))
				})
			}
			if !r.sleep(delay) {
				return code, true
			}
			delay = min(2*delay, r.a.maxBackoff)
			continue
		}
		began := time.Now()
		code, err = r.execute(c, argv, env, dir)
		if err != nil {
			klog.Warningf("pod %s/%s container %s: start: %v", r.ns, r.name, c.spec.Name, err)
			r.set(func() { c.state = waiting("RunContainerError", err.Error()) })
		}
		if r.stopping() {
			return code, true
		}
		if policy == v1.RestartPolicyNever || (policy == v1.RestartPolicyOnFailure && code == 0 && err == nil) {
			return code, false
		}
		if time.Since(began) > 2*r.a.maxBackoff {
			delay = r.a.backoff
		}
		r.set(func() {
			c.last = c.state
			c.state = waiting("CrashLoopBackOff", fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s",
				delay, c.spec.Name, r.name, r.ns))
		})
		if !r.sleep(delay) {
			return code, true
		}
		r.set(func() { c.restarts++ })
		delay = min(2*delay, r.a.maxBackoff)
	}
}

// prepare resolves the program, the environment and the working directory of a container.
func (r *podRunner) prepare(c *ctr) (argv, env []string, dir, reason string, err error) {
	entry, ok := r.a.lookupImage(c.spec.Image)
	if !ok {
		return nil, nil, "", "ErrImagePull", fmt.Errorf("image %q is not in the agent's image table", c.spec.Image)
	}
	var img *ociImg
	if ref := ociRef(entry, c.spec.Image); ref != "" {
		if img, err = r.a.image(ref); err != nil {
			return nil, nil, "", "ErrImagePull", err
		}
		entry = img.entry()
	}
	env, vars, err := r.containerEnv(c)
	if err != nil {
		return nil, nil, "", "CreateContainerConfigError", err
	}
	expand := func(s string) string {
		return expandVars(s, func(k string) (string, bool) { v, ok := vars[k]; return v, ok })
	}
	if img != nil {
		argv, err = ociArgv(entry, &c.spec, expand)
		env = ociEnv(img, env)
		dir = c.spec.WorkingDir
		if dir == "" {
			dir, _ = img.process()["cwd"].(string)
		}
		if dir == "" {
			dir = "/"
		}
	} else {
		argv, err = containerArgv(entry, &c.spec, expand)
		dir = r.dir
		if wd := c.spec.WorkingDir; wd != "" {
			if st, err := os.Stat(wd); err == nil && st.IsDir() {
				dir = wd
			}
		}
	}
	if err != nil {
		return nil, nil, "", "CreateContainerError", err
	}
	r.mu.Lock()
	c.image = entry[0]
	c.img = img
	r.mu.Unlock()
	return argv, env, dir, "", nil
}

// execute runs one instance of the container and waits for it to end: by itself, by a failed
// liveness probe, or because the pod is deleted (SIGTERM, then SIGKILL after the grace period).
func (r *podRunner) execute(c *ctr, argv, env []string, dir string) (int32, error) {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return -1, err
	}
	defer logf.Close()
	r.mu.Lock()
	img := c.img
	r.mu.Unlock()
	var cmd *exec.Cmd
	ociID := ""
	if img != nil {
		bundle, cleanup, err := r.ociBundle(c, img, argv, env, dir)
		if err != nil {
			return -1, err
		}
		defer cleanup()
		ociID = filepath.Base(bundle)
		cmd = r.a.runcCmd(bundle, ociID)
		cmd.Env = []string{"PATH=" + defaultPath, "SB_CLUSTER_DIR=" + r.a.stateDir}
		defer r.a.runcDelete(ociID)
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Env, cmd.Dir = env, dir
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	pid := cmd.Process.Pid
	pidFile := strings.TrimSuffix(c.logPath, ".log") + ".pid"
	if ociID == "" {
		_ = os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+"\n"), 0o644)
	} else {
		// the pid file names the container's own first process (what tests signal and read
		// /proc of), not runc's: written once runc has created it
		go r.a.writeInitPid(ociID, pidFile)
	}
	started := now()
	cid := fmt.Sprintf("sb-node-agent://%s-%d", string(r.uid)[:8], pid)
	klog.Infof("pod %s/%s container %s: started pid %d: %q", r.ns, r.name, c.spec.Name, pid, argv)
	r.set(func() {
		c.state = v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}}
		c.started = true
		c.cid = cid
		c.ready = c.spec.ReadinessProbe == nil
	})
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()
	probesDone := make(chan struct{})
	liveFail := make(chan struct{}, 1)
	if pr := c.spec.ReadinessProbe; pr != nil && !c.init {
		go r.probeLoop(c, pr, env, dir, probesDone, func(ok bool) {
			r.mu.Lock()
			changed := c.ready != ok
			c.ready = ok
			r.mu.Unlock()
			if changed {
				r.kick()
			}
		})
	}
	if pr := c.spec.LivenessProbe; pr != nil && !c.init {
		go r.probeLoop(c, pr, env, dir, probesDone, func(ok bool) {
			if !ok {
				select {
				case liveFail <- struct{}{}:
				default:
				}
			}
		})
	}
	var werr error
	reason := ""
	select {
	case werr = <-waitCh:
	case <-liveFail:
		reason = "liveness probe failed"
		werr = r.stop(pid, ociID, waitCh, r.grace())
	case <-r.stopCh:
		werr = r.stop(pid, ociID, waitCh, r.grace())
	case <-r.a.ctx.Done():
		werr = r.stop(pid, ociID, waitCh, 3*time.Second)
	}
	if ociID != "" {
		r.a.runcSignal(ociID, syscall.SIGKILL) // what the container left behind
	}
	close(probesDone)
	_ = syscall.Kill(-pid, syscall.SIGKILL) // whatever the container left behind in its group
	code := int32(cmd.ProcessState.ExitCode())
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		code = 128 + int32(ws.Signal())
	}
	_ = werr
	term := &v1.ContainerStateTerminated{ExitCode: code, Reason: "Completed", StartedAt: started,
		FinishedAt: now(), ContainerID: cid, Message: reason}
	if code != 0 {
		term.Reason = "Error"
	}
	klog.Infof("pod %s/%s container %s: pid %d exited with %d", r.ns, r.name, c.spec.Name, pid, code)
	r.set(func() {
		c.state = v1.ContainerState{Terminated: term}
		c.ready = false
	})
	return code, nil
}

// stop ends a container instance: SIGTERM (through runc for an OCI container), SIGKILL after
// the grace period.
func (r *podRunner) stop(pid int, ociID string, waitCh <-chan error, grace time.Duration) error {
	if ociID != "" {
		r.a.runcSignal(ociID, syscall.SIGTERM)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case err := <-waitCh:
			return err
		case <-t.C:
			r.a.runcSignal(ociID, syscall.SIGKILL)
		}
	}
	return r.kill(pid, waitCh, grace)
}

func (r *podRunner) grace() time.Duration {
	p := r.latest()
	g := int64(30)
	if p.DeletionGracePeriodSeconds != nil {
		g = *p.DeletionGracePeriodSeconds
	} else if p.Spec.TerminationGracePeriodSeconds != nil {
		g = *p.Spec.TerminationGracePeriodSeconds
	}
	return time.Duration(g) * time.Second
}

// kill sends SIGTERM to the container's process group, and SIGKILL once grace has passed.
func (r *podRunner) kill(pid int, waitCh <-chan error, grace time.Duration) error {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-waitCh:
		return err
	case <-t.C:
		klog.Infof("pod %s/%s: pid %d outlived its %s grace period, SIGKILL", r.ns, r.name, pid, grace)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		return <-waitCh
	}
}

// containerEnv builds the process environment: a base set (PATH, HOME, the API server's
// address as KUBERNETES_SERVICE_HOST/PORT, SB_* facts about the pod), then envFrom, then env
// with $(VAR) references, value sources and the downward API resolved.
func (r *podRunner) containerEnv(c *ctr) ([]string, map[string]string, error) {
	p := r.latest()
	r.mu.Lock()
	saDir := r.saDir
	r.mu.Unlock()
	var order []string
	vars := map[string]string{}
	put := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	host := p.Name
	if p.Spec.Hostname != "" {
		host = p.Spec.Hostname
	}
	put("PATH", defaultPath)
	put("HOSTNAME", host)
	put("HOME", r.dir)
	put("KUBERNETES_SERVICE_HOST", r.a.apiHost)
	put("KUBERNETES_SERVICE_PORT", r.a.apiPort)
	put("KUBERNETES_SERVICE_PORT_HTTPS", r.a.apiPort)
	put("KUBERNETES_PORT", "tcp://"+r.a.apiHost+":"+r.a.apiPort)
	put("SB_POD_NAME", p.Name)
	put("SB_POD_NAMESPACE", p.Namespace)
	put("SB_POD_UID", string(p.UID))
	put("SB_POD_IP", r.podIP)
	put("SB_NODE_NAME", p.Spec.NodeName)
	put("SB_POD_DIR", r.dir)
	put("SB_CLUSTER_DIR", r.a.stateDir)
	if saDir != "" {
		put("SB_SERVICEACCOUNT_DIR", saDir)
	}
	ctx, cancel := context.WithTimeout(r.a.ctx, 15*time.Second)
	defer cancel()
	for _, ef := range c.spec.EnvFrom {
		var data map[string]string
		switch {
		case ef.ConfigMapRef != nil:
			cm, err := r.a.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, ef.ConfigMapRef.Name, metav1.GetOptions{})
			if err != nil {
				if ptr.Deref(ef.ConfigMapRef.Optional, false) && apierrors.IsNotFound(err) {
					continue
				}
				if apierrors.IsNotFound(err) {
					return nil, nil, fmt.Errorf("configmap %q not found", ef.ConfigMapRef.Name)
				}
				return nil, nil, fmt.Errorf("configmap %q: %v", ef.ConfigMapRef.Name, err)
			}
			data = cm.Data
		case ef.SecretRef != nil:
			s, err := r.a.cs.CoreV1().Secrets(p.Namespace).Get(ctx, ef.SecretRef.Name, metav1.GetOptions{})
			if err != nil {
				if ptr.Deref(ef.SecretRef.Optional, false) && apierrors.IsNotFound(err) {
					continue
				}
				if apierrors.IsNotFound(err) { // the kubelet's words
					return nil, nil, fmt.Errorf("secret %q not found", ef.SecretRef.Name)
				}
				return nil, nil, fmt.Errorf("secret %q: %v", ef.SecretRef.Name, err)
			}
			data = map[string]string{}
			for k, v := range s.Data {
				data[k] = string(v)
			}
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			put(ef.Prefix+k, data[k])
		}
	}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	secrets := map[string]secretGot{} // each Secret read once per container
	for _, e := range c.spec.Env {
		if e.ValueFrom == nil {
			put(e.Name, expandVars(e.Value, lookup))
			continue
		}
		v, skip, err := r.envSource(ctx, p, c, e.ValueFrom, secrets)
		if err != nil {
			var nf notFound
			if errors.As(err, &nf) { // as the kubelet says it, without the variable's name
				return nil, nil, err
			}
			return nil, nil, fmt.Errorf("env %s: %v", e.Name, err)
		}
		if !skip {
			put(e.Name, v)
		}
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, vars, nil
}

// notFound is a missing Secret, ConfigMap or key, in the words the kubelet uses for its
// CreateContainerConfigError message (`secret "s3-creds" not found`).
type notFound struct{ msg string }

func (e notFound) Error() string { return e.msg }

// secretGot is one Secret as read for a container's env: the object, or the error of the read.
type secretGot struct {
	s   *v1.Secret
	err error
}

// envSource resolves one env var's valueFrom. An optional reference is skipped only where the
// object or its key does not exist, as the kubelet does: any other error (a timeout, a throttled
// API server) fails the container's start, which is retried. Skipping on those too once started
// 4 of 100 worker pods under load without their optional AWS_ENDPOINT_URL (operator-test h).
func (r *podRunner) envSource(ctx context.Context, p *v1.Pod, c *ctr, src *v1.EnvVarSource, secrets map[string]secretGot) (string, bool, error) {
	switch {
	case src.FieldRef != nil:
		v, err := r.fieldValue(p, src.FieldRef.FieldPath)
		return v, false, err
	case src.ResourceFieldRef != nil:
		v, err := r.resourceValue(p, c, src.ResourceFieldRef)
		return v, false, err
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := r.a.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err == nil {
			if v, ok := cm.Data[ref.Key]; ok {
				return v, false, nil
			}
			err = notFound{fmt.Sprintf("couldn't find key %s in ConfigMap %s/%s", ref.Key, p.Namespace, ref.Name)}
		} else if apierrors.IsNotFound(err) {
			err = notFound{fmt.Sprintf("configmap %q not found", ref.Name)}
		}
		var nf notFound
		if ptr.Deref(ref.Optional, false) && errors.As(err, &nf) {
			return "", true, nil
		}
		return "", false, err
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		got, ok := secrets[ref.Name]
		if !ok {
			got.s, got.err = r.a.cs.CoreV1().Secrets(p.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
			secrets[ref.Name] = got
		}
		err := got.err
		if err == nil {
			if v, ok := got.s.Data[ref.Key]; ok {
				return string(v), false, nil
			}
			err = notFound{fmt.Sprintf("couldn't find key %s in Secret %s/%s", ref.Key, p.Namespace, ref.Name)}
		} else if apierrors.IsNotFound(err) {
			err = notFound{fmt.Sprintf("secret %q not found", ref.Name)}
		}
		var nf notFound
		if ptr.Deref(ref.Optional, false) && errors.As(err, &nf) {
			return "", true, nil
		}
		return "", false, err
	}
	return "", true, nil
}

func (r *podRunner) fieldValue(p *v1.Pod, path string) (string, error) {
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "spec.nodeName":
		return p.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return "127.0.0.1", nil
	case "status.podIP", "status.podIPs":
		return r.podIP, nil
	}
	for prefix, m := range map[string]map[string]string{"metadata.labels": p.Labels, "metadata.annotations": p.Annotations} {
		if strings.HasPrefix(path, prefix+"['") && strings.HasSuffix(path, "']") {
			return m[strings.TrimSuffix(strings.TrimPrefix(path, prefix+"['"), "']")], nil
		}
	}
	return "", fmt.Errorf("field path %q is not supported", path)
}

// resourceValue answers resourceFieldRef like the kubelet: limits default to the node's
// allocatable amount; the value is divided by the divisor and rounded up.
func (r *podRunner) resourceValue(p *v1.Pod, c *ctr, ref *v1.ResourceFieldSelector) (string, error) {
	spec := &c.spec
	if ref.ContainerName != "" {
		for i := range p.Spec.Containers {
			if p.Spec.Containers[i].Name == ref.ContainerName {
				spec = &p.Spec.Containers[i]
			}
		}
	}
	kind, name, _ := strings.Cut(ref.Resource, ".")
	res := v1.ResourceName(name)
	var list v1.ResourceList
	switch kind {
	case "limits":
		list = spec.Resources.Limits
	case "requests":
		list = spec.Resources.Requests
	default:
		return "", fmt.Errorf("resource %q is not supported", ref.Resource)
	}
	q, ok := list[res]
	if !ok && kind == "limits" {
		if n := r.a.nodes[p.Spec.NodeName]; n != nil {
			q = n.capacity[res]
		}
	}
	div := ref.Divisor
	if div.IsZero() {
		div.Set(1)
	}
	if res == v1.ResourceCPU {
		m, d := q.MilliValue(), div.MilliValue()
		return strconv.FormatInt((m+d-1)/d, 10), nil
	}
	v, d := q.Value(), div.Value()
	return strconv.FormatInt((v+d-1)/d, 10), nil
}

func (r *podRunner) statusLoop() {
	for {
		select {
		case <-r.changed:
			r.syncStatus()
		case <-r.done:
			return
		}
	}
}

// syncStatus writes the pod's status if it differs from the newest object seen.
func (r *podRunner) syncStatus() {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	pod := r.latest()
	for attempt := 0; attempt < 8; attempt++ {
		r.mu.Lock()
		gone := r.gone
		r.mu.Unlock()
		if gone || r.a.ctx.Err() != nil {
			return
		}
		st := r.status(pod)
		if apiequality.Semantic.DeepEqual(st, pod.Status) {
			return
		}
		np := pod.DeepCopy()
		np.Status = st
		ctx, cancel := context.WithTimeout(r.a.ctx, 15*time.Second)
		out, err := r.a.cs.CoreV1().Pods(r.ns).UpdateStatus(ctx, np, metav1.UpdateOptions{})
		if err == nil {
			cancel()
			r.update(out, false)
			return
		}
		if apierrors.IsNotFound(err) {
			cancel()
			return
		}
		if apierrors.IsConflict(err) {
			fresh, gerr := r.a.cs.CoreV1().Pods(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			cancel()
			if gerr != nil || fresh.UID != r.uid {
				return
			}
			r.update(fresh, false)
			pod = fresh
			continue
		}
		cancel()
		klog.Warningf("pod %s/%s: status update: %v", r.ns, r.name, err)
		time.Sleep(500 * time.Millisecond)
		pod = r.latest()
	}
}

func setCondition(conds []v1.PodCondition, t v1.PodConditionType, ok bool, reason, msg string) []v1.PodCondition {
	st := v1.ConditionFalse
	if ok {
		st = v1.ConditionTrue
		reason, msg = "", ""
	}
	for i := range conds {
		if conds[i].Type == t {
			if conds[i].Status != st {
				conds[i].LastTransitionTime = now()
			}
			conds[i].Status, conds[i].Reason, conds[i].Message = st, reason, msg
			return conds
		}
	}
	return append(conds, v1.PodCondition{Type: t, Status: st, Reason: reason, Message: msg, LastTransitionTime: now()})
}

func (r *podRunner) containerStatus(c *ctr) v1.ContainerStatus {
	cs := v1.ContainerStatus{Name: c.spec.Name, State: c.state, LastTerminationState: c.last, Ready: c.ready,
		RestartCount: c.restarts, Image: c.spec.Image, Started: ptr.To(c.state.Running != nil)}
	if c.image != "" {
		cs.ImageID = "sb-local://" + c.image
	}
	if c.state.Running == nil && c.state.Terminated == nil && !c.started {
		cs.Started = ptr.To(false)
	}
	if c.state.Running != nil {
		cs.ContainerID = c.cid
	} else if c.state.Terminated != nil {
		cs.ContainerID = c.state.Terminated.ContainerID
	} else if c.last.Terminated != nil && c.state.Running == nil {
		cs.ContainerID = c.last.Terminated.ContainerID
	}
	return cs
}

// status computes the pod status from the processes' state, on top of base's status (which
// keeps what others wrote: the scheduler's PodScheduled condition, the QoS class, ...).
func (r *podRunner) status(base *v1.Pod) v1.PodStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := *base.Status.DeepCopy()
	st.ObservedGeneration = base.Generation
	st.HostIP, st.HostIPs = "127.0.0.1", []v1.HostIP{{IP: "127.0.0.1"}}
	if r.podIP != "" {
		st.PodIP, st.PodIPs = r.podIP, []v1.PodIP{{IP: r.podIP}}
	}
	if st.StartTime == nil {
		st.StartTime = &r.startTime
	}
	st.InitContainerStatuses, st.ContainerStatuses = nil, nil
	for _, c := range r.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, r.containerStatus(c))
	}
	var unready []string
	started := false
	for _, c := range r.ctrs {
		st.ContainerStatuses = append(st.ContainerStatuses, r.containerStatus(c))
		if !c.ready {
			unready = append(unready, c.spec.Name)
		}
		started = started || c.started
	}
	switch {
	case r.phase != "":
		st.Phase = r.phase
	case r.initDone && started:
		st.Phase = v1.PodRunning
	default:
		st.Phase = v1.PodPending
	}
	initDone := r.initDone || len(r.inits) == 0
	st.Conditions = setCondition(st.Conditions, v1.PodReadyToStartContainers, r.setupDone, "", "")
	if r.phase != "" && len(r.inits) == 0 {
		initDone = true
	}
	st.Conditions = setCondition(st.Conditions, v1.PodInitialized, initDone || r.initDone, "ContainersNotInitialized",
		"containers with incomplete status: init containers")
	ready := len(unready) == 0 && r.phase == ""
	reason, msg := "ContainersNotReady", fmt.Sprintf("containers with unready status: [%s]", strings.Join(unready, " "))
	if r.phase != "" {
		reason, msg = "PodCompleted", ""
	}
	st.Conditions = setCondition(st.Conditions, v1.ContainersReady, ready, reason, msg)
	st.Conditions = setCondition(st.Conditions, v1.PodReady, ready, reason, msg)
	return st
}

// now is the current time at the API's one-second resolution, so that statuses compare equal
// after a round trip.
func now() metav1.Time { return metav1.Now().Rfc3339Copy() }

package main

// Containers from OCI images, run with runc. An image-table rule whose program is
// "oci:LAYOUT:TAG" (TAG may contain "{tag}", replaced by the pod image's tag) makes the agent
// run the pod's container from that image instead of a host program ("{name}" in TAG is the
// last path element of the pod image's repository: worker for streambatch/worker:0.1.0):
//   - the image is unpacked once (umoci unpack) into <state>/images/<manifest digest>/, and
//     each container gets an overlay over its root filesystem (the image stays untouched);
//   - the runtime config starts from the one umoci writes for the image (its entrypoint, cmd,
//     env, working dir and user) and takes from the pod: command/args, env, workingDir,
//     runAsUser/runAsGroup/fsGroup/supplementalGroups, readOnlyRootFilesystem,
//     capabilities, allowPrivilegeEscalation, and the volumes its volumeMounts name (emptyDir,
//     hostPath, secret, configMap, the projected service-account token);
//   - with --cpu-cfs-quota, the container's limits.cpu becomes a CFS quota over a 100 ms period
//     and its requests.cpu its cpu shares, as the kubelet sets them (ociCPU);
//   - the container shares the host's network namespace (each pod binds its own pod IP, as
//     process pods do) and has its own mount, pid, ipc and uts namespaces.
// runc runs in the foreground (its output is the container log); stopping sends the signal
// through `runc kill`, and `runc delete --force` removes whatever is left.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ociImg is an unpacked image: its root filesystem and the runtime config umoci made for it.
type ociImg struct {
	rootfs string
	spec   map[string]any
}

var ociMu sync.Mutex

// ociRef returns the "LAYOUT:TAG" an image rule names, with {tag} replaced by the pod
// image's tag ("latest" when it has none), or "" when the rule is not an OCI rule.
func ociRef(entry []string, podImage string) string {
	if len(entry) != 1 || !strings.HasPrefix(entry[0], "oci:") {
		return ""
	}
	repo, tag := podImage, "latest"
	if i := strings.LastIndex(podImage, ":"); i > strings.LastIndex(podImage, "/") {
		repo, tag = podImage[:i], podImage[i+1:]
	}
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	name := repo[strings.LastIndex(repo, "/")+1:]
	ref := strings.ReplaceAll(strings.TrimPrefix(entry[0], "oci:"), "{tag}", tag)
	return strings.ReplaceAll(ref, "{name}", name)
}

// ociDigest reads the manifest digest of LAYOUT:TAG from the layout's index.json.
func ociDigest(ref string) (string, error) {
	i := strings.LastIndex(ref, ":")
	if i < 0 {
		return "", fmt.Errorf("image rule %q: want oci:LAYOUT:TAG", ref)
	}
	layout, tag := ref[:i], ref[i+1:]
	b, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		return "", fmt.Errorf("OCI layout %s: %v (run make images)", layout, err)
	}
	var idx struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(b, &idx); err != nil {
		return "", fmt.Errorf("OCI layout %s: index.json: %v", layout, err)
	}
	for _, m := range idx.Manifests {
		if m.Annotations["org.opencontainers.image.ref.name"] == tag {
			return m.Digest, nil
		}
	}
	return "", fmt.Errorf("OCI layout %s has no tag %q (run make images)", layout, tag)
}

// image unpacks ref once (per manifest digest) and returns it.
func (a *agent) image(ref string) (*ociImg, error) {
	dg, err := ociDigest(ref)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(dg))
	dir := filepath.Join(a.stateDir, "images", hex.EncodeToString(sum[:8]))
	ociMu.Lock()
	defer ociMu.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		tmp := dir + ".tmp"
		_ = os.RemoveAll(tmp)
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			return nil, err
		}
		out, err := exec.Command("umoci", "unpack", "--image", ref, tmp).CombinedOutput()
		if err != nil {
			_ = os.RemoveAll(tmp)
			return nil, fmt.Errorf("umoci unpack %s: %v: %s", ref, err, strings.TrimSpace(string(out)))
		}
		if err := os.Rename(tmp, dir); err != nil {
			return nil, err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, err
	}
	img := &ociImg{rootfs: filepath.Join(dir, "rootfs")}
	if err := json.Unmarshal(b, &img.spec); err != nil {
		return nil, fmt.Errorf("%s/config.json: %v", dir, err)
	}
	return img, nil
}

func (img *ociImg) process() map[string]any {
	p, _ := img.spec["process"].(map[string]any)
	return p
}

// entry is the image's ENTRYPOINT + CMD as umoci resolved them.
func (img *ociImg) entry() []string {
	var out []string
	if args, ok := img.process()["args"].([]any); ok {
		for _, s := range args {
			out = append(out, fmt.Sprint(s))
		}
	}
	return out
}

// ociArgv follows the kubelet's rules: command replaces the entrypoint (and drops the image's
// cmd), args replace the cmd.
func ociArgv(entry []string, c *v1.Container, expand func(string) string) ([]string, error) {
	cmd := expandAll(c.Command, expand)
	args := expandAll(c.Args, expand)
	switch {
	case len(cmd) > 0:
		return append(cmd, args...), nil
	case len(args) > 0 && len(entry) > 0:
		return append([]string{entry[0]}, args...), nil
	case len(entry) > 0:
		return entry, nil
	}
	return nil, fmt.Errorf("the image has no entrypoint and the container no command")
}

// ociEnv is the image's env, then the pod's (which wins); host-only agent variables are left
// out (HOME and SB_SERVICEACCOUNT_DIR name host paths; the token is at the standard path).
func ociEnv(img *ociImg, env []string) []string {
	var out []string
	seen := map[string]int{}
	add := func(kv string) {
		k := kv
		if i := strings.IndexByte(kv, '='); i >= 0 {
			k = kv[:i]
		}
		if k == "HOME" || k == "SB_SERVICEACCOUNT_DIR" || k == "SB_POD_DIR" {
			return
		}
		if i, ok := seen[k]; ok {
			out[i] = kv
			return
		}
		seen[k] = len(out)
		out = append(out, kv)
	}
	if e, ok := img.process()["env"].([]any); ok {
		for _, s := range e {
			add(fmt.Sprint(s))
		}
	}
	for _, kv := range env {
		add(kv)
	}
	if _, ok := seen["HOME"]; !ok {
		out = append(out, "HOME=/")
	}
	return out
}

// volumeSource prepares the host side of a pod volume and returns its path and whether it is
// mounted read-only whatever the volumeMount says.
func (r *podRunner) volumeSource(ctx context.Context, p *v1.Pod, vol *v1.Volume) (string, bool, error) {
	dir := filepath.Join(r.dir, "volumes", vol.Name)
	switch {
	case vol.EmptyDir != nil:
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return "", false, err
		}
		return dir, false, os.Chmod(dir, 0o777) // as the kubelet makes them: anyone may write
	case vol.HostPath != nil:
		hp := vol.HostPath
		if hp.Type != nil && *hp.Type == v1.HostPathDirectoryOrCreate {
			if err := os.MkdirAll(hp.Path, 0o755); err != nil {
				return "", false, err
			}
		}
		return hp.Path, false, nil
	case vol.Secret != nil, vol.ConfigMap != nil:
		data := map[string][]byte{}
		var items []v1.KeyToPath
		mode := int32(0o644)
		if s := vol.Secret; s != nil {
			sec, err := r.a.cs.CoreV1().Secrets(p.Namespace).Get(ctx, s.SecretName, metav1.GetOptions{})
			if err != nil {
				return "", false, fmt.Errorf("secret %q: %v", s.SecretName, err)
			}
			data, items = sec.Data, s.Items
			if s.DefaultMode != nil {
				mode = *s.DefaultMode
			}
		} else {
			cm, err := r.a.cs.CoreV1().ConfigMaps(p.Namespace).Get(ctx, vol.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return "", false, fmt.Errorf("configmap %q: %v", vol.ConfigMap.Name, err)
			}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			items = vol.ConfigMap.Items
			if vol.ConfigMap.DefaultMode != nil {
				mode = *vol.ConfigMap.DefaultMode
			}
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", false, err
		}
		write := func(key, rel string) error {
			v, ok := data[key]
			if !ok {
				return fmt.Errorf("volume %q: no key %q", vol.Name, key)
			}
			path := filepath.Join(dir, rel)
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			return os.WriteFile(path, v, os.FileMode(mode))
		}
		if len(items) > 0 {
			for _, it := range items {
				if err := write(it.Key, it.Path); err != nil {
					return "", false, err
				}
			}
		} else {
			for k := range data {
				if err := write(k, k); err != nil {
					return "", false, err
				}
			}
		}
		return dir, true, nil
	case vol.Projected != nil:
		for _, s := range vol.Projected.Sources {
			if s.ServiceAccountToken == nil {
				continue
			}
			r.mu.Lock()
			sa := r.saDir
			r.mu.Unlock()
			if sa == "" {
				return "", false, fmt.Errorf("volume %q: no service-account token yet", vol.Name)
			}
			return sa, true, nil
		}
		return "", false, fmt.Errorf("volume %q: only the service-account token of projected volumes is supported", vol.Name)
	}
	return "", false, fmt.Errorf("volume %q: this agent supports emptyDir, hostPath, secret, configMap and the projected service-account token", vol.Name)
}

// ociBundle makes the bundle of one container instance: an overlay root over the image and a
// config.json. cleanup unmounts and removes it.
func (r *podRunner) ociBundle(c *ctr, img *ociImg, argv, env []string, dir string) (string, func(), error) {
	p := r.latest()
	id := fmt.Sprintf("%s-%s-%d", string(r.uid)[:8], c.spec.Name, time.Now().UnixNano())
	b := filepath.Join(r.dir, "bundles", id)
	for _, d := range []string{"rootfs", "upper", "work"} {
		if err := os.MkdirAll(filepath.Join(b, d), 0o755); err != nil {
			return "", nil, err
		}
	}
	root := filepath.Join(b, "rootfs")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", img.rootfs, filepath.Join(b, "upper"), filepath.Join(b, "work"))
	if err := syscall.Mount("overlay", root, "overlay", 0, opts); err != nil {
		_ = os.RemoveAll(b)
		return "", nil, fmt.Errorf("overlay root: %v", err)
	}
	cleanup := func() {
		_ = syscall.Unmount(root, syscall.MNT_DETACH)
		_ = os.RemoveAll(b)
	}
	var spec map[string]any
	raw, _ := json.Marshal(img.spec)
	_ = json.Unmarshal(raw, &spec) // a deep copy of the image's config
	proc, _ := spec["process"].(map[string]any)
	if proc == nil {
		proc = map[string]any{}
		spec["process"] = proc
	}
	proc["terminal"] = false
	proc["args"] = argv
	proc["env"] = env
	proc["cwd"] = dir
	// user: the pod's securityContext, else the image's
	user, _ := proc["user"].(map[string]any)
	if user == nil {
		user = map[string]any{"uid": 0, "gid": 0}
	}
	psc, csc := p.Spec.SecurityContext, c.spec.SecurityContext
	if psc != nil && psc.RunAsUser != nil {
		user["uid"] = *psc.RunAsUser
	}
	if psc != nil && psc.RunAsGroup != nil {
		user["gid"] = *psc.RunAsGroup
	}
	if csc != nil && csc.RunAsUser != nil {
		user["uid"] = *csc.RunAsUser
	}
	if csc != nil && csc.RunAsGroup != nil {
		user["gid"] = *csc.RunAsGroup
	}
	var groups []int64
	if psc != nil {
		if psc.FSGroup != nil {
			groups = append(groups, *psc.FSGroup)
		}
		groups = append(groups, psc.SupplementalGroups...)
	}
	if len(groups) > 0 {
		user["additionalGids"] = groups
	}
	proc["user"] = user
	if csc != nil && csc.AllowPrivilegeEscalation != nil && !*csc.AllowPrivilegeEscalation {
		proc["noNewPrivileges"] = true
	}
	if csc != nil && csc.Capabilities != nil {
		caps, _ := proc["capabilities"].(map[string]any)
		if caps == nil {
			caps = map[string]any{}
		}
		for _, set := range []string{"bounding", "effective", "permitted", "inheritable", "ambient"} {
			var have []string
			if l, ok := caps[set].([]any); ok {
				for _, x := range l {
					have = append(have, fmt.Sprint(x))
				}
			}
			var keep []string
			for _, h := range have {
				drop := false
				for _, d := range csc.Capabilities.Drop {
					if strings.EqualFold(string(d), "ALL") || strings.EqualFold("CAP_"+string(d), h) {
						drop = true
					}
				}
				if !drop {
					keep = append(keep, h)
				}
			}
			if set != "ambient" {
				for _, a := range csc.Capabilities.Add {
					keep = append(keep, "CAP_"+strings.ToUpper(string(a)))
				}
			}
			caps[set] = keep
		}
		proc["capabilities"] = caps
	}
	rootCfg, _ := spec["root"].(map[string]any)
	if rootCfg == nil {
		rootCfg = map[string]any{}
		spec["root"] = rootCfg
	}
	rootCfg["path"] = root
	rootCfg["readonly"] = csc != nil && csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem
	host := p.Name
	if p.Spec.Hostname != "" {
		host = p.Spec.Hostname
	}
	spec["hostname"] = host
	// namespaces: the host's network (pods bind their own pod IP), no user namespace
	if lin, ok := spec["linux"].(map[string]any); ok {
		var keep []any
		if nss, ok := lin["namespaces"].([]any); ok {
			for _, ns := range nss {
				t := ""
				if m, ok := ns.(map[string]any); ok {
					t = fmt.Sprint(m["type"])
				}
				if t != "network" && t != "user" {
					keep = append(keep, ns)
				}
			}
		}
		lin["namespaces"] = keep
		delete(lin, "uidMappings")
		delete(lin, "gidMappings")
		if cpu := ociCPU(&c.spec); cpu != nil {
			res, _ := lin["resources"].(map[string]any)
			if res == nil {
				res = map[string]any{}
				lin["resources"] = res
			}
			res["cpu"] = cpu
		}
	}
	mounts, _ := spec["mounts"].([]any)
	bind := func(src, dst string, ro bool) {
		o := []string{"rbind", "rprivate"}
		if ro {
			o = append(o, "ro")
		}
		mounts = append(mounts, map[string]any{"destination": dst, "type": "bind", "source": src, "options": o})
	}
	for _, f := range []string{"/etc/resolv.conf", "/etc/hosts"} {
		if _, err := os.Stat(f); err == nil {
			bind(f, f, true)
		}
	}
	ctx, cancel := context.WithTimeout(r.a.ctx, 15*time.Second)
	defer cancel()
	for _, vm := range c.spec.VolumeMounts {
		var vol *v1.Volume
		for i := range p.Spec.Volumes {
			if p.Spec.Volumes[i].Name == vm.Name {
				vol = &p.Spec.Volumes[i]
			}
		}
		if vol == nil {
			cleanup()
			return "", nil, fmt.Errorf("volumeMount %q: no such volume in the pod", vm.Name)
		}
		src, ro, err := r.volumeSource(ctx, p, vol)
		if err != nil {
			cleanup()
			return "", nil, err
		}
		if vm.SubPath != "" {
			src = filepath.Join(src, vm.SubPath)
		}
		bind(src, vm.MountPath, ro || vm.ReadOnly)
	}
	spec["mounts"] = mounts
	cfg, err := json.MarshalIndent(spec, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(b, "config.json"), cfg, 0o644)
	}
	if err != nil {
		cleanup()
		return "", nil, err
	}
	return b, cleanup, nil
}

// cpuCFSQuota: --cpu-cfs-quota (main.go).
var cpuCFSQuota bool

// ociCPU is the runtime config's linux.resources.cpu for a container, as the kubelet makes it:
// limits.cpu as a quota of limit x 100 ms per 100 ms period (at least 1 ms), requests.cpu (else
// the limit) as shares of 1024 a CPU (at least 2). nil without --cpu-cfs-quota or without a
// limit: the container may use every CPU of the machine, as before.
func ociCPU(c *v1.Container) map[string]any {
	lim, ok := c.Resources.Limits[v1.ResourceCPU]
	if !cpuCFSQuota || !ok || lim.MilliValue() <= 0 {
		return nil
	}
	const period = 100000
	quota := max(lim.MilliValue()*period/1000, 1000)
	req, ok := c.Resources.Requests[v1.ResourceCPU]
	if !ok {
		req = lim
	}
	shares := max(req.MilliValue()*1024/1000, 2)
	return map[string]any{"quota": quota, "period": period, "shares": shares}
}

// runcRoot is where runc keeps the state of this agent's containers.
func (a *agent) runcRoot() string { return filepath.Join(a.stateDir, "runc") }

// runcCmd is `runc run` of a bundle as container id (foreground: the caller waits for it).
func (a *agent) runcCmd(bundle, id string) *exec.Cmd {
	return exec.Command("runc", "--root", a.runcRoot(), "run", "--bundle", bundle, id)
}

// runcSignal sends sig to the container's processes (all of them: --all).
func (a *agent) runcSignal(id string, sig syscall.Signal) {
	_ = exec.Command("runc", "--root", a.runcRoot(), "kill", "--all", id, strconv.Itoa(int(sig))).Run()
}

// runcDelete removes the container whatever its state.
func (a *agent) runcDelete(id string) {
	_ = exec.Command("runc", "--root", a.runcRoot(), "delete", "--force", id).Run()
}

// writeInitPid writes the pid of container id's first process to pidFile as soon as runc
// reports it (runc state), polling for at most 30 s; nothing is written if it never does.
func (a *agent) writeInitPid(id, pidFile string) {
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		out, err := exec.Command("runc", "--root", a.runcRoot(), "state", id).Output()
		if err != nil {
			continue
		}
		var st struct {
			Pid    int    `json:"pid"`
			Status string `json:"status"`
		}
		if json.Unmarshal(out, &st) == nil && st.Pid > 0 {
			_ = os.WriteFile(pidFile, []byte(strconv.Itoa(st.Pid)+"\n"), 0o644)
			return
		}
	}
}

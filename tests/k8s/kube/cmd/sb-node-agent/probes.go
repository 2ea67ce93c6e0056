package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// probeLoop runs a readiness or liveness probe (exec, httpGet, tcpSocket; grpc is checked as
// a TCP connect) until done is closed, and calls report(true) after successThreshold
// consecutive successes and report(false) after failureThreshold consecutive failures.
func (r *podRunner) probeLoop(c *ctr, pr *v1.Probe, env []string, dir string, done <-chan struct{}, report func(bool)) {
	period := time.Duration(max(pr.PeriodSeconds, 1)) * time.Second
	timeout := time.Duration(max(pr.TimeoutSeconds, 1)) * time.Second
	succT, failT := int(max(pr.SuccessThreshold, 1)), int(max(pr.FailureThreshold, 1))
	if pr.FailureThreshold == 0 {
		failT = 3
	}
	wait := time.Duration(pr.InitialDelaySeconds) * time.Second
	succ, fail := 0, 0
	for {
		t := time.NewTimer(wait)
		select {
		case <-done:
			t.Stop()
			return
		case <-t.C:
		}
		wait = period
		if r.probeOnce(c, pr, env, dir, timeout) {
			succ, fail = succ+1, 0
			if succ >= succT {
				report(true)
			}
		} else {
			succ, fail = 0, fail+1
			if fail >= failT {
				report(false)
			}
		}
	}
}

func (r *podRunner) probeOnce(c *ctr, pr *v1.Probe, env []string, dir string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(r.a.ctx, timeout)
	defer cancel()
	host := r.podIP
	switch {
	case pr.Exec != nil:
		if len(pr.Exec.Command) == 0 {
			return false
		}
		prog, err := lookPath(pr.Exec.Command[0])
		if err != nil {
			return false
		}
		cmd := exec.CommandContext(ctx, prog, pr.Exec.Command[1:]...)
		cmd.Env, cmd.Dir = env, dir
		return cmd.Run() == nil
	case pr.HTTPGet != nil:
		g := pr.HTTPGet
		if g.Host != "" {
			host = g.Host
		}
		port, err := resolvePort(g.Port, &c.spec)
		if err != nil {
			return false
		}
		scheme := strings.ToLower(string(g.Scheme))
		if scheme == "" {
			scheme = "http"
		}
		path := g.Path
		if !strings.HasPrefix(path, "/") {
			path = "/" + path
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet,
			fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(host, strconv.Itoa(port)), path), nil)
		if err != nil {
			return false
		}
		for _, h := range g.HTTPHeaders {
			req.Header.Add(h.Name, h.Value)
		}
		req.Header.Set("User-Agent", "kube-probe/1.35")
		cl := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp, err := cl.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode >= 200 && resp.StatusCode < 400
	case pr.TCPSocket != nil || pr.GRPC != nil:
		var port int
		var err error
		if pr.TCPSocket != nil {
			if pr.TCPSocket.Host != "" {
				host = pr.TCPSocket.Host
			}
			port, err = resolvePort(pr.TCPSocket.Port, &c.spec)
		} else {
			port = int(pr.GRPC.Port)
		}
		if err != nil {
			return false
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		conn.Close()
		return true
	}
	return false
}

func resolvePort(p intstr.IntOrString, c *v1.Container) (int, error) {
	if p.Type == intstr.Int {
		return p.IntValue(), nil
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return int(cp.ContainerPort), nil
		}
	}
	if n, err := strconv.Atoi(p.StrVal); err == nil {
		return n, nil
	}
	return 0, fmt.Errorf("no port named %q", p.StrVal)
}

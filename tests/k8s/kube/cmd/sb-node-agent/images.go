package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// imageRule maps images matching pattern (path.Match syntax; a pattern without a tag also
// matches any tag or digest) to a local program and its default arguments, which stand for
// the image's ENTRYPOINT and CMD.
type imageRule struct {
	pattern string
	argv    []string
}

// loadImages reads "PATTERN PROGRAM [ARG...]" lines; '#' starts a comment; $VAR and ${VAR}
// are expanded from the agent's environment (e.g. ${SB_REPO_DIR}).
func loadImages(file string) ([]imageRule, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rules []imageRule
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		fields := strings.Fields(os.ExpandEnv(line))
		if len(fields) == 0 {
			continue
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("%s:%d: want 'IMAGE-PATTERN PROGRAM [ARG...]'", file, ln)
		}
		if _, err := path.Match(fields[0], ""); err != nil {
			return nil, fmt.Errorf("%s:%d: bad pattern %q", file, ln, fields[0])
		}
		rules = append(rules, imageRule{pattern: fields[0], argv: fields[1:]})
	}
	return rules, sc.Err()
}

func normalizeImage(img string) string {
	for _, p := range []string{"docker.io/", "index.docker.io/", "library/"} {
		img = strings.TrimPrefix(img, p)
	}
	return img
}

func (a *agent) lookupImage(image string) ([]string, bool) {
	for _, img := range []string{image, normalizeImage(image)} {
		for _, r := range a.images {
			for _, p := range []string{r.pattern, r.pattern + ":*", r.pattern + "@*"} {
				if ok, _ := path.Match(p, img); ok {
					return r.argv, true
				}
			}
		}
	}
	return nil, false
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

func programExists(p string) bool {
	if strings.Contains(p, "/") {
		st, err := os.Stat(p)
		return err == nil && !st.IsDir()
	}
	_, err := lookPath(p)
	return err == nil
}

func lookPath(p string) (string, error) {
	if strings.Contains(p, "/") {
		return p, nil
	}
	for _, dir := range filepath.SplitList(defaultPath) {
		c := filepath.Join(dir, p)
		if st, err := os.Stat(c); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return c, nil
		}
	}
	return "", exec.ErrNotFound
}

// containerArgv decides what to run for a container, following the kubelet's rules for
// command/args against the image's entrypoint/cmd. A command whose program has the same base
// name as the image's program, or does not exist on this host, runs the image's program.
func containerArgv(entry []string, c *v1.Container, expand func(string) string) ([]string, error) {
	cmd := expandAll(c.Command, expand)
	args := expandAll(c.Args, expand)
	var argv []string
	switch {
	case len(cmd) == 0 && len(args) == 0:
		argv = append([]string(nil), entry...)
	case len(cmd) == 0:
		argv = append([]string{entry[0]}, args...)
	default:
		prog := cmd[0]
		if filepath.Base(prog) == filepath.Base(entry[0]) || !programExists(prog) {
			prog = entry[0]
		}
		argv = append(append([]string{prog}, cmd[1:]...), args...)
	}
	p, err := lookPath(argv[0])
	if err != nil || !programExists(p) {
		return nil, fmt.Errorf("program %q not found on this host (build it first?)", argv[0])
	}
	argv[0] = p
	return argv, nil
}

func expandAll(in []string, expand func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s)
	}
	return out
}

// expandVars does Kubernetes' $(VAR) expansion: "$$" is a literal "$", "$(NAME)" is replaced
// by NAME's value when it is defined and kept as written otherwise.
func expandVars(s string, lookup func(string) (string, bool)) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

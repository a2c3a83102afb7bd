package main

import (
	"bytes"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestRunHelpExitsZero(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		var out, errOut bytes.Buffer
		if code := run([]string{h}, &out, &errOut); code != 0 {
			t.Errorf("nodelet %s exited %d, want 0 (stderr %q)", h, code, errOut.String())
		}
		if !strings.Contains(out.String(), "Usage:\n  nodelet [flags]") || !strings.Contains(out.String(), "--image-credential-provider-config") {
			t.Errorf("nodelet %s printed on stdout:\n%s", h, out.String())
		}
		if strings.Contains(out.String()+errOut.String(), "pflag: help requested") {
			t.Errorf("nodelet %s printed pflag's error", h)
		}
	}
}

func TestRunVersion(t *testing.T) {
	var out, errOut bytes.Buffer
	// Exactly the kubelet's line: kubeadm's preflight parses it.
	if code := run([]string{"--version"}, &out, &errOut); code != 0 || out.String() != "Kubernetes v1.37.2+nodelet\n" {
		t.Errorf("--version: exit %d, stdout %q, want %q", code, out.String(), "Kubernetes v1.37.2+nodelet\n")
	}
	out.Reset()
	if code := run([]string{"--version=raw"}, &out, &errOut); code != 0 ||
		!strings.HasPrefix(out.String(), `version.Info{Major:"1", Minor:"37", `) || !strings.Contains(out.String(), `GitVersion:"v1.37.2+nodelet", GitCommit:"`) {
		t.Errorf("--version=raw: exit %d, stdout %q", code, out.String())
	}
}

func TestRunRefusesUnknownAndUnbuiltFlags(t *testing.T) {
	defer klog.Flush()
	var out, errOut bytes.Buffer
	if code := run([]string{"--lock-file=/var/run/lock/kubelet.lock"}, &out, &errOut); code != 1 ||
		!strings.Contains(errOut.String(), "--lock-file=/var/run/lock/kubelet.lock: the kubelet lock file is not built into nodelet") {
		t.Errorf("--lock-file: exit %d, stderr %q", code, errOut.String())
	}
	errOut.Reset()
	if code := run([]string{"--no-such-flag"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "unknown flag: --no-such-flag") {
		t.Errorf("--no-such-flag: exit %d, stderr %q", code, errOut.String())
	}
}

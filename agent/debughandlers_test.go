package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// TestDebugHandlersFollowConfig: the KubeletConfiguration's enableProfilingHandler,
// enableDebugFlagsHandler and enableSystemLogHandler reach the kubelet API. Unset
// they are on (upstream's default), false they are not served;
// enableContentionProfiling fills the block profile; enableSystemLogQuery (default
// false) makes /logs/?query= run journalctl.
func TestDebugHandlersFollowConfig(t *testing.T) {
	crt, key, err := certutil.GenerateSelfSignedCertKey("node-a", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	if err := os.WriteFile(filepath.Join(logs, "syslog"), []byte("node log line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A journalctl that knows the unit nodelet and echoes its arguments.
	journalctl := filepath.Join(t.TempDir(), "journalctl")
	script := "#!/bin/sh\nif [ \"$1\" = --field ]; then echo nodelet.service; exit 0; fi\necho \"journal: $*\"\n"
	if err := os.WriteFile(journalctl, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	verbosity := 0
	for klog.V(klog.Level(verbosity + 1)).Enabled() {
		verbosity++
	}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's self-signed server

	serve := func(t *testing.T, set func(kc *kubeletconfigv1beta1.KubeletConfiguration)) func(method, path string) (int, string) {
		t.Helper()
		port := freePort(t)
		kc := serverTestConfig(true, port, 0)
		kc.Authentication.Anonymous.Enabled = ptr.To(true)
		set(kc)
		d := serverTestDeps()
		d.getCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil }
		d.systemLogDir = logs
		d.journalctlPath = journalctl
		l, err := newTestAPIServer(context.Background(), kc, d)
		if err != nil || l == nil {
			t.Fatalf("newAPIServer = %v, %v", l, err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		served := make(chan struct{})
		go func() { l.Serve(ctx); close(served) }()
		t.Cleanup(func() { cancel(); <-served })
		return func(method, path string) (int, string) {
			req, err := http.NewRequest(method, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), strings.NewReader(strconv.Itoa(verbosity)))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
	}
	endpoints := []struct{ method, path, want string }{
		{"GET", "/debug/pprof/", "Types of profiles available"},
		{"GET", "/debug/pprof/goroutine?debug=1", "goroutine profile:"},
		{"PUT", "/debug/flags/v", "successfully set"},
		{"GET", "/logs/syslog", "node log line"},
	}

	t.Run("unset: served", func(t *testing.T) {
		do := serve(t, func(*kubeletconfigv1beta1.KubeletConfiguration) {})
		for _, e := range endpoints {
			if code, body := do(e.method, e.path); code != http.StatusOK || !strings.Contains(body, e.want) {
				t.Errorf("%s %s: %d %.200q, want 200 holding %q", e.method, e.path, code, body, e.want)
			}
		}
	})

	t.Run("enableSystemLogQuery: unset the query is ignored, true it runs journalctl", func(t *testing.T) {
		do := serve(t, func(*kubeletconfigv1beta1.KubeletConfiguration) {})
		if code, body := do("GET", "/logs/?query=nodelet"); code != http.StatusOK || !strings.Contains(body, `href="syslog"`) {
			t.Errorf("query unset: %d %.200q, want the listing", code, body)
		}
		do = serve(t, func(kc *kubeletconfigv1beta1.KubeletConfiguration) { kc.EnableSystemLogQuery = ptr.To(true) })
		want := "journal: --utc --no-pager --output=short-precise --unit=nodelet\n"
		if code, body := do("GET", "/logs/?query=nodelet"); code != http.StatusOK || body != want {
			t.Errorf("query on: %d %q, want %q", code, body, want)
		}
	})

	t.Run("false: not served, 405 endpoint is disabled as upstream", func(t *testing.T) {
		do := serve(t, func(kc *kubeletconfigv1beta1.KubeletConfiguration) {
			kc.EnableProfilingHandler = ptr.To(false)
			kc.EnableDebugFlagsHandler = ptr.To(false)
			kc.EnableSystemLogHandler = ptr.To(false)
		})
		for _, e := range endpoints {
			if code, body := do(e.method, e.path); code != http.StatusMethodNotAllowed || !strings.Contains(body, "endpoint is disabled.") {
				t.Errorf("%s %s: %d %q, want 405 endpoint is disabled", e.method, e.path, code, body)
			}
		}
	})

	t.Run("enableContentionProfiling: the block profile has samples", func(t *testing.T) {
		t.Cleanup(func() { runtime.SetBlockProfileRate(0) })
		do := serve(t, func(kc *kubeletconfigv1beta1.KubeletConfiguration) { kc.EnableContentionProfiling = true })
		ch := make(chan struct{})
		go func() { time.Sleep(20 * time.Millisecond); close(ch) }()
		<-ch // a blocking receive, recorded at rate 1
		if code, body := do("GET", "/debug/pprof/block?debug=1"); code != http.StatusOK || !strings.Contains(body, "TestDebugHandlersFollowConfig") {
			t.Errorf("block profile: %d, want a sample from this test:\n%.2000s", code, body)
		}
	})
}

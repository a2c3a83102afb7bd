package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

// lockedBuffer is a log sink written by many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// stateFile is one file nodelet keeps and reads back at start, with a valid
// content to corrupt.
type stateFile struct {
	dir   func(rootDir, certDir string) string // the dir the file is in
	name  string                               // its path below that dir
	valid string
}

// stateFiles are the files nodelet reads back at start from its root dir (and
// the cert dir); docs/on-disk.md lists them and how each is handled.
var stateFiles = []stateFile{
	{rootDir, allocation.AllocatedStateFile, `{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}`},
	{rootDir, allocation.ActuatedStateFile, `{"data":"{\"entries\":{\"pod1\":{\"ContainerResources\":{\"container1\":{\"requests\":{\"cpu\":\"1Ki\",\"memory\":\"1Ki\"}}}}}}","checksum":1178570812}`},
	{rootDir, "device-plugins/kubelet_internal_checkpoint", `{"Data":{"PodDeviceEntries":[{"PodUID":"pod1","ContainerName":"c","ResourceName":"example.com/gpu","DeviceIDs":{"-1":["g0"]},"AllocResp":null}],"RegisteredDevices":{"example.com/gpu":["g0"]}},"Checksum":2193228574}`},
	{rootDir, "image_gc_state.json", `{"images":{"sha256:aaaa":{"firstDetected":"2026-12-06T20:00:00Z","lastUsed":"2026-12-06T20:00:00Z"}}}`},
	{rootDir, "pods/uid-corrupt/userns", `{"uidMappings":[{"hostId":65536,"containerId":0,"length":65536}],"gidMappings":[{"hostId":65536,"containerId":0,"length":65536}]}`},
	{rootDir, "image_manager/pulled/sha256-" + strings.Repeat("a", 64), `{"kind":"ImagePulledRecord","apiVersion":"kubelet.config.k8s.io/v1beta1","imageRef":"sha256:aaaa","nodeWideCredentials":true}`},
	{rootDir, "image_manager/pulling/sha256-" + strings.Repeat("b", 64), `{"kind":"ImagePullIntent","apiVersion":"kubelet.config.k8s.io/v1beta1","image":"busybox:1"}`},
	// The self-signed serving certificate (no tlsCertFile, no rotation), in the cert dir.
	{certDir, "kubelet.crt", "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIBATAKBggqhkjOPQQDAjAAMB4XDTI2MTIwNjIwMDAwMFoX\n-----END CERTIFICATE-----\n"},
	{certDir, "kubelet.key", "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIB5vI0Yd2X8E6qQm1n9mJ9vR8c1p4kq0m8yF6sQm0xJ7oAoGCCqGSM49\n-----END EC PRIVATE KEY-----\n"},
}

func rootDir(root, _ string) string { return root }
func certDir(_, cert string) string { return cert }

// Issue 20 scenario 8: each file nodelet keeps under its root dir, truncated
// or filled with garbage before a start: nodelet starts, and its log names
// the file it ignored.
func TestCorruptStateFilesDoNotStopStart(t *testing.T) {
	for kind, corrupt := range map[string]func(string) []byte{
		"truncated": func(s string) []byte { return []byte(s[:len(s)/2]) },
		"garbage":   func(s string) []byte { return bytes.Repeat([]byte{0xde, 0xad, 0x00, '{'}, len(s)/4+1) },
	} {
		t.Run(kind, func(t *testing.T) {
			rt := fakecri.New(t)
			opts := testOptions(t, rt.Endpoint())
			opts.Config.ShutdownGracePeriod = metav1.Duration{}
			opts.Config.ShutdownGracePeriodCriticalPods = metav1.Duration{}
			var paths []string
			for _, f := range stateFiles {
				p := filepath.Join(f.dir(opts.RootDir, opts.CertDir), f.name)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, corrupt(f.valid), 0o600); err != nil {
					t.Fatal(err)
				}
				paths = append(paths, p)
			}
			// The global logger too: some loaders log without a context.
			logs := &lockedBuffer{}
			logger := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(logs)))
			klog.SetLogger(logger)
			defer klog.ClearLogger()
			ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
			defer cancel()
			a, err := build(ctx, opts, hostPaths{procSys: upstreamProcSys(t)})
			if err != nil {
				t.Fatalf("corrupt state files stopped the start: %v", err)
			}
			a.close(ctx)
			for _, p := range paths {
				if !strings.Contains(logs.String(), p) {
					t.Errorf("the log does not name the ignored file %s", p)
				}
			}
			if t.Failed() {
				t.Logf("log:\n%s", logs.String())
			}
		})
	}
}

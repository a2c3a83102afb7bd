package agent

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/nodelet/nodelet/allocation"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

// A corrupt allocation checkpoint does not stop nodelet (the pods it runs
// would be left unmanaged): the start goes on with the file set aside, and
// the log names it.
func TestCorruptAllocationCheckpointDoesNotStopStart(t *testing.T) {
	rt := fakecri.New(t)
	opts := testOptions(t, rt.Endpoint())
	opts.Config.ShutdownGracePeriod = metav1.Duration{}
	opts.Config.ShutdownGracePeriodCriticalPods = metav1.Duration{}
	path := filepath.Join(opts.RootDir, allocation.AllocatedStateFile)
	if err := os.WriteFile(path, []byte(`{"data":"{}","checksum":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(&logs)))))
	defer cancel()
	a, err := build(ctx, opts, hostPaths{procSys: upstreamProcSys(t)})
	if err != nil {
		t.Fatalf("a corrupt allocation checkpoint stopped the start: %v", err)
	}
	a.close(ctx)
	if !strings.Contains(logs.String(), "Ignoring a corrupt pod resource checkpoint") || !strings.Contains(logs.String(), path) {
		t.Errorf("the log does not name the ignored file:\n%s", logs.String())
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the corrupt checkpoint is still in place: %v", err)
	}
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// chattyScript prints 26 chunks of 2048 lines of 1010 bytes (51.3 MiB) over
// about 26s, waits for the last rotation of that, prints three short last
// lines and exits once; the restarted instance only says so and sleeps.
const chattyScript = `
if [ -e /data/ran ]; then echo "second instance"; exec sleep 3600; fi
pad=$(printf '%01000d' 0)
i=10
while [ $i -lt 36 ]; do
  yes "chunk $i $pad" | head -n 2048
  i=$((i+1))
  sleep 1
done
sleep 10
for j in 1 2 3; do echo "latest line $j"; done
touch /data/ran
sleep 2
exit 1
`

// TestContainerLogRotation: with containerLogMaxSize 1Mi and
// containerLogMaxFiles 3 (monitor interval 3s, upstream's minimum), a
// container printing 50 MiB never has more than 3 log files (the live one
// included; older ones gzipped), `kubectl logs --previous` of it shows its
// last lines after it restarted, and `kubectl logs` the new instance's.
func TestContainerLogRotation(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	n := startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.ContainerLogMaxSize = "1Mi"
		c.ContainerLogMaxFiles = ptr.To[int32](3)
		c.ContainerLogMonitorInterval = &metav1.Duration{Duration: 3 * time.Second}
	}})
	pod := f.BusyboxPod(ns, "chatty", "sh", "-c", chattyScript)
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "data", MountPath: "/data"}}
	pod.Spec.Volumes = []v1.Volume{{Name: "data", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	created := f.CreatePod(ctx, pod)
	logDir := filepath.Join(n.PodLogsDir, fmt.Sprintf("%s_%s_%s", ns, pod.Name, created.UID), "main")

	// Watch the first instance's files (0.log*) while it writes.
	var mu sync.Mutex
	var mostFiles int
	var mostLive, mostTotal int64
	var mostAt []string
	sample := func() {
		entries, err := os.ReadDir(logDir)
		if err != nil {
			return
		}
		files, total, live := 0, int64(0), int64(0)
		var names []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), "0.log") || strings.HasSuffix(e.Name(), ".tmp") {
				continue // a compression in progress is not a log file yet
			}
			info, err := e.Info()
			if err != nil {
				continue
			}
			files++
			total += info.Size()
			names = append(names, fmt.Sprintf("%s=%d", e.Name(), info.Size()))
			if e.Name() == "0.log" {
				live = info.Size()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if files > mostFiles {
			mostFiles, mostAt = files, names
		}
		mostLive, mostTotal = max(mostLive, live), max(mostTotal, total)
	}
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	start := time.Now()
	f.WaitForPod(ctx, ns, pod.Name, 3*time.Minute, "the chatty container's first exit and restart", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].RestartCount >= 1 && cs[0].State.Running != nil
	})
	close(stop)
	<-sampled
	elapsed := time.Since(start)

	entries, err := os.ReadDir(logDir)
	if err != nil {
		t.Fatal(err)
	}
	var first []string
	var gz int
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(e.Name(), "0.log") {
			first = append(first, fmt.Sprintf("%s=%d", e.Name(), info.Size()))
			if strings.HasSuffix(e.Name(), ".gz") {
				gz++
			}
		}
	}
	sort.Strings(first)
	rotations := strings.Count(n.Logs(), "Rotated container log")
	t.Logf("first instance (51.3 MiB printed in %.0fs until its restart): %d rotations; at most %d files at once %v; largest live file %d bytes, largest total %d bytes; at the end %v",
		elapsed.Seconds(), rotations, mostFiles, mostAt, mostLive, mostTotal, first)
	if mostFiles > 3 || len(first) > 3 {
		t.Errorf("containerLogMaxFiles 3: the first instance had %d files at once (%v), %d at the end (%v)", mostFiles, mostAt, len(first), first)
	}
	if rotations < 5 || gz == 0 {
		t.Errorf("50 MiB with containerLogMaxSize 1Mi: %d rotations and %d gzipped files; want several of each", rotations, gz)
	}
	if mostTotal > 50<<20 {
		t.Errorf("the first instance's logs reached %d bytes on disk: rotation did not bound them", mostTotal)
	}

	logs := func(previous bool) string {
		t.Helper()
		raw, err := f.Client.CoreV1().Pods(ns).GetLogs(pod.Name, &v1.PodLogOptions{Previous: previous, TailLines: ptr.To[int64](3)}).DoRaw(ctx)
		if err != nil {
			t.Fatalf("pods/log (previous %v): %v", previous, err)
		}
		return string(raw)
	}
	if got, want := logs(true), "latest line 1\nlatest line 2\nlatest line 3\n"; got != want {
		t.Errorf("kubectl logs --previous --tail 3 = %q, want the first instance's latest lines %q", got, want)
	}
	var cur string
	err = framework.WaitFor(ctx, 30*time.Second, "the second instance's line in pods/log", func(context.Context) (bool, error) {
		cur = logs(false)
		return cur == "second instance\n", nil
	})
	if err != nil {
		t.Errorf("%v: kubectl logs = %q", err, cur)
	}
}

//go:build bench

package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// quietWindow is how long relists are counted on a node where nothing changes.
const quietWindow = 2 * time.Second

// eventKills is BENCH_KILLS, default 20 (issue 19's 20 kills).
func eventKills() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_KILLS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// TestEventLatency kills containers from outside the agent (SIGKILL of the container's
// process, found through CRI's verbose ContainerStatus) and times each kill until the pod
// status in the API server shows the container terminated, seen through a watch of the
// pod: p50/p99/max over BENCH_KILLS kills (default 20; one pod each, restartPolicy Never,
// one kill at a time on an otherwise quiet node). Subtests: generic (the 1 s relist) and
// evented (featureGates EventedPLEG: true, which both agents take in the
// KubeletConfiguration). Each also counts the relists in a quiet 2 s window (from
// kubelet_pleg_relist_duration_seconds_count): about 2 when relisting every second, 0 when
// the runtime's events drive the PLEG and the relist is the 300 s safety net.
func TestEventLatency(t *testing.T) {
	for _, evented := range []bool{false, true} {
		mode := map[bool]string{false: "generic", true: "evented"}[evented]
		t.Run(mode, func(t *testing.T) { eventLatency(t, mode, evented) })
	}
}

func eventLatency(t *testing.T, mode string, evented bool) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	kills := eventKills()
	n := f.StartNodelet(framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		if evented {
			c.FeatureGates = map[string]bool{"EventedPLEG": true}
		}
	}})
	f.WaitForNodeReady(ctx, 2*time.Minute)

	names := make([]string, kills)
	for i := range names {
		names[i] = fmt.Sprintf("victim-%02d", i)
		p := sleepPod(f, ns, names[i])
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		f.CreatePod(ctx, p)
	}
	for _, name := range names {
		f.WaitForPod(ctx, ns, name, 3*time.Minute, "its container running", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
		})
	}
	time.Sleep(settle)

	// The quiet window: nothing changes, so only the periodic relist runs.
	c0 := agentHistogram(t, ctx, f, relistHistogram).count
	time.Sleep(quietWindow)
	c1 := agentHistogram(t, ctx, f, relistHistogram).count
	fmt.Printf("BENCH event %s: %.0f relists in a quiet %v with %d pods\n", mode, c1-c0, quietWindow, kills)
	if evented {
		m := agentMetrics(t, ctx, f)
		fmt.Printf("BENCH event %s: kubelet_evented_pleg_connection_success_count=%v kubelet_evented_pleg_connection_error_count=%v\n",
			mode, metricValue(m, "kubelet_evented_pleg_connection_success_count"), metricValue(m, "kubelet_evented_pleg_connection_error_count"))
	}

	var lat []time.Duration
	for i, name := range names {
		// Each kill on a quiet node (the last victim's teardown has been seen), at a phase
		// of the 1 s relist period a 1/kills further on than the last, so that the
		// generic PLEG's figures spread over its whole period instead of one phase.
		time.Sleep(2*time.Second + time.Duration(i)*time.Second/time.Duration(kills))
		lat = append(lat, f.KillAndWatch(ctx, ns, name))
	}
	slices.Sort(lat)
	var ms []string
	for _, d := range lat {
		ms = append(ms, strconv.FormatInt(d.Milliseconds(), 10))
	}
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	fmt.Printf("BENCH event %s: kill -> pod status terminated p50=%v p99=%v max=%v over %d kills (ms: %s)\n",
		mode, r(percentile(lat, .5)), r(percentile(lat, .99)), r(lat[len(lat)-1]), len(lat), strings.Join(ms, " "))
	if evented {
		// Upstream's message, which nodelet logs too.
		if strings.Contains(n.Logs(), "Fall back to Generic PLEG relisting") {
			fmt.Printf("BENCH event %s: the agent fell back to relisting during the run (see %s)\n", mode, n.LogPath)
		}
	}
}

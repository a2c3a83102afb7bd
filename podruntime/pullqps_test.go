package podruntime

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
	"github.com/nodelet/nodelet/pleg"
)

// registryPullQPS/registryBurst: a token bucket over pulls. A pull finding it
// empty fails at once with upstream's "pull QPS exceeded" (ErrImagePull, a
// Failed event), without reaching the runtime; tokens come back at qps.
func TestRegistryPullQPS(t *testing.T) {
	ctx := context.Background()
	type outcome struct {
		pulled bool
		reason string
		msg    string
	}
	newRig := func(qps float64, burst int) (func() outcome, *clocktesting.FakeClock, *record.FakeRecorder) {
		fake := fakecri.New(t)
		client, err := cri.New(ctx, fake.Endpoint(), "", 10*time.Second)
		if err != nil {
			t.Fatalf("connecting to the fake runtime: %v", err)
		}
		t.Cleanup(func() { _ = client.Close(context.Background()) })
		clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC))
		rec := record.NewFakeRecorder(1000)
		root := t.TempDir()
		m := New(Config{RootDir: root, PodLogsDir: filepath.Join(root, "logs"), RegistryPullQPS: qps, RegistryBurst: burst}, Deps{Runtime: client, Images: client, Volumes: noVolumes{}, Env: fakeSecrets{}, Node: func() NodeFacts { return NodeFacts{Name: "node1"} }, Recorder: rec, Clock: clk})
		n := 0
		return func() outcome {
			n++
			uid := types.UID("qps-" + strings.Repeat("x", n))
			pod := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: string(uid), UID: uid},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "reg.example.com/app:1",
					ImagePullPolicy: v1.PullAlways}}},
			}
			fake.ResetCalls()
			res, _ := m.SyncPod(ctx, pod, &pleg.PodStatus{})
			o := outcome{pulled: slices.Contains(fake.Calls(), "PullImage")}
			if w, ok := res.Waiting["app"]; ok {
				o.reason, o.msg = w.Reason, w.Message
			}
			return o
		}, clk, rec
	}

	t.Run("burst then refused until a token comes back", func(t *testing.T) {
		run, clk, rec := newRig(1, 2)
		for i := range 2 {
			if o := run(); !o.pulled || o.reason != "" {
				t.Fatalf("pull %d within the burst: got %+v, want a pull", i+1, o)
			}
		}
		o := run()
		if o.pulled || o.reason != "ErrImagePull" || o.msg != "pull QPS exceeded" {
			t.Fatalf("third pull at once: got %+v, want ErrImagePull %q without a runtime pull", o, "pull QPS exceeded")
		}
		found := false
		for len(rec.Events) > 0 {
			if e := <-rec.Events; strings.Contains(e, `Failed to pull image "reg.example.com/app:1": pull QPS exceeded`) {
				found = true
			}
		}
		if !found {
			t.Error("no Failed event naming pull QPS exceeded")
		}
		clk.Step(time.Second)
		if o := run(); !o.pulled || o.reason != "" {
			t.Fatalf("after 1s at 1 QPS: got %+v, want a pull", o)
		}
	})

	t.Run("0 QPS is no limit", func(t *testing.T) {
		run, _, _ := newRig(0, 0)
		for i := range 20 {
			if o := run(); !o.pulled || o.reason != "" {
				t.Fatalf("pull %d with registryPullQPS 0: got %+v, want a pull", i+1, o)
			}
		}
	})
}

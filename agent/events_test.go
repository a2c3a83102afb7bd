package agent

import (
	"testing"

	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/config"
)

// eventRecordQPS/eventBurst limit the client events are sent on (its own client,
// as upstream); 0 QPS is no limit. The main client keeps kubeAPIQPS/kubeAPIBurst.
func TestEventRecordQPS(t *testing.T) {
	for _, tc := range []struct {
		name        string
		qps         *int32
		burst       int32
		wantQPS     float32 // 0: no rate limiter at all
		wantBurst   int
		wantLimiter bool
	}{
		{name: "upstream defaults when unset", qps: nil, burst: 0, wantQPS: 50, wantBurst: 100, wantLimiter: true},
		{name: "set", qps: ptr.To[int32](7), burst: 3, wantQPS: 7, wantBurst: 3, wantLimiter: true},
		{name: "0 is no limit", qps: ptr.To[int32](0), burst: 3, wantLimiter: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kc := &kubeletconfigv1beta1.KubeletConfiguration{EventRecordQPS: tc.qps, EventBurst: tc.burst, KubeAPIQPS: ptr.To[int32](11), KubeAPIBurst: 22}
			rc := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 11, Burst: 22}
			ec := eventClientConfig(rc, config.Resolve(kc).APIClient)
			if rc.QPS != 11 || rc.Burst != 22 {
				t.Fatalf("the main client's config changed: qps %v burst %v", rc.QPS, rc.Burst)
			}
			client, err := newEventClient(rc, config.Resolve(kc).APIClient)
			if err != nil {
				t.Fatal(err)
			}
			lim := client.CoreV1().RESTClient().GetRateLimiter()
			if !tc.wantLimiter {
				if ec.QPS >= 0 || lim != nil {
					t.Fatalf("eventRecordQPS 0: QPS %v, limiter %v; want no limiter", ec.QPS, lim)
				}
				return
			}
			if lim == nil {
				t.Fatal("no rate limiter on the event client")
			}
			if lim.QPS() != tc.wantQPS || ec.Burst != tc.wantBurst {
				t.Fatalf("event client: QPS %v burst %d, want %v and %d", lim.QPS(), ec.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/server"
)

type alwaysHealthy struct{}

func (alwaysHealthy) Healthy() error { return nil }

// taken says whether something listens on port (we cannot listen on it ourselves).
func taken(t *testing.T, port int32) bool {
	t.Helper()
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return true
	}
	ln.Close()
	return false
}

func serverTestConfig(enable bool, port, readOnly int32) *kubeletconfigv1beta1.KubeletConfiguration {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{EnableServer: ptr.To(enable), Address: "127.0.0.1", Port: port, ReadOnlyPort: readOnly}
	kc.Authorization.Mode = kubeletconfigv1beta1.KubeletAuthorizationModeAlwaysAllow
	kc.Authentication.Webhook.Enabled = ptr.To(false) // no API client here
	return kc
}

// newTestAPIServer is newAPIServer with kc's resolved server settings, as build passes them.
func newTestAPIServer(ctx context.Context, kc *kubeletconfigv1beta1.KubeletConfiguration, d apiServerDeps) (*server.Listeners, error) {
	return newAPIServer(ctx, kc, config.Resolve(kc).Server, d)
}

func serverTestDeps() apiServerDeps {
	return apiServerDeps{nodeName: "node-a", pods: func() []*v1.Pod { return nil },
		podStatus: func(types.UID) (v1.PodStatus, bool) { return v1.PodStatus{}, false },
		pleg:      alwaysHealthy{}, loop: alwaysHealthy{}, metrics: prometheus.NewRegistry(), clock: clocktesting.NewFakeClock(time.Now())}
}

// TestEnableServerFalseServesNothing: enableServer: false opens no kubelet API port;
// as upstream, readOnlyPort is served on its own setting.
func TestEnableServerFalseServesNothing(t *testing.T) {
	ctx := context.Background()

	t.Run("enabled: the port is taken (the control)", func(t *testing.T) {
		port := freePort(t)
		l, err := newTestAPIServer(ctx, serverTestConfig(true, port, 0), serverTestDeps())
		if err != nil || l == nil {
			t.Fatalf("newAPIServer = %v, %v", l, err)
		}
		defer l.Close()
		if !taken(t, port) {
			t.Fatalf("port %d is free with enableServer true", port)
		}
	})

	t.Run("disabled: nothing is opened", func(t *testing.T) {
		port := freePort(t)
		l, err := newTestAPIServer(ctx, serverTestConfig(false, port, 0), serverTestDeps())
		if err != nil || l != nil {
			t.Fatalf("newAPIServer = %v, %v; want no ports and no error", l, err)
		}
		if taken(t, port) {
			t.Fatalf("port %d is taken with enableServer false", port)
		}
	})

	t.Run("disabled with readOnlyPort: only the read-only port", func(t *testing.T) {
		port, ro := freePort(t), freePort(t)
		l, err := newTestAPIServer(ctx, serverTestConfig(false, port, ro), serverTestDeps())
		if err != nil || l == nil {
			t.Fatalf("newAPIServer = %v, %v", l, err)
		}
		sctx, cancel := context.WithCancel(ctx)
		served := make(chan struct{})
		go func() { l.Serve(sctx); close(served) }()
		defer func() { cancel(); <-served }()
		if taken(t, port) {
			t.Errorf("port %d is taken with enableServer false", port)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", ro))
		if err != nil {
			t.Fatalf("the read-only port: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || string(body) != "ok" {
			t.Errorf("read-only /healthz = %d %q", resp.StatusCode, body)
		}
	})

	t.Run("an invalid tlsCurvePreferences is refused even when nothing is served", func(t *testing.T) {
		kc := serverTestConfig(false, 0, 0)
		kc.TLSCurvePreferences = []int32{9999}
		if _, err := newTestAPIServer(ctx, kc, serverTestDeps()); err == nil || !strings.Contains(err.Error(), "tlsCurvePreferences") {
			t.Fatalf("err = %v, want one naming tlsCurvePreferences", err)
		}
	})
}

// TestConfigzMasksStaticPodURLHeader: /configz shows the keys of staticPodURLHeader
// but masks their values, as upstream; the running configuration keeps them.
func TestConfigzMasksStaticPodURLHeader(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{StaticPodURL: "https://pods.example/x",
		StaticPodURLHeader: map[string][]string{"Authorization": {"Bearer s3cret"}, "X-Two": {"a", "b"}}}
	c := configz(kc)
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"s3cret", `"a"`, `"b"`} {
		if strings.Contains(string(data), secret) {
			t.Errorf("/configz shows %s: %s", secret, data)
		}
	}
	if !strings.Contains(string(data), `"staticPodURLHeader":{"Authorization":["\u003cmasked\u003e"],"X-Two":["\u003cmasked\u003e"]}`) {
		t.Errorf("/configz does not show both keys masked: %s", data)
	}
	if kc.StaticPodURLHeader["Authorization"][0] != "Bearer s3cret" {
		t.Error("masking changed the running configuration")
	}
}

package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/config"
)

// TestAPIClientFromKubeletConfig: kubeAPIQPS, kubeAPIBurst and contentType
// configure the main API client (the heartbeat client is unthrottled).
func TestAPIClientFromKubeletConfig(t *testing.T) {
	var mu sync.Mutex
	var accept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accept = r.Header.Get("Accept")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Node","apiVersion":"v1","metadata":{"name":"n"}}`))
	}))
	defer srv.Close()
	lastAccept := func() string {
		mu.Lock()
		defer mu.Unlock()
		return accept
	}

	kc := &kubeletconfigv1beta1.KubeletConfiguration{KubeAPIQPS: ptr.To[int32](7), KubeAPIBurst: 9, ContentType: "application/json"}
	config.SetDefaults(kc)
	client, heartbeat, err := newClientsForConfig(&rest.Config{Host: srv.URL}, config.Resolve(kc).APIClient)
	if err != nil {
		t.Fatal(err)
	}
	if got := client.CoreV1().RESTClient().GetRateLimiter().QPS(); got != 7 {
		t.Errorf("main client QPS = %v, want kubeAPIQPS 7", got)
	}
	if rl := heartbeat.CoreV1().RESTClient().GetRateLimiter(); rl != nil && rl.QPS() == 7 {
		t.Errorf("the heartbeat client must not share kubeAPIQPS")
	}
	if _, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := lastAccept(); !strings.HasPrefix(got, "application/json") {
		t.Errorf("Accept = %q, want contentType application/json first", got)
	}

	// The upstream default is protobuf.
	def := &kubeletconfigv1beta1.KubeletConfiguration{}
	config.SetDefaults(def)
	client, _, err = newClientsForConfig(&rest.Config{Host: srv.URL}, config.Resolve(def).APIClient)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Get(context.Background(), "n", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := lastAccept(); !strings.HasPrefix(got, "application/vnd.kubernetes.protobuf") {
		t.Errorf("Accept = %q with the default contentType, want protobuf first", got)
	}
}

// TestHealthzServerFromKubeletConfig: healthzBindAddress and healthzPort say
// where /healthz is served; port 0 serves none.
func TestHealthzServerFromKubeletConfig(t *testing.T) {
	kc := &kubeletconfigv1beta1.KubeletConfiguration{HealthzBindAddress: "127.0.0.2", HealthzPort: ptr.To[int32](12345)}
	config.SetDefaults(kc)
	if s := newHealthzServer(kc, nil, nil, nil); s == nil || s.addr != "127.0.0.2:12345" {
		t.Errorf("healthz server %+v, want one on 127.0.0.2:12345", s)
	}
	kc.HealthzPort = ptr.To[int32](0)
	if s := newHealthzServer(kc, nil, nil, nil); s != nil {
		t.Errorf("healthzPort 0 must serve no healthz, got %+v", s)
	}
}

package agent

import (
	"context"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/node"
)

type versionOnly struct{}

func (versionOnly) Version(context.Context, string) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{RuntimeName: "containerd", RuntimeVersion: "2.1.0"}, nil
}

// An API server that accepts the Node and then never answers a status update
// (what a half-dead connection looks like from the client): the timeouts only
// reset HTTP/2 streams, so the connection stays until nodelet closes it after
// repeated heartbeat failures, as upstream does (issue 14, item 9).
func TestRepeatedHeartbeatFailuresCloseConnections(t *testing.T) {
	type connKey struct{}
	var mu sync.Mutex
	statusGets := 0
	carried := map[net.Conn]bool{} // connections that carried a status update
	closed := make(chan int, 16)   // status GETs seen when one of those closed
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/nodes" {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write(body)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/api/v1/nodes/n1" {
			mu.Lock()
			statusGets++
			carried[r.Context().Value(connKey{}).(net.Conn)] = true
			mu.Unlock()
		}
		<-r.Context().Done() // no answer, ever
	}))
	srv.EnableHTTP2 = true
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context { return context.WithValue(ctx, connKey{}, c) }
	// Only a connection that carried heartbeats counts: the HTTP/2 transport also
	// closes surplus connections it dialed concurrently at the start.
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			mu.Lock()
			if carried[c] {
				closed <- statusGets
			}
			mu.Unlock()
		}
	}
	srv.StartTLS()
	defer srv.Close()

	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "`+srv.URL+`", certificate-authority: ca.crt}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	credential, err := newClientCredential(ctx, &config.Options{Kubeconfig: kubeconfig, CertDir: dir, Config: &kubeletconfigv1beta1.KubeletConfiguration{}}, "n1", nil)
	if err != nil {
		t.Fatal(err)
	}
	kc := &kubeletconfigv1beta1.KubeletConfiguration{
		NodeStatusUpdateFrequency: metav1.Duration{Duration: 200 * time.Millisecond}, // also the heartbeat client's timeout
		NodeStatusReportFrequency: metav1.Duration{Duration: time.Minute},
		NodeLeaseDurationSeconds:  40,
		ContentType:               "application/json", // the fake server echoes the Node back
	}
	client, heartbeat, err := newClientsForConfig(credential.RESTConfig(), config.Resolve(kc).APIClient)
	if err != nil {
		t.Fatal(err)
	}
	ctl, err := node.New(client, heartbeat, node.Config{NodeName: "n1", Settings: config.Resolve(kc).Node}, versionOnly{}, nil, clock.RealClock{},
		node.WithMachineInfo(node.MachineInfo{NumCores: 1, MemoryCapacity: 1 << 30}), heartbeatReset(credential))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); ctl.Run(ctx) }()
	defer func() { cancel(); <-done }()

	select {
	case gets := <-closed:
		if gets < 2 {
			t.Fatalf("a connection closed after %d failed status updates, want it closed after repeated ones (2)", gets)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no connection to the API server was closed after repeated heartbeat failures")
	}
}

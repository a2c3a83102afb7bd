package certificate

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/certificate"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func TestNewClientDecision(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	const server = "https://127.0.0.1:1"
	for _, tc := range []struct {
		name string
		// prepare writes the node's files before the start.
		prepare          func(t *testing.T, kubeconfig, certDir string)
		bootstrap        bool
		rotate           bool
		wantCSRs         int
		wantKubeconfigTo string // "unchanged" or "cert-dir"
	}{
		{
			name: "kubeconfig only",
			prepare: func(t *testing.T, kc, _ string) {
				c, k := ca.clientPair(t, testNode, now.Add(-time.Hour), now.Add(time.Hour))
				writeKubeconfigFile(t, kc, server, ca.certPEM, "", c, k)
			},
			wantKubeconfigTo: "unchanged",
		},
		{
			name: "kubeconfig only, even expired: no bootstrap without a bootstrap kubeconfig",
			prepare: func(t *testing.T, kc, _ string) {
				c, k := ca.clientPair(t, testNode, now.Add(-2*time.Hour), now.Add(-time.Hour))
				writeKubeconfigFile(t, kc, server, ca.certPEM, "", c, k)
			},
			wantKubeconfigTo: "unchanged",
		},
		{
			name: "both, kubeconfig valid: bootstrap kubeconfig ignored",
			prepare: func(t *testing.T, kc, _ string) {
				c, k := ca.clientPair(t, testNode, now.Add(-time.Hour), now.Add(time.Hour))
				writeKubeconfigFile(t, kc, server, ca.certPEM, "", c, k)
			},
			bootstrap:        true,
			wantKubeconfigTo: "unchanged",
		},
		{
			name:             "bootstrap, no kubeconfig",
			prepare:          func(*testing.T, string, string) {},
			bootstrap:        true,
			wantCSRs:         1,
			wantKubeconfigTo: "cert-dir",
		},
		{
			name: "bootstrap, kubeconfig expired",
			prepare: func(t *testing.T, kc, _ string) {
				c, k := ca.clientPair(t, testNode, now.Add(-2*time.Hour), now.Add(-time.Hour))
				writeKubeconfigFile(t, kc, server, ca.certPEM, "", c, k)
			},
			bootstrap:        true,
			wantCSRs:         1,
			wantKubeconfigTo: "cert-dir",
		},
		{
			name: "rotation, no kubeconfig, valid pair in the cert dir: reused",
			prepare: func(t *testing.T, _, certDir string) {
				c, k := ca.clientPair(t, testNode, now.Add(-time.Hour), now.Add(time.Hour))
				store, err := certificate.NewFileStore(clientPairPrefix, certDir, certDir, "", "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := store.Update(c, k); err != nil {
					t.Fatal(err)
				}
			},
			bootstrap:        true,
			rotate:           true,
			wantKubeconfigTo: "cert-dir",
		},
		{
			name: "no rotation, no kubeconfig, valid pair in the cert dir: a new CSR, as upstream",
			prepare: func(t *testing.T, _, certDir string) {
				c, k := ca.clientPair(t, testNode, now.Add(-time.Hour), now.Add(time.Hour))
				store, _ := certificate.NewFileStore(clientPairPrefix, certDir, certDir, "", "")
				if _, err := store.Update(c, k); err != nil {
					t.Fatal(err)
				}
			},
			bootstrap:        true,
			wantCSRs:         1,
			wantKubeconfigTo: "cert-dir",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			kubeconfig := filepath.Join(dir, "kubelet.conf")
			certDir := filepath.Join(dir, "pki")
			tc.prepare(t, kubeconfig, certDir)
			before, _ := os.ReadFile(kubeconfig)
			opts := ClientOptions{Kubeconfig: kubeconfig, CertDir: certDir, NodeName: testNode, RotateCertificates: tc.rotate}
			cp := newFakeControlPlane(t, ca, time.Hour)
			opts.NewClient = func(*rest.Config) (kubernetes.Interface, error) { return cp, nil }
			if tc.bootstrap {
				opts.BootstrapKubeconfig = filepath.Join(dir, "bootstrap-kubelet.conf")
				writeKubeconfigFile(t, opts.BootstrapKubeconfig, server, ca.certPEM, "abcdef.0123456789abcdef", nil, nil)
			}
			fc := testingclock.NewFakeClock(now)
			runClock(t, fc)
			opts.Clock = fc
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c, err := NewClient(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := len(cp.createdNames()); got != tc.wantCSRs {
				t.Errorf("%d CSRs created, want %d", got, tc.wantCSRs)
			}
			after, err := os.ReadFile(kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			current := filepath.Join(certDir, "kubelet-client-current.pem")
			switch tc.wantKubeconfigTo {
			case "unchanged":
				if !bytes.Equal(before, after) {
					t.Errorf("kubeconfig was rewritten:\n%s", after)
				}
			case "cert-dir":
				cfg, err := LoadRESTConfig(kubeconfig)
				if err != nil {
					t.Fatal(err)
				}
				if cfg.CertFile != current || cfg.KeyFile != current || cfg.Host != server || len(cfg.CAData) == 0 {
					t.Errorf("kubeconfig points at cert %q key %q host %q (CA %d bytes), want %s on %s", cfg.CertFile, cfg.KeyFile, cfg.Host, len(cfg.CAData), current, server)
				}
				if m := fileMode(t, kubeconfig); m != 0o600 {
					t.Errorf("kubeconfig mode %o, want 600", m)
				}
				target, err := os.Readlink(current)
				if err != nil || !strings.HasPrefix(filepath.Base(target), "kubelet-client-") {
					t.Errorf("%s is not a symlink to a dated file: %q %v", current, target, err)
				}
				if m := fileMode(t, current); m != 0o600 {
					t.Errorf("client certificate+key file mode %o, want 600", m)
				}
				leaf := readCertFile(t, current)
				if leaf.Subject.CommonName != "system:node:"+testNode || len(leaf.Subject.Organization) != 1 || leaf.Subject.Organization[0] != "system:nodes" {
					t.Errorf("client certificate subject %v", leaf.Subject)
				}
				if _, err := os.Stat(filepath.Join(certDir, pendingKeyFile)); !os.IsNotExist(err) {
					t.Errorf("the pending key is left behind after success: %v", err)
				}
			}
			rc := c.RESTConfig()
			if tc.rotate {
				if rc.Transport == nil || len(rc.CertData) > 0 || rc.CertFile != "" {
					t.Errorf("rotation on: want a rotating transport and no static credential, got %+v", rc.TLSClientConfig)
				}
			} else if rc.Transport != nil {
				t.Errorf("rotation off: want the kubeconfig's own credential, got a custom transport")
			}
		})
	}
}

// The rotating transport presents the new certificate on the next request
// after a rotation, over HTTP/2 (one shared connection), without a restart;
// the TTL metric follows.
func TestClientRotationUsesNewCertificate(t *testing.T) {
	ca := newTestCA(t)
	var mu sync.Mutex
	var seen []*big.Int
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if len(r.TLS.PeerCertificates) > 0 {
			seen = append(seen, r.TLS.PeerCertificates[0].SerialNumber)
		} else {
			seen = append(seen, nil)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	ts.EnableHTTP2 = true
	ts.TLS = &tls.Config{ClientAuth: tls.RequestClientCert}
	ts.StartTLS()
	defer ts.Close()
	serverCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})

	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	// A certificate past its rotation deadline (70–90% of its lifetime).
	now := time.Now()
	oldCert, oldKey := ca.clientPair(t, testNode, now.Add(-10*time.Minute), now.Add(time.Minute))
	certFile, keyFile := filepath.Join(dir, "old.crt"), filepath.Join(dir, "old.key")
	os.WriteFile(certFile, oldCert, 0o600)
	os.WriteFile(keyFile, oldKey, 0o600)
	os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: '"+ts.URL+"', certificate-authority-data: '"+b64(serverCA)+"'}}]\nusers: [{name: u, user: {client-certificate: "+certFile+", client-key: "+keyFile+"}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"), 0o600)

	cp := newFakeControlPlane(t, ca, time.Hour)
	reg := prometheus.NewRegistry()
	c, err := NewClient(context.Background(), ClientOptions{
		Kubeconfig: kubeconfig, CertDir: filepath.Join(dir, "pki"), NodeName: testNode, RotateCertificates: true,
		Registerer: reg,
		NewClient:  func(*rest.Config) (kubernetes.Interface, error) { return cp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	get := func() *big.Int {
		t.Helper()
		if _, err := cs.Discovery().RESTClient().Get().AbsPath("/ping").DoRaw(ctx); err != nil {
			t.Fatalf("request: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		return seen[len(seen)-1]
	}
	oldSerial := readPEMCert(t, oldCert).SerialNumber
	if got := get(); got == nil || got.Cmp(oldSerial) != 0 {
		t.Fatalf("before rotation the server saw serial %v, want the kubeconfig's %v", got, oldSerial)
	}
	if v := metricValue(t, reg, "kubelet_certificate_manager_client_ttl_seconds"); v > 61 || v < 0 {
		t.Errorf("ttl before rotation = %v, want <= 60s", v)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(runCtx, nil) }()
	defer func() { stop(); <-done }()
	eventually.True(t, "a rotated certificate", func() bool { cur := c.Current(); return cur != nil && cur.Leaf.SerialNumber.Cmp(oldSerial) != 0 })
	newSerial := c.Current().Leaf.SerialNumber
	// Run closes the connections within a second of the change.
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := get()
		if got != nil && got.Cmp(newSerial) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after rotation the server still sees serial %v, want %v", got, newSerial)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if v := metricValue(t, reg, "kubelet_certificate_manager_client_ttl_seconds"); v < 3500 || v > 3600 {
		t.Errorf("ttl after rotation = %v, want about an hour", v)
	}
	if n := len(cp.createdNames()); n != 1 {
		t.Errorf("%d CSRs for one rotation", n)
	}
	cur := readCertFile(t, filepath.Join(dir, "pki", "kubelet-client-current.pem"))
	if cur.SerialNumber.Cmp(newSerial) != 0 {
		t.Errorf("kubelet-client-current.pem holds serial %v, want %v", cur.SerialNumber, newSerial)
	}
}

// A renewal that is refused is counted, logged and reported on the Node.
func TestClientRenewalFailureIsReported(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	now := time.Now()
	c0, k0 := ca.clientPair(t, testNode, now.Add(-10*time.Minute), now.Add(time.Minute))
	writeKubeconfigFile(t, kubeconfig, "https://127.0.0.1:1", ca.certPEM, "", c0, k0)
	cp := newFakeControlPlane(t, ca, time.Hour, deny)
	reg := prometheus.NewRegistry()
	c, err := NewClient(context.Background(), ClientOptions{
		Kubeconfig: kubeconfig, CertDir: filepath.Join(dir, "pki"), NodeName: testNode, RotateCertificates: true,
		Registerer: reg,
		NewClient:  func(*rest.Config) (kubernetes.Interface, error) { return cp, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, rec) }()
	defer func() { cancel(); <-done }()
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning ClientCertificateRenewalFailed Could not renew the client certificate (the current one expires at") {
			t.Errorf("event %q", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no event for a denied renewal")
	}
	if v := metricValue(t, reg, "kubelet_certificate_manager_client_expiration_renew_errors"); v < 1 {
		t.Errorf("renew errors = %v, want >= 1", v)
	}
}

func readPEMCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	b, _ := pem.Decode(data)
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// metricValue is the value of the single gauge or counter called name.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.Metric) == 1 {
			m := mf.Metric[0]
			if g := m.GetGauge(); g != nil {
				return g.GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("metric %s not registered", name)
	return 0
}

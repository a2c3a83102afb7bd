package certificate

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

func TestServingTemplate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		addrs   []v1.NodeAddress
		wantNil bool
		wantDNS []string
		wantIPs []string
	}{
		{name: "no addresses yet", wantNil: true},
		{name: "hostname only: no request, as upstream", addrs: []v1.NodeAddress{{Type: v1.NodeHostName, Address: "host-a"}}, wantNil: true},
		{
			name: "addresses and node name, deduplicated and sorted",
			addrs: []v1.NodeAddress{
				{Type: v1.NodeInternalIP, Address: "10.0.0.2"},
				{Type: v1.NodeExternalIP, Address: "192.0.2.1"},
				{Type: v1.NodeInternalIP, Address: "10.0.0.2"},
				{Type: v1.NodeHostName, Address: "host-a"},
				{Type: v1.NodeInternalDNS, Address: "host-a.example"},
				{Type: v1.NodeInternalIP, Address: "not-an-ip"},
			},
			wantDNS: []string{"host-a", "host-a.example", testNode},
			wantIPs: []string{"10.0.0.2", "192.0.2.1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := servingTemplate(testNode, tc.addrs)
			if tc.wantNil {
				if got != nil {
					t.Fatalf("template %+v, want none", got)
				}
				return
			}
			if got.Subject.CommonName != "system:node:"+testNode || !reflect.DeepEqual(got.Subject.Organization, []string{"system:nodes"}) {
				t.Errorf("subject %v", got.Subject)
			}
			var ips []string
			for _, ip := range got.IPAddresses {
				ips = append(ips, ip.String())
			}
			if !reflect.DeepEqual(got.DNSNames, tc.wantDNS) || !reflect.DeepEqual(ips, tc.wantIPs) {
				t.Errorf("SANs DNS %v IP %v, want %v %v", got.DNSNames, ips, tc.wantDNS, tc.wantIPs)
			}
		})
	}
}

func TestServingSelfSigned(t *testing.T) {
	dir := t.TempDir()
	opts := ServingOptions{NodeName: testNode, Hostname: "host-a", CertDir: dir}
	s, err := NewServing(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Leaf.VerifyHostname("host-a"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}
	if m := fileMode(t, filepath.Join(dir, "kubelet.key")); m != 0o600 {
		t.Errorf("kubelet.key mode %o", m)
	}
	first, _ := os.ReadFile(filepath.Join(dir, "kubelet.crt"))
	if _, err := NewServing(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	again, _ := os.ReadFile(filepath.Join(dir, "kubelet.crt"))
	if !bytes.Equal(first, again) {
		t.Error("a second start replaced the self-signed certificate")
	}
}

func TestServingFilesReloaded(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c1, k1 := ca.clientPair(t, testNode, time.Now(), time.Now().Add(time.Hour))
	os.WriteFile(certFile, c1, 0o644)
	os.WriteFile(keyFile, k1, 0o600)
	fc := testingclock.NewFakeClock(time.Now())
	s, err := NewServing(context.Background(), ServingOptions{NodeName: testNode, CertDir: dir, TLSCertFile: certFile, TLSPrivateKeyFile: keyFile, Clock: fc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet.crt")); !os.IsNotExist(err) {
		t.Error("a self-signed pair was written although tlsCertFile is set")
	}
	serial1 := s.Current().Leaf.SerialNumber
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()

	// A half-written pair (new cert, old key) is refused; the old pair stays.
	c2, k2 := ca.clientPair(t, testNode, time.Now(), time.Now().Add(2*time.Hour))
	os.WriteFile(certFile, c2, 0o644)
	eventually.True(t, "the rotation timer", fc.HasWaiters)
	fc.Step(11 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if got := s.Current().Leaf.SerialNumber; got.Cmp(serial1) != 0 {
		t.Fatalf("serial %v after a mismatched write, want the old %v", got, serial1)
	}
	os.WriteFile(keyFile, k2, 0o600)
	want := readPEMCert(t, c2).SerialNumber
	eventually.True(t, "the new serving certificate", func() bool {
		if fc.HasWaiters() {
			fc.Step(11 * time.Second)
		}
		return s.Current().Leaf.SerialNumber.Cmp(want) == 0
	})
}

func TestServingBootstrap(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	cp := newFakeControlPlane(t, ca, time.Hour)
	addrs := []v1.NodeAddress{{Type: v1.NodeInternalIP, Address: "10.0.0.2"}, {Type: v1.NodeHostName, Address: testNode}}
	reg := prometheus.NewRegistry()
	s, err := NewServing(context.Background(), ServingOptions{
		NodeName: testNode, CertDir: dir, ServerTLSBootstrap: true, Client: cp,
		NodeAddresses: func() []v1.NodeAddress { return addrs }, Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetCertificate(nil); err == nil {
		t.Error("GetCertificate before any CSR was issued: want an error")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, nil) }()
	defer func() { cancel(); <-done }()
	eventually.True(t, "a serving certificate", func() bool { return s.Current() != nil })

	if len(cp.csrs) != 1 {
		t.Fatalf("%d serving CSRs", len(cp.csrs))
	}
	c := cp.csrs[0]
	if c.Spec.SignerName != certificatesv1.KubeletServingSignerName {
		t.Errorf("signer %q", c.Spec.SignerName)
	}
	if !reflect.DeepEqual(c.Spec.Usages, []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth}) {
		t.Errorf("usages %v (ECDSA key: digital signature + server auth)", c.Spec.Usages)
	}
	block, _ := pem.Decode(c.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(req.DNSNames, []string{testNode}) || len(req.IPAddresses) != 1 || !req.IPAddresses[0].Equal(net.ParseIP("10.0.0.2")) {
		t.Errorf("CSR SANs %v %v", req.DNSNames, req.IPAddresses)
	}
	got, err := s.GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	if _, err := got.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: testNode, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("serving certificate does not verify: %v", err)
	}
	onDisk := readCertFile(t, filepath.Join(dir, "kubelet-server-current.pem"))
	if onDisk.SerialNumber.Cmp(got.Leaf.SerialNumber) != 0 {
		t.Error("kubelet-server-current.pem is not the certificate served")
	}
	if v := metricValue(t, reg, "kubelet_certificate_manager_server_ttl_seconds"); v < 3500 || v > 3600 {
		t.Errorf("server ttl %v", v)
	}
}

// corruptions of a self-signed pair that nodelet generated: what a crash
// while writing it, or between writing its two files, leaves.
func selfSignedCorruptions(t *testing.T) map[string]func(certFile, keyFile string) {
	otherCert, otherKey, err := certutil.GenerateSelfSignedCertKey("other", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cut := func(path string) {
		data, _ := os.ReadFile(path)
		os.WriteFile(path, data[:len(data)/2], 0o644)
	}
	return map[string]func(string, string){
		"both empty":          func(c, k string) { os.WriteFile(c, nil, 0o644); os.WriteFile(k, nil, 0o644) },
		"certificate empty":   func(c, k string) { os.WriteFile(c, nil, 0o644) },
		"key empty":           func(c, k string) { os.WriteFile(k, nil, 0o644) },
		"certificate cut":     func(c, k string) { cut(c) },
		"key cut":             func(c, k string) { cut(k) },
		"key of another pair": func(c, k string) { os.WriteFile(k, otherKey, 0o644) },
		"cert of another run": func(c, k string) { os.WriteFile(c, otherCert, 0o644) },
		"certificate missing": func(c, k string) { os.Remove(c) },
	}
}

func TestServingSelfSignedRegeneratedWhenUnusable(t *testing.T) {
	for name, corrupt := range selfSignedCorruptions(t) {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			opts := ServingOptions{NodeName: testNode, Hostname: "host-a", CertDir: dir}
			if _, err := NewServing(context.Background(), opts); err != nil {
				t.Fatal(err)
			}
			certFile, keyFile := filepath.Join(dir, "kubelet.crt"), filepath.Join(dir, "kubelet.key")
			corrupt(certFile, keyFile)

			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			s, err := NewServing(klog.NewContext(context.Background(), logger), opts)
			if err != nil {
				t.Fatalf("start with a self-signed pair whose %s: %v", name, err)
			}
			c, err := s.GetCertificate(nil)
			if err != nil || c.Leaf.VerifyHostname("host-a") != nil {
				t.Fatalf("serving certificate %v, %v", c, err)
			}
			if _, err := loadPair(certFile, keyFile); err != nil {
				t.Errorf("the pair on disk is still unusable: %v", err)
			}
			if m := fileMode(t, keyFile); m != 0o600 {
				t.Errorf("kubelet.key mode %o, want 600", m)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(logs, "generating a new pair") || !strings.Contains(logs, certFile) || !strings.Contains(logs, keyFile) {
				t.Errorf("no log names the regenerated files:\n%s", logs)
			}
		})
	}
}

// The operator's tlsCertFile/tlsPrivateKeyFile are never rewritten: a bad one
// stops the start with an error that says which file is at fault.
func TestServingOperatorFilesNeverRewritten(t *testing.T) {
	ca := newTestCA(t)
	goodCert, goodKey := ca.clientPair(t, testNode, time.Now(), time.Now().Add(time.Hour))
	_, otherKey := ca.clientPair(t, testNode, time.Now(), time.Now().Add(time.Hour))
	for _, tc := range []struct {
		name       string
		cert, key  []byte
		wantInErr  func(certFile, keyFile string) string
		wantNotErr func(certFile, keyFile string) string
	}{
		{
			name: "certificate garbage", cert: []byte("garbage"), key: goodKey,
			wantInErr: func(c, k string) string { return "the certificate " + c + " cannot be parsed" },
		},
		{
			name: "key empty", cert: goodCert, key: []byte{},
			wantInErr: func(c, k string) string { return "the key " + k + " cannot be parsed" },
		},
		{
			name: "key of another pair", cert: goodCert, key: otherKey,
			wantInErr: func(c, k string) string {
				return "the certificate " + c + " and the key " + k + " do not belong together"
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			os.WriteFile(certFile, tc.cert, 0o644)
			os.WriteFile(keyFile, tc.key, 0o600)
			_, err := NewServing(context.Background(), ServingOptions{NodeName: testNode, Hostname: "host-a", CertDir: dir, TLSCertFile: certFile, TLSPrivateKeyFile: keyFile})
			if err == nil {
				t.Fatal("started with an unusable tlsCertFile/tlsPrivateKeyFile")
			}
			if want := tc.wantInErr(certFile, keyFile); !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "tlsCertFile/tlsPrivateKeyFile") {
				t.Errorf("error %q does not say %q", err, want)
			}
			if got, _ := os.ReadFile(certFile); !bytes.Equal(got, tc.cert) {
				t.Error("tlsCertFile was rewritten")
			}
			if got, _ := os.ReadFile(keyFile); !bytes.Equal(got, tc.key) {
				t.Error("tlsPrivateKeyFile was rewritten")
			}
			if left := globOne(t, filepath.Join(dir, "kubelet.*")); len(left) != 0 {
				t.Errorf("a self-signed pair was generated: %v", left)
			}
		})
	}
}

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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	testingclock "k8s.io/utils/clock/testing"
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
	waitUntil(t, fc.HasWaiters)
	fc.Step(11 * time.Second)
	time.Sleep(50 * time.Millisecond)
	if got := s.Current().Leaf.SerialNumber; got.Cmp(serial1) != 0 {
		t.Fatalf("serial %v after a mismatched write, want the old %v", got, serial1)
	}
	os.WriteFile(keyFile, k2, 0o600)
	want := readPEMCert(t, c2).SerialNumber
	waitUntil(t, func() bool {
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
	waitUntil(t, func() bool { return s.Current() != nil })

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

package certificate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/keyutil"
	testingclock "k8s.io/utils/clock/testing"
)

// testCA signs CSRs and client certificates for the tests.
type testCA struct {
	key     *ecdsa.PrivateKey
	cert    *x509.Certificate
	certPEM []byte
	mu      sync.Mutex
	serial  int64
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{key: key, cert: cert, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// sign issues a certificate for pub, valid from notBefore to notAfter.
func (ca *testCA) sign(t *testing.T, pub any, subject pkix.Name, dns []string, notBefore, notAfter time.Time, eku x509.ExtKeyUsage) []byte {
	t.Helper()
	ca.mu.Lock()
	ca.serial++
	serial := ca.serial
	ca.mu.Unlock()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      subject,
		DNSNames:     dns,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{eku},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// clientPair is a key and a client certificate for the node, from the CA.
func (ca *testCA) clientPair(t *testing.T, node string, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	keyPEM, err := keyutil.MakeEllipticPrivateKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	subject := pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}
	return ca.sign(t, key.(*ecdsa.PrivateKey).Public(), subject, nil, notBefore, notAfter, x509.ExtKeyUsageClientAuth), keyPEM
}

// signCSR issues the certificate a CSR asks for, valid for ttl.
func (ca *testCA) signCSR(t *testing.T, c *certificatesv1.CertificateSigningRequest, ttl time.Duration) []byte {
	t.Helper()
	block, _ := pem.Decode(c.Spec.Request)
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		t.Errorf("parsing CSR %s: %v", c.Name, err)
		return nil
	}
	eku := x509.ExtKeyUsageClientAuth
	if c.Spec.SignerName == certificatesv1.KubeletServingSignerName {
		eku = x509.ExtKeyUsageServerAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{Subject: req.Subject, DNSNames: req.DNSNames, IPAddresses: req.IPAddresses}
	ca.mu.Lock()
	ca.serial++
	tmpl.SerialNumber = big.NewInt(ca.serial)
	ca.mu.Unlock()
	tmpl.NotBefore, tmpl.NotAfter = now.Add(-time.Minute), now.Add(ttl)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{eku}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, req.PublicKey, ca.key)
	if err != nil {
		t.Errorf("signing CSR %s: %v", c.Name, err)
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// csrDecision is what the fake control plane does with a new CSR.
type csrDecision int

const (
	approveAndIssue csrDecision = iota
	deny
	leavePending
)

// fakeControlPlane is a fake clientset whose CSR creations are answered by
// decide (one decision per created CSR; the last one repeats) and recorded.
type fakeControlPlane struct {
	*fake.Clientset
	ca  *testCA
	ttl time.Duration
	mu  sync.Mutex
	// created are the names of the CSRs created, in order.
	created   []string
	decisions []csrDecision
	// createErrs are returned by the first creations, one per call.
	createErrs []error
	csrs       []*certificatesv1.CertificateSigningRequest
}

func newFakeControlPlane(t *testing.T, ca *testCA, ttl time.Duration, decisions ...csrDecision) *fakeControlPlane {
	cp := &fakeControlPlane{Clientset: fake.NewClientset(), ca: ca, ttl: ttl, decisions: decisions}
	cp.PrependReactor("create", "certificatesigningrequests", func(a clienttesting.Action) (bool, runtime.Object, error) {
		c := a.(clienttesting.CreateAction).GetObject().(*certificatesv1.CertificateSigningRequest)
		cp.mu.Lock()
		defer cp.mu.Unlock()
		if len(cp.createErrs) > 0 {
			err := cp.createErrs[0]
			cp.createErrs = cp.createErrs[1:]
			return true, nil, err
		}
		for _, n := range cp.created {
			if n == c.Name {
				return false, nil, nil // the tracker answers AlreadyExists
			}
		}
		cp.created = append(cp.created, c.Name)
		cp.csrs = append(cp.csrs, c.DeepCopy())
		d := approveAndIssue
		if len(cp.decisions) > 0 {
			d = cp.decisions[0]
			if len(cp.decisions) > 1 {
				cp.decisions = cp.decisions[1:]
			}
		}
		switch d {
		case approveAndIssue:
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "AutoApproved"}}
			c.Status.Certificate = cp.ca.signCSR(t, c, cp.ttl)
		case deny:
			c.Status.Conditions = []certificatesv1.CertificateSigningRequestCondition{{Type: certificatesv1.CertificateDenied, Status: v1.ConditionTrue, Reason: "NotAllowed", Message: "test says no"}}
		}
		return false, nil, nil // let the tracker store the (mutated) object
	})
	return cp
}

func (cp *fakeControlPlane) createdNames() []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]string(nil), cp.created...)
}

// issuePending approves and issues the named CSR, as an operator would.
func (cp *fakeControlPlane) issuePending(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	api := cp.CertificatesV1().CertificateSigningRequests()
	c, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "Test"})
	c.Status.Certificate = cp.ca.signCSR(t, c, cp.ttl)
	if _, err := api.UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// writeKubeconfigFile writes a kubeconfig for server with either a token or
// an inline client certificate.
func writeKubeconfigFile(t *testing.T, path, server string, caPEM []byte, token string, certPEM, keyPEM []byte) {
	t.Helper()
	cfg := clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"c": {Server: server, CertificateAuthorityData: caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"u": {Token: token, ClientCertificateData: certPEM, ClientKeyData: keyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{"x": {Cluster: "c", AuthInfo: "u"}},
		CurrentContext: "x",
	}
	if err := clientcmd.WriteToFile(cfg, path); err != nil {
		t.Fatal(err)
	}
}

// runClock steps a fake clock whenever something waits on it, so back-offs
// and re-checks pass at once; it stops with the test.
func runClock(t *testing.T, fc *testingclock.FakeClock) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if fc.HasWaiters() {
				fc.Step(5 * time.Second)
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

func fileMode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			t.Fatalf("no certificate in %s", path)
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
}

func globOne(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func b64(data []byte) string { return base64.StdEncoding.EncodeToString(data) }

package certificate

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodelet/nodelet/internal/testsupport/eventually"
)

const testNode = "node-a"

func TestKubeconfigStillValid(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	dir := t.TempDir()
	goodCert, goodKey := ca.clientPair(t, testNode, now.Add(-time.Hour), now.Add(time.Hour))
	oldCert, oldKey := ca.clientPair(t, testNode, now.Add(-2*time.Hour), now.Add(-time.Hour))
	_, otherKey := ca.clientPair(t, testNode, now, now.Add(time.Hour))
	for _, tc := range []struct {
		name       string
		write      func(path string)
		want       bool
		wantReason string
	}{
		{name: "missing", write: func(string) {}, wantReason: "does not exist"},
		{name: "garbage", write: func(p string) { os.WriteFile(p, []byte("{{{"), 0o600) }, wantReason: "cannot be loaded"},
		{name: "token only", write: func(p string) { writeKubeconfigFile(t, p, "https://127.0.0.1:1", ca.certPEM, "abc.def", nil, nil) }, wantReason: "no client certificate"},
		{name: "expired", write: func(p string) { writeKubeconfigFile(t, p, "https://127.0.0.1:1", ca.certPEM, "", oldCert, oldKey) }, wantReason: "expired at"},
		{name: "key of another cert", write: func(p string) { writeKubeconfigFile(t, p, "https://127.0.0.1:1", ca.certPEM, "", goodCert, otherKey) }, wantReason: "not a usable pair"},
		{name: "valid", write: func(p string) { writeKubeconfigFile(t, p, "https://127.0.0.1:1", ca.certPEM, "", goodCert, goodKey) }, want: true},
		{name: "valid with cert files", write: func(p string) {
			os.WriteFile(p+".crt", goodCert, 0o600)
			os.WriteFile(p+".key", goodKey, 0o600)
			os.WriteFile(p, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {client-certificate: "+p+".crt, client-key: "+p+".key}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"), 0o600)
		}, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".conf")
			tc.write(p)
			got, reason, err := KubeconfigStillValid(p, now)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("KubeconfigStillValid = %v, %q; want %v, reason containing %q", got, reason, tc.want, tc.wantReason)
			}
		})
	}
}

func newBootstrapper(dir string, cp kubernetes.Interface, clk *testingclock.FakeClock) *Bootstrapper {
	return &Bootstrapper{
		NodeName:            testNode,
		CertDir:             filepath.Join(dir, "pki"),
		BootstrapKubeconfig: filepath.Join(dir, "bootstrap.conf"),
		Clock:               clk,
		NewClient:           func(*rest.Config) (kubernetes.Interface, error) { return cp, nil },
	}
}

func TestBootstrapperRetries(t *testing.T) {
	ca := newTestCA(t)
	for _, tc := range []struct {
		name        string
		decisions   []csrDecision
		createErrs  []error
		wantReasons []string
		wantMsg     string
		// wantCSRs is how many distinct CSRs get created.
		wantCSRs int
	}{
		{name: "issued at once", wantCSRs: 1},
		{
			name:        "wrong or expired token, then fixed",
			createErrs:  []error{apierrors.NewUnauthorized("Unauthorized"), apierrors.NewUnauthorized("Unauthorized")},
			wantReasons: []string{FailureUnauthorized, FailureUnauthorized},
			wantMsg:     "bootstrap token is wrong or expired",
			wantCSRs:    1,
		},
		{
			name:        "not allowed to create CSRs",
			createErrs:  []error{apierrors.NewForbidden(certificatesv1.Resource("certificatesigningrequests"), "", errors.New("no"))},
			wantReasons: []string{FailureForbidden},
			wantMsg:     "system:node-bootstrapper",
			wantCSRs:    1,
		},
		{
			name:        "denied, then a new key is approved",
			decisions:   []csrDecision{deny, approveAndIssue},
			wantReasons: []string{FailureDenied},
			wantMsg:     `was denied (reason "NotAllowed", message "test says no")`,
			wantCSRs:    2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cp := newFakeControlPlane(t, ca, time.Hour, tc.decisions...)
			cp.createErrs = tc.createErrs
			writeKubeconfigFile(t, filepath.Join(dir, "bootstrap.conf"), "https://127.0.0.1:1", ca.certPEM, "abcdef.0123456789abcdef", nil, nil)
			fc := testingclock.NewFakeClock(time.Now())
			runClock(t, fc)
			b := newBootstrapper(dir, cp, fc)
			var reasons []string
			var msgs []string
			var keys [][]byte
			b.OnFailure = func(e *BootstrapError) {
				reasons = append(reasons, e.Reason)
				msgs = append(msgs, e.Error())
				k, _ := os.ReadFile(b.pendingKeyPath())
				keys = append(keys, k)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			issued, err := b.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(reasons, ",") != strings.Join(tc.wantReasons, ",") {
				t.Errorf("failure reasons = %v, want %v", reasons, tc.wantReasons)
			}
			if tc.wantMsg != "" && (len(msgs) == 0 || !strings.Contains(msgs[0], tc.wantMsg)) {
				t.Errorf("first failure %q does not say %q", msgs, tc.wantMsg)
			}
			if got := cp.createdNames(); len(got) != tc.wantCSRs {
				t.Errorf("CSRs created = %v, want %d", got, tc.wantCSRs)
			}
			if err := checkIssued(issued.CertPEM, issued.KeyPEM, "system:node:"+testNode, time.Now()); err != nil {
				t.Errorf("issued certificate: %v", err)
			}
			// A failure other than a refusal keeps the key for the next attempt.
			for i, r := range reasons {
				if r == FailureUnauthorized && i > 0 && !bytes.Equal(keys[i], keys[0]) {
					t.Errorf("the key changed between attempts after %s", r)
				}
			}
			onDisk, err := os.ReadFile(b.pendingKeyPath())
			if err != nil || !bytes.Equal(onDisk, issued.KeyPEM) {
				t.Errorf("the pending key file does not hold the issued certificate's key (err %v)", err)
			}
			if m := fileMode(t, b.pendingKeyPath()); m != 0o600 {
				t.Errorf("pending key mode = %o, want 600", m)
			}
			c := cp.csrs[len(cp.csrs)-1]
			if c.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName {
				t.Errorf("signer = %q", c.Spec.SignerName)
			}
			if got := c.Spec.Usages; len(got) != 2 || got[0] != certificatesv1.UsageDigitalSignature || got[1] != certificatesv1.UsageClientAuth {
				t.Errorf("usages = %v, want digital signature and client auth (ECDSA key)", got)
			}
		})
	}
}

func TestBootstrapperUnreachable(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	// Port 1 on loopback: connection refused.
	writeKubeconfigFile(t, filepath.Join(dir, "bootstrap.conf"), "https://127.0.0.1:1", ca.certPEM, "abcdef.0123456789abcdef", nil, nil)
	fc := testingclock.NewFakeClock(time.Now())
	b := newBootstrapper(dir, nil, fc)
	b.NewClient = nil // a real client against nothing
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var got *BootstrapError
	b.OnFailure = func(e *BootstrapError) { got = e; cancel() }
	if _, err := b.Run(ctx); err == nil {
		t.Fatal("Run succeeded against no API server")
	}
	if got == nil || got.Reason != FailureUnreachable || !strings.Contains(got.Error(), "cannot reach the API server at https://127.0.0.1:1") {
		t.Fatalf("failure = %v, want Unreachable naming the server", got)
	}
	if _, err := os.Stat(b.pendingKeyPath()); err != nil {
		t.Errorf("the key must survive a failed attempt: %v", err)
	}
}

// A restart while the CSR is pending finds the same CSR (its name comes from
// the key on disk) instead of filing a second one.
func TestBootstrapperRestartReusesPendingCSR(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	cp := newFakeControlPlane(t, ca, time.Hour, leavePending)
	writeKubeconfigFile(t, filepath.Join(dir, "bootstrap.conf"), "https://127.0.0.1:1", ca.certPEM, "abcdef.0123456789abcdef", nil, nil)
	fc := testingclock.NewFakeClock(time.Now())

	first, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := newBootstrapper(dir, cp, fc).Run(first); done <- err }()
	eventually.True(t, "one CSR", func() bool { return len(cp.createdNames()) == 1 })
	cancel() // nodelet stops while waiting for approval
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("first run: %v, want canceled", err)
	}
	name := cp.createdNames()[0]

	runClock(t, fc)
	ctx, cancel2 := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel2()
	go func() {
		time.Sleep(50 * time.Millisecond)
		cp.issuePending(t, ctx, name)
	}()
	issued, err := newBootstrapper(dir, cp, fc).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if issued.CSR != name {
		t.Errorf("second run used CSR %s, want the pending %s", issued.CSR, name)
	}
	list, _ := cp.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if len(list.Items) != 1 {
		t.Errorf("%d CSRs exist, want 1", len(list.Items))
	}
}

func TestClientCSRNameIsStable(t *testing.T) {
	k1, _ := keyutil.MakeEllipticPrivateKeyPEM()
	k2, _ := keyutil.MakeEllipticPrivateKeyPEM()
	a, err := newClientCSR(testNode, k1)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newClientCSR(testNode, k1)
	c, _ := newClientCSR(testNode, k2)
	d, _ := newClientCSR("node-b", k1)
	if a.name != b.name {
		t.Errorf("same key and node: %s != %s", a.name, b.name)
	}
	if a.name == c.name || a.name == d.name {
		t.Errorf("different key or node must give another name: %s %s %s", a.name, c.name, d.name)
	}
	if !strings.HasPrefix(a.name, "node-csr-") {
		t.Errorf("name %s", a.name)
	}
}

// A pending key nodelet cannot parse (left by a crash mid-write) is replaced,
// instead of failing every attempt forever.
func TestBootstrapperReplacesUnparsablePendingKey(t *testing.T) {
	ca := newTestCA(t)
	valid, _ := keyutil.MakeEllipticPrivateKeyPEM()
	for name, content := range map[string][]byte{
		"empty":     {},
		"cut short": valid[:len(valid)/2],
		"garbage":   []byte("not a key\n"),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			cp := newFakeControlPlane(t, ca, time.Hour)
			writeKubeconfigFile(t, filepath.Join(dir, "bootstrap.conf"), "https://127.0.0.1:1", ca.certPEM, "abcdef.0123456789abcdef", nil, nil)
			fc := testingclock.NewFakeClock(time.Now())
			runClock(t, fc)
			b := newBootstrapper(dir, cp, fc)
			if err := os.MkdirAll(b.CertDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(b.pendingKeyPath(), content, 0o644); err != nil {
				t.Fatal(err)
			}
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			ctx, cancel := context.WithTimeout(klog.NewContext(context.Background(), logger), 20*time.Second)
			defer cancel()
			issued, err := b.Run(ctx)
			if err != nil {
				t.Fatalf("bootstrap with a %s pending key: %v", name, err)
			}
			onDisk, err := os.ReadFile(b.pendingKeyPath())
			if err != nil || !bytes.Equal(onDisk, issued.KeyPEM) {
				t.Errorf("the pending key file does not hold the issued certificate's key (err %v)", err)
			}
			if m := fileMode(t, b.pendingKeyPath()); m != 0o600 {
				t.Errorf("pending key mode = %o, want 600", m)
			}
			logs := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(logs, "pending bootstrap key cannot be parsed") || !strings.Contains(logs, b.pendingKeyPath()) {
				t.Errorf("no log names the replaced key file:\n%s", logs)
			}
		})
	}
}

func TestWriteKubeconfigAtomicAndPrivate(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etc", "kubelet.conf")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	// What an interrupted write leaves: a torn file, with too open a mode.
	if err := os.WriteFile(path, []byte("apiVersion: v1\nclusters:\n- clu"), 0o644); err != nil {
		t.Fatal(err)
	}
	boot := &rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	if err := writeKubeconfig(boot, path, filepath.Join(dir, "kubelet-client-current.pem")); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Clusters["default-cluster"]; got == nil || got.Server != boot.Host {
		t.Errorf("kubeconfig cluster %+v, want server %s", got, boot.Host)
	}
	if got := cfg.AuthInfos["default-auth"]; got == nil || got.ClientCertificate != filepath.Join(dir, "kubelet-client-current.pem") {
		t.Errorf("kubeconfig user %+v", got)
	}
	if m := fileMode(t, path); m != 0o600 {
		t.Errorf("kubeconfig mode = %o, want 600", m)
	}
	if left := globOne(t, filepath.Join(filepath.Dir(path), ".*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// A missing bootstrap kubeconfig, when the TLS bootstrap is needed, fails at
// once with upstream's wording naming the file, as the kubelet's start does.
func TestCheckBootstrapKubeconfig(t *testing.T) {
	ca := newTestCA(t)
	now := time.Now()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubelet.conf")
	missing := filepath.Join(dir, "bootstrap-kubelet.conf")
	want := "unable to load bootstrap kubeconfig: stat " + missing + ": no such file or directory"

	if err := CheckBootstrapKubeconfig(kubeconfig, missing, now); err == nil || err.Error() != want {
		t.Errorf("no kubeconfig, no bootstrap kubeconfig: %v, want %q", err, want)
	}
	if err := CheckBootstrapKubeconfig(kubeconfig, "", now); err != nil {
		t.Errorf("no --bootstrap-kubeconfig: %v, want nil (the kubeconfig's own error comes later)", err)
	}
	// A valid kubeconfig makes the bootstrap kubeconfig irrelevant, as upstream.
	c, k := ca.clientPair(t, testNode, now.Add(-time.Hour), now.Add(time.Hour))
	writeKubeconfigFile(t, kubeconfig, "https://127.0.0.1:1", ca.certPEM, "", c, k)
	if err := CheckBootstrapKubeconfig(kubeconfig, missing, now); err != nil {
		t.Errorf("valid kubeconfig: %v, want nil", err)
	}
	// An expired one needs the bootstrap.
	c, k = ca.clientPair(t, testNode, now.Add(-2*time.Hour), now.Add(-time.Hour))
	writeKubeconfigFile(t, kubeconfig, "https://127.0.0.1:1", ca.certPEM, "", c, k)
	if err := CheckBootstrapKubeconfig(kubeconfig, missing, now); err == nil || err.Error() != want {
		t.Errorf("expired kubeconfig: %v, want %q", err, want)
	}
	writeKubeconfigFile(t, missing, "https://127.0.0.1:1", ca.certPEM, "abcdef.0123456789abcdef", nil, nil)
	if err := CheckBootstrapKubeconfig(kubeconfig, missing, now); err != nil {
		t.Errorf("bootstrap kubeconfig present: %v", err)
	}

	// NewClient fails at once too, rather than retrying a file that is not there.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := NewClient(ctx, ClientOptions{Kubeconfig: filepath.Join(dir, "none.conf"), BootstrapKubeconfig: filepath.Join(dir, "none-bootstrap.conf"), CertDir: filepath.Join(dir, "pki"), NodeName: testNode})
	if err == nil || !strings.Contains(err.Error(), "unable to load bootstrap kubeconfig: stat "+filepath.Join(dir, "none-bootstrap.conf")) || ctx.Err() != nil {
		t.Errorf("NewClient: %v (ctx %v), want an immediate failure naming the file", err, ctx.Err())
	}
}

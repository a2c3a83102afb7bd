//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// csrEvent is when the test saw a CSR reach a state.
type csrEvent struct {
	name, signer, user                string
	created, approved, issued, denied time.Time
}

// csrWatcher records the CSRs created after it starts (admin watch) and, if approveServing,
// approves the node's kubelet-serving CSRs as an operator would: kube-controller-manager's
// csrapproving never approves those.
type csrWatcher struct {
	f              *framework.Framework
	approveServing bool
	mu             sync.Mutex
	byName         map[string]*csrEvent
	order          []string
	cancel         context.CancelFunc
	done           chan struct{}
}

func watchCSRs(t *testing.T, f *framework.Framework, approveServing bool) *csrWatcher {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &csrWatcher{f: f, approveServing: approveServing, byName: map[string]*csrEvent{}, cancel: cancel, done: make(chan struct{})}
	api := f.Client.CertificatesV1().CertificateSigningRequests()
	list, err := api.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("listing CSRs: %v", err)
	}
	old := map[string]bool{}
	for _, c := range list.Items {
		old[c.Name] = true
	}
	rv := list.ResourceVersion
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			wi, err := api.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range wi.ResultChan() {
				c, ok := ev.Object.(*certificatesv1.CertificateSigningRequest)
				if !ok || old[c.Name] || ev.Type == watch.Deleted {
					continue
				}
				rv = c.ResourceVersion
				w.observe(ctx, t, c)
			}
		}
	}()
	t.Cleanup(func() {
		w.stop()
		// Leave no CSRs of this test behind (kcm's csrcleaner would take an hour).
		for _, e := range w.events() {
			_ = api.Delete(context.Background(), e.name, metav1.DeleteOptions{})
		}
	})
	return w
}

func (w *csrWatcher) stop() {
	w.cancel()
	<-w.done
}

func (w *csrWatcher) observe(ctx context.Context, t *testing.T, c *certificatesv1.CertificateSigningRequest) {
	now := time.Now()
	w.mu.Lock()
	e := w.byName[c.Name]
	if e == nil {
		e = &csrEvent{name: c.Name, signer: c.Spec.SignerName, user: c.Spec.Username, created: now}
		w.byName[c.Name] = e
		w.order = append(w.order, c.Name)
	}
	approved := false
	for _, cond := range c.Status.Conditions {
		switch cond.Type {
		case certificatesv1.CertificateApproved:
			approved = true
			if e.approved.IsZero() {
				e.approved = now
			}
		case certificatesv1.CertificateDenied:
			if e.denied.IsZero() {
				e.denied = now
			}
		}
	}
	if len(c.Status.Certificate) > 0 && e.issued.IsZero() {
		e.issued = now
	}
	w.mu.Unlock()
	if w.approveServing && !approved && c.Spec.SignerName == certificatesv1.KubeletServingSignerName && c.Spec.Username == "system:node:"+w.f.Env.NodeName {
		c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{
			Type: certificatesv1.CertificateApproved, Status: v1.ConditionTrue, Reason: "E2EApproved", Message: "approved by the e2e test as an operator would",
		})
		if _, err := w.f.Client.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, c, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			t.Errorf("approving serving CSR %s: %v", c.Name, err)
		}
	}
}

func (w *csrWatcher) events() []csrEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]csrEvent, 0, len(w.order))
	for _, n := range w.order {
		out = append(out, *w.byName[n])
	}
	return out
}

// first returns the first CSR matching signer and user prefix, once it has reached want
// ("created", "approved", "issued" or "denied").
func (w *csrWatcher) waitFor(t *testing.T, what, signer, userPrefix, want string, timeout time.Duration, skip int) csrEvent {
	t.Helper()
	var got csrEvent
	err := framework.WaitFor(context.Background(), timeout, what, func(context.Context) (bool, error) {
		n := 0
		for _, e := range w.events() {
			if e.signer != signer || !strings.HasPrefix(e.user, userPrefix) {
				continue
			}
			if n < skip {
				n++
				continue
			}
			got = e
			switch want {
			case "created":
				return true, nil
			case "approved":
				return !e.approved.IsZero(), nil
			case "issued":
				return !e.issued.IsZero(), nil
			case "denied":
				return !e.denied.IsZero(), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v (CSRs seen: %+v)", err, w.events())
	}
	return got
}

func bootstrapEnv(t *testing.T, f *framework.Framework) (kubeconfig, token string) {
	t.Helper()
	kubeconfig, token = f.Env.All["BOOTSTRAP_KUBECONFIG"], f.Env.All["BOOTSTRAP_TOKEN"]
	if kubeconfig == "" || token == "" {
		t.Fatalf("rig.env has no BOOTSTRAP_KUBECONFIG/BOOTSTRAP_TOKEN: the rig predates TLS bootstrap; rerun test/rig/up.sh")
	}
	return kubeconfig, token
}

// bootstrapConfig is the e2e configuration for a kubeadm-style join: client and serving
// certificate rotation, no ready-made serving certificate.
func bootstrapConfig(c *kubeletconfigv1beta1.KubeletConfiguration) {
	c.FailCgroupV1 = ptr.To(false)
	c.RotateCertificates = true
	c.ServerTLSBootstrap = true
	c.TLSCertFile, c.TLSPrivateKeyFile = "", ""
}

func readPEMCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			t.Fatalf("no certificate in %s", path)
		}
		if b.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				t.Fatalf("parsing %s: %v", path, err)
			}
			return c
		}
	}
}

func rigCAPool(t *testing.T, f *framework.Framework) *x509.CertPool {
	t.Helper()
	data, err := os.ReadFile(f.Env.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("no CA in %s", f.Env.CACert)
	}
	return pool
}

// TestTLSBootstrapJoinAndRotation starts nodelet with only the rig's bootstrap kubeconfig (a
// kubeadm bootstrap token) and checks the whole join: the client CSR is auto-approved by
// kube-controller-manager, the Node registers as system:node:<name>, the files land in the
// cert dir; the serving CSR (approved here, as an operator would) yields a certificate that
// verifies against the cluster CA; and the client certificate (3m lifetime from the rig's
// kcm) rotates while a pod keeps running, the Lease still being renewed after the first
// certificate expired.
func TestTLSBootstrapJoinAndRotation(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	bootKC, token := bootstrapEnv(t, f)
	ns := f.NewNamespace()
	csrs := watchCSRs(t, f, true)
	node := f.Env.NodeName

	t0 := time.Now()
	n := f.StartNodelet(framework.NodeletOptions{BootstrapKubeconfig: bootKC, Config: bootstrapConfig, Verbosity: 2})
	client := csrs.waitFor(t, "the bootstrap client CSR to be issued", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:bootstrap:", "issued", time.Minute, 0)
	ready := f.WaitForNodeReady(ctx, 2*time.Minute)
	tReady := time.Now()

	// The CSR came from the bootstrap token and was approved by kcm's csrapproving.
	got, err := f.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, client.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := "system:bootstrap:" + strings.Split(token, ".")[0]; got.Spec.Username != want {
		t.Errorf("client CSR requested by %q, want %q", got.Spec.Username, want)
	}
	if !slices.Contains(got.Spec.Groups, "system:bootstrappers:kubeadm:default-node-token") {
		t.Errorf("client CSR groups %v lack the token's extra group", got.Spec.Groups)
	}
	for _, c := range got.Status.Conditions {
		if c.Type == certificatesv1.CertificateApproved && c.Reason != "AutoApproved" {
			t.Errorf("client CSR approved with reason %q, want kcm's AutoApproved", c.Reason)
		}
	}

	// Files, as upstream: kubeconfig -> cert-dir/kubelet-client-current.pem -> a dated file.
	current := filepath.Join(n.CertDir, "kubelet-client-current.pem")
	cfg, err := clientcmd.BuildConfigFromFlags("", n.KubeconfigPath)
	if err != nil {
		t.Fatalf("loading the kubeconfig nodelet wrote: %v", err)
	}
	if cfg.CertFile != current || cfg.KeyFile != current || cfg.Host != f.Env.APIServerURL {
		t.Errorf("kubeconfig: cert %q key %q server %q, want %s and %s", cfg.CertFile, cfg.KeyFile, cfg.Host, current, f.Env.APIServerURL)
	}
	dated := clientPEMs(t, n.CertDir)
	if len(dated) != 1 {
		t.Errorf("dated client certificate files after the join: %v, want one", dated)
	}
	for _, p := range append(dated, n.KubeconfigPath) {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v (err %v), want 0600", p, fi.Mode().Perm(), err)
		}
	}
	if _, err := os.Stat(filepath.Join(n.CertDir, "kubelet-client.key.tmp")); !os.IsNotExist(err) {
		t.Errorf("the bootstrap key file is left after the join (err %v)", err)
	}
	first := readPEMCertFile(t, current)
	if first.Subject.CommonName != "system:node:"+node || !slices.Contains(first.Subject.Organization, "system:nodes") {
		t.Errorf("client certificate subject %v, want CN system:node:%s O system:nodes", first.Subject, node)
	}
	if _, err := first.Verify(x509.VerifyOptions{Roots: rigCAPool(t, f), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate does not verify against the rig CA: %v", err)
	}
	if ready.Name != node {
		t.Errorf("node %s", ready.Name)
	}

	pod := f.CreatePod(ctx, f.BusyboxPod(ns, "keeps-running", "sh", "-c", "echo hello-from-a-bootstrapped-node; exec sleep 3600"))
	pod = f.WaitForPodReady(ctx, ns, pod.Name, time.Minute)
	containerID := pod.Status.ContainerStatuses[0].ContainerID

	// Serving certificate: CSR with the node's addresses, approved above, issued by kcm.
	serving := csrs.waitFor(t, "the serving CSR to be issued", certificatesv1.KubeletServingSignerName, "system:node:"+node, "issued", 2*time.Minute, 0)
	servingFile := filepath.Join(n.CertDir, "kubelet-server-current.pem")
	err = framework.WaitFor(ctx, 30*time.Second, servingFile, func(context.Context) (bool, error) {
		_, err := os.Stat(servingFile)
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	sc := readPEMCertFile(t, servingFile)
	verify := x509.VerifyOptions{Roots: rigCAPool(t, f), DNSName: node, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := sc.Verify(verify); err != nil {
		t.Errorf("serving certificate does not verify against the rig CA for %s: %v", node, err)
	}
	for _, a := range ready.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			if err := sc.VerifyHostname(a.Address); err != nil {
				t.Errorf("serving certificate does not name the InternalIP: %v", err)
			}
		}
	}
	t.Logf("serving certificate: SANs DNS %v IP %v, valid %s", sc.DNSNames, sc.IPAddresses, sc.NotAfter.Sub(sc.NotBefore))
	servedAtJoin := checkServedCertificate(t, f, sc, ns, pod.Name)

	// Rotation of the client certificate before it expires.
	lifetime := first.NotAfter.Sub(first.NotBefore)
	err = framework.WaitFor(ctx, time.Until(first.NotAfter)+30*time.Second, "the client certificate to rotate", func(context.Context) (bool, error) {
		if !n.Running() {
			return false, &framework.StopError{Err: fmt.Errorf("nodelet exited: %v", n.ExitError())}
		}
		c := readPEMCertFile(t, current)
		return c.SerialNumber.Cmp(first.SerialNumber) != 0, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tRotated := time.Now()
	second := readPEMCertFile(t, current)
	if dated := clientPEMs(t, n.CertDir); len(dated) < 2 {
		t.Errorf("dated client certificate files after rotation: %v, want two", dated)
	}
	if frac := tRotated.Sub(first.NotBefore).Seconds() / lifetime.Seconds(); frac < 0.69 || frac > 0.95 {
		t.Errorf("rotated at %.0f%% of the lifetime, want 70-90%%", frac*100)
	}
	n.WaitForLog(ctx, "Client certificate rotated; closing client connections", 10*time.Second)
	rotation := csrs.waitFor(t, "the rotation CSR", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:node:"+node, "issued", 10*time.Second, 0)

	// The first certificate expires: the Lease is renewed after that, so connections use the
	// new one.
	if d := time.Until(first.NotAfter); d > 0 {
		time.Sleep(d)
	}
	expired := time.Now()
	err = framework.WaitFor(ctx, 45*time.Second, "a Lease renewal after the first certificate expired", func(ctx context.Context) (bool, error) {
		l, err := f.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, node, metav1.GetOptions{})
		if err != nil || l.Spec.RenewTime == nil {
			return false, err
		}
		return l.Spec.RenewTime.Time.After(expired.Add(time.Second)), nil
	})
	if err != nil {
		t.Fatalf("%v\nnodelet log tail:\n%s", err, lastLines(n.Logs(), 30))
	}
	f.WaitForNodeReady(ctx, 10*time.Second)
	p, err := f.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cs := p.Status.ContainerStatuses[0]; cs.ContainerID != containerID || cs.RestartCount != 0 || cs.State.Running == nil {
		t.Errorf("the pod's container changed during rotation: %s -> %s, restarts %d", containerID, cs.ContainerID, cs.RestartCount)
	}
	if !n.Running() {
		t.Fatal("nodelet is not running after rotation")
	}
	// The serving certificate (same 3m lifetime) has rotated by now too.
	servingFiles, _ := filepath.Glob(filepath.Join(n.CertDir, "kubelet-server-2*.pem"))
	sc2 := readPEMCertFile(t, servingFile)
	if len(servingFiles) < 2 || sc2.SerialNumber.Cmp(sc.SerialNumber) == 0 {
		t.Errorf("serving certificate not rotated after %s: files %v", time.Since(serving.issued).Round(time.Second), servingFiles)
	} else if servedAtJoin {
		checkServedCertificate(t, f, sc2, ns, pod.Name)
	}

	ms := func(at time.Time) string { return fmt.Sprintf("%6.2fs", at.Sub(t0).Seconds()) }
	t.Logf("join timeline (from nodelet start, as seen by the test's CSR watch):\n"+
		"  client CSR %s created %s, approved %s, issued %s\n"+
		"  Node %s Ready %s\n"+
		"  serving CSR %s created %s, approved %s (by the test), issued %s",
		client.name, ms(client.created), ms(client.approved), ms(client.issued),
		node, ms(tReady), serving.name, ms(serving.created), ms(serving.approved), ms(serving.issued))
	t.Logf("rotation: first client certificate serial %s, NotBefore %s, NotAfter %s (lifetime %s incl. kcm's 5m backdate); rotation CSR %s by %s created %s, issued %s; new serial %s observed at %s = %.0f%% of the lifetime, %s before expiry; Lease renewed after the old certificate expired; pod container %s not restarted",
		first.SerialNumber, first.NotBefore.Format(time.RFC3339), first.NotAfter.Format(time.RFC3339), lifetime,
		rotation.name, rotation.user, ms(rotation.created), ms(rotation.issued), second.SerialNumber, ms(tRotated),
		100*tRotated.Sub(first.NotBefore).Seconds()/lifetime.Seconds(), first.NotAfter.Sub(tRotated).Round(time.Second), strings.TrimPrefix(containerID, "containerd://")[:12])
}

// checkServedCertificate looks at what the node agent's port serves, if anything (the kubelet
// API server may not be wired to the rotating serving certificate). When it serves want, the
// pod's logs are read through the API server, which verifies the serving certificate against
// the cluster CA (--kubelet-certificate-authority). It reports whether want is served.
func checkServedCertificate(t *testing.T, f *framework.Framework, want *x509.Certificate, ns, pod string) bool {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(f.Env.NodeletPort))
	var served *x509.Certificate
	err := framework.WaitFor(context.Background(), 15*time.Second, "TLS on "+addr+" to serve serial "+want.SerialNumber.String(), func(context.Context) (bool, error) {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return false, err
		}
		defer conn.Close()
		served = conn.ConnectionState().PeerCertificates[0]
		return served.SerialNumber.Cmp(want.SerialNumber) == 0, nil
	})
	if served == nil {
		t.Logf("nothing serves TLS on %s (%v): the serving certificate was checked from its file only", addr, err)
		return false
	}
	if err != nil {
		t.Errorf("%s serves serial %s, not the CSR-issued %s", addr, served.SerialNumber, want.SerialNumber)
		return false
	}
	out, err := f.Client.CoreV1().Pods(ns).GetLogs(pod, &v1.PodLogOptions{}).Do(context.Background()).Raw()
	if err != nil || !strings.Contains(string(out), "hello-from-a-bootstrapped-node") {
		t.Errorf("pod logs through the API server (which verifies the serving certificate against the rig CA): %q, %v", out, err)
	} else {
		t.Logf("%s serves the CSR-issued certificate (serial %s); logs through the API server: ok", addr, want.SerialNumber)
	}
	return true
}

// TestTLSBootstrapWrongTokenThenFixed starts nodelet with a bootstrap token the API server
// does not know: nodelet must say so (401, what to do), keep running and keep its key, and
// join once the bootstrap kubeconfig holds the right token, without a restart.
func TestTLSBootstrapWrongTokenThenFixed(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	goodKC, _ := bootstrapEnv(t, f)
	good, err := os.ReadFile(goodKC)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	wrong := strings.Replace(string(good), f.Env.All["BOOTSTRAP_TOKEN"], "wrong0.0000000000000000", 1)
	if err := os.WriteFile(bad, []byte(wrong), 0o600); err != nil {
		t.Fatal(err)
	}
	n := f.StartNodelet(framework.NodeletOptions{BootstrapKubeconfig: bad, Config: bootstrapConfig, Verbosity: 2})
	n.WaitForLog(ctx, "the bootstrap token is wrong or expired", time.Minute)
	keyPath := filepath.Join(n.CertDir, "kubelet-client.key.tmp")
	key1, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatalf("the bootstrap key is not on disk after a failed attempt: %v", err)
	}
	if fi, _ := os.Stat(keyPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("bootstrap key mode %v, want 0600", fi.Mode().Perm())
	}
	n.WaitForLog(ctx, `attempt=2`, time.Minute)
	key2, _ := os.ReadFile(keyPath)
	if string(key1) != string(key2) {
		t.Error("the bootstrap key changed between attempts")
	}
	if !n.Running() {
		t.Fatal("nodelet exited on a wrong bootstrap token")
	}
	line := ""
	for _, l := range strings.Split(n.Logs(), "\n") {
		if strings.Contains(l, "401 Unauthorized") {
			line = l
			break
		}
	}
	t.Logf("nodelet's log line for the wrong token:\n%s", line)

	fixed := time.Now()
	if err := os.WriteFile(bad, good, 0o600); err != nil {
		t.Fatal(err)
	}
	f.WaitForNodeReady(ctx, 2*time.Minute)
	t.Logf("joined %.1fs after the bootstrap kubeconfig was fixed, without a restart", time.Since(fixed).Seconds())
	if _, err := os.Stat(filepath.Join(n.CertDir, "kubelet-client-current.pem")); err != nil {
		t.Error(err)
	}
}

// TestTLSBootstrapDeniedCSR joins with a token whose group kcm does not auto-approve: the test
// denies the first CSR (nodelet must report it and ask again with a new key) and approves
// the second.
func TestTLSBootstrapDeniedCSR(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	goodKC, _ := bootstrapEnv(t, f)
	good, err := os.ReadFile(goodKC)
	if err != nil {
		t.Fatal(err)
	}
	// A second bootstrap token, in a group bound to system:node-bootstrapper only.
	const id, secret, group = "e2eman", "0123456789abcdef", "system:bootstrappers:nodelet-e2e-manual"
	_, err = f.Client.CoreV1().Secrets("kube-system").Create(ctx, &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: "kube-system"},
		Type:       "bootstrap.kubernetes.io/token",
		StringData: map[string]string{"token-id": id, "token-secret": secret, "usage-bootstrap-authentication": "true", "auth-extra-groups": group},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Client.CoreV1().Secrets("kube-system").Delete(context.Background(), "bootstrap-token-"+id, metav1.DeleteOptions{})
	})
	_, err = f.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "nodelet-e2e-manual-bootstrap"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:node-bootstrapper"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: group}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), "nodelet-e2e-manual-bootstrap", metav1.DeleteOptions{})
	})
	rigToken := f.Env.All["BOOTSTRAP_TOKEN"]
	manual := filepath.Join(t.TempDir(), "bootstrap-kubelet.conf")
	if err := os.WriteFile(manual, []byte(strings.Replace(string(good), rigToken, id+"."+secret, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	csrs := watchCSRs(t, f, false)
	n := f.StartNodelet(framework.NodeletOptions{BootstrapKubeconfig: manual, Config: bootstrapConfig, Verbosity: 2})
	firstCSR := csrs.waitFor(t, "the first client CSR", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:bootstrap:"+id, "created", time.Minute, 0)
	setCondition(t, f, firstCSR.name, certificatesv1.CertificateDenied, "E2EDenied", "denied by the e2e test")
	n.WaitForLog(ctx, "E2EDenied", time.Minute)
	secondCSR := csrs.waitFor(t, "a second client CSR with a new key", certificatesv1.KubeAPIServerClientKubeletSignerName, "system:bootstrap:"+id, "created", time.Minute, 1)
	if secondCSR.name == firstCSR.name {
		t.Fatalf("the CSR after a denial has the same name %s", firstCSR.name)
	}
	if !n.Running() {
		t.Fatal("nodelet exited after a denied CSR")
	}
	setCondition(t, f, secondCSR.name, certificatesv1.CertificateApproved, "E2EApproved", "approved by the e2e test")
	f.WaitForNodeReady(ctx, 2*time.Minute)
	line := ""
	for _, l := range strings.Split(n.Logs(), "\n") {
		if strings.Contains(l, "was denied") {
			line = l
			break
		}
	}
	t.Logf("denied %s, asked again as %s; nodelet's log line:\n%s", firstCSR.name, secondCSR.name, line)
}

func setCondition(t *testing.T, f *framework.Framework, name string, typ certificatesv1.RequestConditionType, reason, msg string) {
	t.Helper()
	ctx := context.Background()
	api := f.Client.CertificatesV1().CertificateSigningRequests()
	c, err := api.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Conditions = append(c.Status.Conditions, certificatesv1.CertificateSigningRequestCondition{Type: typ, Status: v1.ConditionTrue, Reason: reason, Message: msg})
	if _, err := api.UpdateApproval(ctx, name, c, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting %s on CSR %s: %v", typ, name, err)
	}
}

func clientPEMs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "kubelet-client-2*.pem"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

func lastLines(s string, lines int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestKubeletAPIEncodedPathsNeedTheirOwnGrant: service accounts granted only
// nodes/metrics (what Prometheus and metrics-server hold) or only nodes/stats reach
// their endpoints on :10250, and get 403 for every other endpoint however its path is
// spelled: encoded dots and slashes, double encoding, raw "..".
func TestKubeletAPIEncodedPathsNeedTheirOwnGrant(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		// A denial cached before RBAC caught up with the bindings must not outlive the wait below.
		c.Authorization.Webhook.CacheUnauthorizedTTL = metav1.Duration{Duration: time.Second}
	}})
	// A pod whose env value would show in /pods: a 403 body must not carry it.
	const marker = "e2e-secret-value-4d1f"
	pod := f.BusyboxPod(ns, "holder", "sleep", "3600")
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "SECRET", Value: marker}}
	f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, "holder", 2*time.Minute)

	metricsToken := grantedToken(t, ctx, f, ns, "metrics-reader", "nodes/metrics", "get")
	statsToken := grantedToken(t, ctx, f, ns, "stats-reader", "nodes/stats", "get", "create")

	do := newKubeletClient(t, f, nil).do

	// The grants work (RBAC has caught up once they do).
	for _, ok := range []struct{ token, method, target string }{
		{metricsToken, "GET", "/metrics"},
		{metricsToken, "GET", "/metrics/resource"},
		{statsToken, "GET", "/stats/summary"},
	} {
		err := framework.WaitFor(ctx, time.Minute, ok.method+" "+ok.target+" = 200", func(ctx context.Context) (bool, error) {
			code, body, err := do(ctx, ok.token, ok.method, ok.target)
			if err == nil && code != http.StatusOK {
				err = fmt.Errorf("%d %.200s", code, body)
			}
			return err == nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	refused := []struct {
		token, who, method, target string
	}{
		{metricsToken, "metrics", "GET", "/pods"},
		{metricsToken, "metrics", "GET", "/pods/%2E%2E/metrics"},
		{metricsToken, "metrics", "GET", "/pods/%2e%2e/metrics"},
		{metricsToken, "metrics", "GET", "/pods/..%2Fmetrics"},
		{metricsToken, "metrics", "GET", "/pods/%252E%252E/metrics"},
		{metricsToken, "metrics", "GET", "/metrics/..%2Fpods"},
		{metricsToken, "metrics", "GET", "/metrics/%2E%2E/pods"},
		{metricsToken, "metrics", "GET", "/metrics/../pods"},
		{metricsToken, "metrics", "GET", "/metrics/resource/%2E%2E%2F%2E%2E%2Fpods"},
		{metricsToken, "metrics", "GET", "/configz/%2E%2E/metrics"},
		{metricsToken, "metrics", "GET", "/containerLogs/" + ns + "/holder/main/%2E%2E/%2E%2E/%2E%2E/%2E%2E/metrics"},
		{metricsToken, "metrics", "POST", "/metrics/%2E%2E/run/" + ns + "/holder/main?cmd=env"},
		{statsToken, "stats", "POST", "/stats/%2E%2E/run/" + ns + "/holder/main?cmd=env"},
		{statsToken, "stats", "POST", "/stats/summary/%2E%2E/%2E%2E/run/" + ns + "/holder/main?cmd=env"},
		{statsToken, "stats", "POST", "/stats/../run/" + ns + "/holder/main?cmd=env"},
		{statsToken, "stats", "GET", "/stats/summary/..%2F..%2Fpods"},
		{statsToken, "stats", "GET", "/stats/%2E%2E/pods"},
		{statsToken, "stats", "POST", "/stats/summary%2F..%2F..%2Fexec/" + ns + "/holder/main?command=env&output=1"},
		{statsToken, "stats", "GET", "/pods/%2E%2E/stats/summary"},
		{statsToken, "stats", "GET", "/containerLogs/" + ns + "/holder/main/%2E%2E/%2E%2E/%2E%2E/%2E%2E/stats/summary"},
	}
	for _, r := range refused {
		code, body, err := do(ctx, r.token, r.method, r.target)
		if err != nil {
			t.Errorf("%s %s: %v", r.method, r.target, err)
			continue
		}
		if code != http.StatusForbidden || strings.Contains(body, marker) || strings.Contains(body, `"kind":"PodList"`) {
			t.Errorf("%s %s with only nodes/%s: %d %.300q, want 403", r.method, r.target, r.who, code, body)
		}
	}
}

// kubeletClient sends requests straight to nodelet's HTTPS port on 127.0.0.1 (its serving
// certificate checked against the rig's CA), with a client certificate or none. It sends each
// target exactly as written and never follows a redirect: a redirect would be a second request
// for another path, and the answer to the first is what counts.
type kubeletClient struct {
	base string
	hc   *http.Client
}

func newKubeletClient(t *testing.T, f *framework.Framework, cert *tls.Certificate) *kubeletClient {
	t.Helper()
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(f.Env.CACert)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(caPEM)
	tc := &tls.Config{RootCAs: pool}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &kubeletClient{
		base: fmt.Sprintf("https://127.0.0.1:%d", f.Env.NodeletPort),
		hc: &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 20 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
	}
}

// do sends method target with the bearer token (none when "") and returns the status and
// body. A target the client would have sent spelled otherwise is a *framework.StopError.
func (k *kubeletClient) do(ctx context.Context, token, method, target string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, k.base+target, nil)
	if err != nil {
		return 0, "", err
	}
	if got := req.URL.RequestURI(); got != target {
		return 0, "", &framework.StopError{Err: fmt.Errorf("the client would send %q, not %q", got, target)}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := k.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// grantedToken creates service account name in ns, a ClusterRole allowing verbs on
// resource (e.g. nodes/metrics) bound to it, and returns a token for it.
func grantedToken(t *testing.T, ctx context.Context, f *framework.Framework, ns, name, resource string, verbs ...string) string {
	t.Helper()
	if _, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := ns + "-" + name
	if _, err := f.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Client.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	if _, err := f.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.Client.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	tr, err := f.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

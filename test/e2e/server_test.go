//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// kubectl runs the rig's kubectl as the admin and returns its combined output.
func kubectl(ctx context.Context, f *framework.Framework, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, f.Env.Kubectl, append([]string{"--kubeconfig=" + f.Env.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func mustKubectl(t *testing.T, ctx context.Context, f *framework.Framework, args ...string) string {
	t.Helper()
	out, err := kubectl(ctx, f, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestKubeletAPI runs logs, exec, port-forward and node proxy requests through the API
// server against pods on nodelet, and checks that the kubelet API refuses
// unauthenticated (401) and unauthorized (403) callers.
func TestKubeletAPI(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	// The read-only port is off unless set; here it is on, 5 above the HTTPS port (10255).
	readOnlyPort := f.Env.NodeletPort + 5
	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) { c.ReadOnlyPort = readOnlyPort }})

	// A pod that logs a line every 200ms, one that crashes after a line (for --previous),
	// and a web server for port-forward.
	f.CreatePod(ctx, f.BusyboxPod(ns, "talker", "sh", "-c", `echo hello-from-talker; echo to-stderr >&2; i=0; while true; do echo tick-$i; i=$((i+1)); sleep 0.2; done`))
	f.CreatePod(ctx, f.BusyboxPod(ns, "crasher", "sh", "-c", `echo run-at-$(date +%s%N); sleep 1; exit 3`))
	f.CreatePod(ctx, f.BusyboxPod(ns, "web", "sh", "-c", `mkdir -p /www && echo hello-through-port-forward > /www/index.html && exec httpd -f -p 8080 -h /www`))
	for _, p := range []string{"talker", "web"} {
		f.WaitForPodReady(ctx, ns, p, 2*time.Minute)
	}

	t.Run("logs", func(t *testing.T) {
		out := mustKubectl(t, ctx, f, "-n", ns, "logs", "talker")
		// stdout and stderr are separate pipes: their relative order is not fixed.
		if !strings.Contains(out, "hello-from-talker\n") || !strings.Contains(out, "to-stderr\n") || !strings.Contains(out, "tick-0\n") {
			t.Errorf("kubectl logs talker:\n%s", out)
		}
		all := out
		out = mustKubectl(t, ctx, f, "-n", ns, "logs", "talker", "--tail=2", "--timestamps")
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(lines) != 2 || !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\S+Z tick-\d+$`).MatchString(lines[1]) {
			t.Errorf("kubectl logs --tail=2 --timestamps: %q", out)
		}
		// --since needs a log older than the window: wait for 3s of ticks.
		if err := framework.WaitFor(ctx, 30*time.Second, "15 ticks", func(ctx context.Context) (bool, error) {
			out, err := kubectl(ctx, f, "-n", ns, "logs", "talker", "--tail=1")
			return err == nil && regexp.MustCompile(`^tick-(1[5-9]|[2-9]\d|\d{3,})\n$`).MatchString(out), nil
		}); err != nil {
			t.Fatal(err)
		}
		out = mustKubectl(t, ctx, f, "-n", ns, "logs", "talker", "--since=1s")
		if strings.Contains(out, "hello-from-talker") || !strings.Contains(out, "tick-") {
			t.Errorf("kubectl logs --since=1s still has the first line or no ticks: %q", out)
		}
		out = mustKubectl(t, ctx, f, "-n", ns, "logs", "talker", "--limit-bytes=5")
		if out != all[:5] {
			t.Errorf("kubectl logs --limit-bytes=5 = %q", out)
		}
		// -f: lines keep arriving while the container runs.
		fctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(fctx, f.Env.Kubectl, "--kubeconfig="+f.Env.Kubeconfig, "-n", ns, "logs", "-f", "--tail=1", "talker")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		var got []int
		for len(got) < 5 && sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "tick-")); err == nil {
				got = append(got, n)
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if len(got) < 5 || got[4] != got[0]+4 {
			t.Errorf("kubectl logs -f gave ticks %v, want 5 consecutive", got)
		}
	})

	t.Run("logs --previous", func(t *testing.T) {
		p := f.WaitForPod(ctx, ns, "crasher", 2*time.Minute, "a restart", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		_ = p
		var prev, cur string
		err := framework.WaitFor(ctx, time.Minute, "a previous log that differs from the current one", func(ctx context.Context) (bool, error) {
			var err error
			if prev, err = kubectl(ctx, f, "-n", ns, "logs", "crasher", "--previous"); err != nil {
				return false, nil
			}
			cur, _ = kubectl(ctx, f, "-n", ns, "logs", "crasher")
			return strings.HasPrefix(prev, "run-at-") && strings.HasPrefix(cur, "run-at-") && prev != cur, nil
		})
		if err != nil {
			t.Errorf("%v: previous %q current %q", err, prev, cur)
		}
	})

	t.Run("exec", func(t *testing.T) {
		out := mustKubectl(t, ctx, f, "-n", ns, "exec", "talker", "--", "echo", "hello", "exec")
		if out != "hello exec\n" {
			t.Errorf("kubectl exec echo = %q", out)
		}
		out, err := kubectl(ctx, f, "-n", ns, "exec", "talker", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
		if err == nil || !strings.Contains(out, "out\n") || !strings.Contains(out, "err\n") || !strings.Contains(err.Error(), "exit status 7") {
			t.Errorf("exec exit 7: %q %v", out, err)
		}
		// stdin reaches the process.
		cmd := exec.CommandContext(ctx, f.Env.Kubectl, "--kubeconfig="+f.Env.Kubeconfig, "-n", ns, "exec", "-i", "talker", "--", "cat")
		cmd.Stdin = strings.NewReader("from stdin\n")
		b, err := cmd.CombinedOutput()
		if err != nil || string(b) != "from stdin\n" {
			t.Errorf("exec -i cat: %q %v", b, err)
		}
	})

	t.Run("attach", func(t *testing.T) {
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		cmd := exec.CommandContext(actx, f.Env.Kubectl, "--kubeconfig="+f.Env.Kubeconfig, "-n", ns, "attach", "talker")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		sc := bufio.NewScanner(stdout)
		ticks := 0
		for ticks < 3 && sc.Scan() {
			if strings.HasPrefix(sc.Text(), "tick-") {
				ticks++
			}
		}
		if ticks < 3 {
			t.Errorf("kubectl attach streamed %d ticks, want 3", ticks)
		}
	})

	t.Run("port-forward", func(t *testing.T) {
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(pctx, f.Env.Kubectl, "--kubeconfig="+f.Env.Kubeconfig, "-n", ns, "port-forward", "pod/web", ":8080", "--address=127.0.0.1")
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		sc := bufio.NewScanner(stdout)
		re := regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)
		var port string
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				port = m[1]
				break
			}
		}
		if port == "" {
			t.Fatal("kubectl port-forward printed no local port")
		}
		go func() { _, _ = io.Copy(io.Discard, stdout) }()
		for i := 0; i < 3; i++ { // several connections over one forward
			resp, err := http.Get("http://127.0.0.1:" + port + "/index.html")
			if err != nil {
				t.Fatalf("GET through the forward: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "hello-through-port-forward\n" {
				t.Errorf("GET through the forward: %d %q", resp.StatusCode, body)
			}
		}
	})

	node := f.Env.NodeName
	t.Run("proxy metrics healthz pods", func(t *testing.T) {
		out := mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/metrics")
		for _, m := range []string{"kubelet_running_pods", "kubelet_running_containers", "kubelet_pleg_relist_duration_seconds_bucket",
			"kubelet_runtime_operations_duration_seconds_bucket", "kubelet_pod_start_duration_seconds_bucket", "kubelet_runtime_operations_total",
			`kubelet_http_requests_total{long_running="false",method="GET",path="containerLogs",server_type="readwrite"}`,
			`kubelet_node_name{node="` + node + `"} 1`, "kubelet_cgroup_version 1", /* the rig's host is hybrid */
			"go_goroutines ", "process_open_fds ", "process_resident_memory_bytes "} {
			if !strings.Contains(out, "\n"+m) {
				t.Errorf("/metrics has no %s", m)
			}
		}
		if !regexp.MustCompile(`\nkubelet_running_pods [3-9]`).MatchString(out) {
			t.Errorf("kubelet_running_pods is not at least 3:\n%s", grepLines(out, "kubelet_running_pods"))
		}
		// Probe metrics have an endpoint of their own and stay out of /metrics, as upstream.
		mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/metrics/probes")
		if strings.Contains(out, "prober_probe_total") {
			t.Errorf("/metrics has prober_probe_total (it belongs on /metrics/probes)")
		}
		if out := mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/healthz"); out != "ok" {
			t.Errorf("/healthz = %q", out)
		}
		out = mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/healthz?verbose")
		if !strings.Contains(out, "[+]pleg ok") || !strings.Contains(out, "[+]syncloop ok") {
			t.Errorf("/healthz?verbose = %q", out)
		}
		out = mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/configz")
		var cz struct {
			KubeletConfig kubeletconfigv1beta1.KubeletConfiguration `json:"kubeletconfig"`
		}
		if err := json.Unmarshal([]byte(out), &cz); err != nil || cz.KubeletConfig.ReadOnlyPort != readOnlyPort || cz.KubeletConfig.Kind != "KubeletConfiguration" {
			t.Errorf("/configz: %v: %.300s", err, out)
		}
		out = mustKubectl(t, ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/pods")
		var list v1.PodList
		if err := json.Unmarshal([]byte(out), &list); err != nil {
			t.Fatalf("/pods: %v: %s", err, out)
		}
		var names []string
		for _, p := range list.Items {
			if p.Namespace == ns {
				names = append(names, p.Name)
				if p.Name == "talker" && p.Status.Phase != v1.PodRunning {
					t.Errorf("/pods: talker phase %q", p.Status.Phase)
				}
			}
		}
		sort.Strings(names)
		if strings.Join(names, ",") != "crasher,talker,web" {
			t.Errorf("/pods lists %v in %s", names, ns)
		}
		// Stats come from the stats provider when one is wired; without one the
		// endpoints say so with a 503. They are measured in the background every
		// housekeeping period (10s): the pods started above may take that long to
		// show.
		want := []string{"node_cpu_usage_seconds_total", "node_memory_working_set_bytes", "container_cpu_usage_seconds_total", "resource_scrape_error 0"}
		errNoProvider := errors.New("no stats provider wired (503)")
		var werr error
		_ = framework.WaitFor(ctx, 30*time.Second, "the pods' resource metrics", func(ctx context.Context) (bool, error) {
			out, err := kubectl(ctx, f, "get", "--raw", "/api/v1/nodes/"+node+"/proxy/metrics/resource")
			switch {
			case err != nil && strings.Contains(out, "ServiceUnavailable"):
				werr = errNoProvider
				return true, nil
			case err != nil:
				werr = fmt.Errorf("%w: %s", err, out)
				return false, nil
			}
			var missing []string
			for _, m := range want {
				if !strings.Contains(out, m) {
					missing = append(missing, m)
				}
			}
			werr = nil
			if len(missing) > 0 {
				werr = fmt.Errorf("no %v in:\n%s", missing, out)
			}
			return werr == nil, nil
		})
		switch {
		case errors.Is(werr, errNoProvider):
			t.Logf("/metrics/resource: %v", werr)
		case werr != nil:
			t.Errorf("/metrics/resource: %v", werr)
		}
	})

	t.Run("read-only port", func(t *testing.T) {
		get := func(path string) (int, string) {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", readOnlyPort, path))
			if err != nil {
				t.Fatalf("GET %s on the read-only port: %v", path, err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		if code, body := get("/pods"); code != 200 || !strings.Contains(body, `"name":"talker"`) {
			t.Errorf("/pods without credentials on the read-only port: %d", code)
		}
		if code, _ := get("/containerLogs/" + ns + "/talker/main"); code != 404 {
			t.Errorf("/containerLogs on the read-only port: %d, want 404 (debugging handlers are not served there)", code)
		}
	})

	t.Run("direct 401 and 403", func(t *testing.T) {
		// The serving cert verifies against the rig's CA for 127.0.0.1.
		do := func(cert *tls.Certificate, token, path string) (int, string) {
			code, body, err := newKubeletClient(t, f, cert).do(ctx, token, http.MethodGet, path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			return code, strings.TrimSpace(body)
		}
		if code, body := do(nil, "", "/pods"); code != 401 || body != "Unauthorized" {
			t.Errorf("no credentials: %d %q", code, body)
		}
		if code, body := do(nil, "not-a-token", "/pods"); code != 401 {
			t.Errorf("bad token: %d %q", code, body)
		}
		apiClient, err := tls.LoadX509KeyPair(f.Env.All["KUBELET_CLIENT_CERT"], f.Env.All["KUBELET_CLIENT_KEY"])
		if err != nil {
			t.Fatal(err)
		}
		if code, body := do(&apiClient, "", "/healthz"); code != 200 || body != "ok" {
			t.Errorf("the apiserver's client cert: %d %q", code, body)
		}
		// A CA-signed client cert for a user without RBAC: authenticated, not authorized.
		nobody := signClientCert(t, f.Env.CACert, f.Env.All["CA_KEY"], "nobody-e2e")
		want := "Forbidden (user=nobody-e2e, verb=get, resource=nodes, subresource=proxy)"
		if code, body := do(nobody, "", "/pods"); code != 403 || body != want {
			t.Errorf("cert without RBAC: %d %q, want 403 %q", code, body, want)
		}
		if code, body := do(nobody, "", "/containerLogs/"+ns+"/talker/main"); code != 403 || strings.Contains(body, "tick") {
			t.Errorf("cert without RBAC on containerLogs: %d %q", code, body)
		}
		// A service account token, reviewed by TokenReview, without nodes/proxy.
		sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "no-rights", Namespace: ns}}
		if _, err := f.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := f.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "no-rights",
			&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = fmt.Sprintf("Forbidden (user=system:serviceaccount:%s:no-rights, verb=get, resource=nodes, subresource=metrics)", ns)
		if code, body := do(nil, tr.Status.Token, "/metrics"); code != 403 || body != want {
			t.Errorf("SA token without RBAC: %d %q, want 403 %q", code, body, want)
		}
	})
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// signClientCert makes a client certificate for cn signed by the rig's CA.
func signClientCert(t *testing.T, caCertFile, caKeyFile, cn string) *tls.Certificate {
	t.Helper()
	caPair, err := tls.LoadX509KeyPair(caCertFile, caKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caPair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caPair.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return &pair
}

// TestKubeletAPILatency measures kubectl exec and kubectl logs through the API server
// (median and p90 of API_LATENCY_RUNS runs, 20 by default); bench/apilatency.sh runs it.
func TestKubeletAPILatency(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	f.CreatePod(ctx, f.BusyboxPod(ns, "target", "sh", "-c", `for i in $(seq 1 100); do echo line-$i; done; exec sleep 100000`))
	f.WaitForPodReady(ctx, ns, "target", 2*time.Minute)
	runs := 20
	if v, err := strconv.Atoi(os.Getenv("API_LATENCY_RUNS")); err == nil && v > 0 {
		runs = v
	}
	measure := func(name string, args ...string) {
		var ds []time.Duration
		for i := 0; i < runs; i++ {
			start := time.Now()
			if _, err := kubectl(ctx, f, args...); err != nil {
				t.Fatal(err)
			}
			ds = append(ds, time.Since(start))
		}
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		t.Logf("API latency %s: median %v p90 %v min %v over %d runs (kubectl process included)", name,
			ds[len(ds)/2].Round(time.Millisecond), ds[len(ds)*9/10].Round(time.Millisecond), ds[0].Round(time.Millisecond), runs)
	}
	// The kubectl process start is part of every figure: a baseline that talks to the API
	// server only separates it out.
	measure("baseline (kubectl get pod)", "-n", ns, "get", "pod", "target", "-o", "name")
	measure("exec (kubectl exec -- true)", "-n", ns, "exec", "target", "--", "true")
	measure("logs (kubectl logs, 100 lines)", "-n", ns, "logs", "target")
}

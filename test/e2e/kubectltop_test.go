//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// metricsServerPort is where the test's metrics-server listens on the node's IP. The rig has no
// kube-proxy: the API server reaches it through the selector-less Service's EndpointSlice
// (--enable-aggregator-routing).
const metricsServerPort = 4443

// metricsServerObjects are metrics-server's objects as its own manifests (manifests/base of
// v0.8.0) make them, bound to the rig's user system:metrics-server instead of a service
// account (it runs as a host process with a client cert), and a Service without a selector
// whose EndpointSlice names the node's IP.
func metricsServerObjects(nodeIP string) string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:metrics-server
rules:
- apiGroups: [""]
  resources: [nodes/metrics]
  verbs: [get]
- apiGroups: [""]
  resources: [pods, nodes]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:metrics-server
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:metrics-server}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:metrics-server}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: metrics-server:system:auth-delegator
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: system:auth-delegator}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:metrics-server}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: metrics-server-auth-reader
  namespace: kube-system
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: extension-apiserver-authentication-reader}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: system:metrics-server}]
---
apiVersion: v1
kind: Service
metadata:
  name: metrics-server
  namespace: kube-system
spec:
  ports: [{name: https, port: 443, protocol: TCP, targetPort: %[2]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: metrics-server-node
  namespace: kube-system
  labels: {kubernetes.io/service-name: metrics-server}
addressType: IPv4
ports: [{name: https, port: %[2]d, protocol: TCP}]
endpoints: [{addresses: ["%[1]s"], conditions: {ready: true}}]
`, nodeIP, metricsServerPort)
}

// apiServiceObject is metrics-server's APIService (its manifests/base/apiservice.yaml): the
// serving cert metrics-server makes for itself is not verified.
const apiServiceObject = `apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta1.metrics.k8s.io
spec:
  service: {name: metrics-server, namespace: kube-system}
  group: metrics.k8s.io
  version: v1beta1
  insecureSkipTLSVerify: true
  groupPriorityMinimum: 100
  versionPriority: 100
`

// kubectlStdin runs the rig's kubectl as the admin with stdin.
func kubectlStdin(ctx context.Context, f *framework.Framework, stdin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, f.Env.Kubectl, append([]string{"--kubeconfig=" + f.Env.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// startMetricsServer starts metrics-server v0.8.0 (built by test/rig/build-bins.sh into
// RIG_BIN_DIR) as a host process on the node's IP with the rig's system:metrics-server
// credential, creates its RBAC, Service, EndpointSlice and APIService, and waits until the
// APIService is Available. At cleanup the APIService goes first (an unavailable aggregated API
// stalls namespace deletion and discovery for the tests after), then the process (joined),
// then the other objects.
func startMetricsServer(t *testing.T, ctx context.Context, f *framework.Framework) {
	t.Helper()
	bin := filepath.Join(f.Env.All["RIG_BIN_DIR"], "metrics-server")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("metrics-server: %v (run test/rig/build-bins.sh)", err)
	}
	nodeIP, kc := f.Env.All["NODE_IP"], f.Env.All["METRICS_SERVER_KUBECONFIG"]
	if net.ParseIP(nodeIP) == nil || kc == "" {
		t.Fatalf("rig.env has NODE_IP=%q METRICS_SERVER_KUBECONFIG=%q: rerun test/rig/up.sh", nodeIP, kc)
	}
	objects := metricsServerObjects(nodeIP)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := kubectlStdin(cctx, f, objects, "delete", "--ignore-not-found", "-f", "-"); err != nil {
			t.Errorf("cleanup: %v", err)
		} else {
			t.Logf("cleanup: %s", strings.TrimSpace(out))
		}
	})
	if _, err := kubectlStdin(ctx, f, objects, "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	// The auth reader binding must be in force before metrics-server reads the front proxy's
	// settings (extension-apiserver-authentication) at start.
	err := framework.WaitFor(ctx, 30*time.Second, "system:metrics-server may read extension-apiserver-authentication", func(ctx context.Context) (bool, error) {
		out, _ := kubectl(ctx, f, "auth", "can-i", "--as=system:metrics-server", "-n", "kube-system", "get", "configmap/extension-apiserver-authentication")
		return strings.TrimSpace(out) == "yes", nil
	})
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	logPath := filepath.Join(dir, "metrics-server.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin,
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address="+nodeIP, "--secure-port="+strconv.Itoa(metricsServerPort), "--cert-dir="+dir,
		"--kubelet-preferred-address-types=InternalIP,Hostname,ExternalIP", "--kubelet-use-node-status-port",
		"--kubelet-certificate-authority="+f.Env.CACert,
		"--kubelet-client-certificate="+f.Env.All["METRICS_SERVER_CERT"], "--kubelet-client-key="+f.Env.All["METRICS_SERVER_KEY"],
		"--metric-resolution=10s", "--kubelet-request-timeout=5s", "--v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("starting metrics-server: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	exited := func() error {
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("metrics-server exited (%v); log:\n%s", err, tail(logPath, 3000))
		default:
			return nil
		}
	}
	// Registered after the objects' cleanup, so it runs before it: the APIService first, then
	// the process.
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kubectlStdin(cctx, f, apiServiceObject, "delete", "--ignore-not-found", "--wait", "-f", "-"); err != nil {
			t.Errorf("cleanup: %v", err)
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			t.Logf("metrics-server did not exit within 15s of SIGTERM; killing it")
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("metrics-server log:\n%s", tail(logPath, 6000))
		}
	})
	if out, err := kubectlStdin(ctx, f, apiServiceObject, "apply", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	err = framework.WaitFor(ctx, 90*time.Second, "APIService v1beta1.metrics.k8s.io Available", func(ctx context.Context) (bool, error) {
		if err := exited(); err != nil {
			return false, &framework.StopError{Err: err}
		}
		out, err := kubectl(ctx, f, "get", "apiservice", "v1beta1.metrics.k8s.io", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
		if err != nil {
			return false, err
		}
		return out == "True", nil
	})
	if err != nil {
		out, _ := kubectl(ctx, f, "get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "jsonpath={.status.conditions}")
		t.Fatalf("%v; conditions %s", err, out)
	}
}

// tail is the last n bytes of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// topRow finds name's row in kubectl top's output and returns its millicores and MiB.
func topRow(out, name string) (milliCPU, memMi int64, ok bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+(\d+)m\s+(?:\d+%\s+)?(\d+)Mi\b`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, 0, false
	}
	c, _ := strconv.ParseInt(m[1], 10, 64)
	mem, _ := strconv.ParseInt(m[2], 10, 64)
	return c, mem, true
}

// TestKubectlTop: metrics-server v0.8.0, behind the API server's aggregation layer, scrapes
// nodelet's /metrics/resource, and `kubectl top node` and `kubectl top pod` print numbers for
// the node and for a pod spinning under a 100m CPU limit: the node's and the pod's CPU in
// millicores, more than 10m as the pod spins and for the pod at most its limit with slack, the
// node's memory above zero, and the pod's memory above zero in the metrics API.
func TestKubectlTop(t *testing.T) {
	f := framework.New(t)
	ctx := context.Background()
	ns := f.NewNamespace()
	startNode(t, f, framework.NodeletOptions{})
	pod := f.BusyboxPod(ns, "top-burner", "sh", "-c", "while :; do :; done")
	cpu := v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m")}
	pod.Spec.Containers[0].Resources = v1.ResourceRequirements{Requests: cpu, Limits: cpu}
	f.CreatePod(ctx, pod)
	f.WaitForPodReady(ctx, ns, pod.Name, 2*time.Minute)
	startMetricsServer(t, ctx, f)

	// metrics-server has numbers after its second scrape (CPU is a rate); until then kubectl
	// says the metrics are not available yet.
	top := func(name string, args ...string) (string, int64, int64) {
		t.Helper()
		var out string
		var c, m int64
		err := framework.WaitFor(ctx, 90*time.Second, "kubectl "+strings.Join(args, " ")+" to have a row for "+name, func(ctx context.Context) (bool, error) {
			var ok bool
			out, _ = kubectl(ctx, f, args...)
			c, m, ok = topRow(out, name)
			return ok, nil
		})
		if err != nil {
			t.Fatalf("%v; last output:\n%s", err, out)
		}
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
		return out, c, m
	}

	_, nodeCPU, nodeMem := top(f.Env.NodeName, "top", "node", f.Env.NodeName)
	if nodeCPU <= 10 || nodeMem <= 0 {
		t.Errorf("kubectl top node: %s at %dm CPU, %dMi memory; want more than 10m (a pod spins) and memory above 0", f.Env.NodeName, nodeCPU, nodeMem)
	}
	_, podCPU, _ := top(pod.Name, "top", "pod", "-n", ns)
	if podCPU <= 10 || podCPU > 150 {
		t.Errorf("kubectl top pod: %s at %dm CPU; want more than 10m and at most 150m (its 100m limit with slack)", pod.Name, podCPU)
	}
	// A spinning shell's working set can round to 0Mi in kubectl's table: the API has bytes.
	raw, err := kubectl(ctx, f, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/"+ns+"/pods/"+pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	var pm struct {
		Containers []struct {
			Name  string            `json:"name"`
			Usage map[string]string `json:"usage"`
		} `json:"containers"`
	}
	if err := json.Unmarshal([]byte(raw), &pm); err != nil {
		t.Fatalf("PodMetrics %s: %v: %.300s", pod.Name, err, raw)
	}
	if len(pm.Containers) != 1 || pm.Containers[0].Name != pod.Spec.Containers[0].Name {
		t.Fatalf("PodMetrics %s has containers %+v, want one named %q", pod.Name, pm.Containers, pod.Spec.Containers[0].Name)
	}
	mem, err := resource.ParseQuantity(pm.Containers[0].Usage["memory"])
	if err != nil || mem.Value() <= 0 {
		t.Errorf("PodMetrics %s: memory %q (%v), want above 0", pod.Name, pm.Containers[0].Usage["memory"], err)
	}
	t.Logf("PodMetrics %s: %s", pod.Name, raw)
}

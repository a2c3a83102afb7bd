package prober

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/internal/testsupport/fakecri"
)

// runningContainer starts a container on a fake CRI and returns a client and its ID.
func runningContainer(t *testing.T) (*fakecri.Runtime, *cri.Client, string) {
	t.Helper()
	ctx := context.Background()
	f := fakecri.New(t)
	f.AddImage("busybox")
	c, err := cri.New(ctx, f.Endpoint(), f.Endpoint(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(ctx) })
	sbCfg := &runtimeapi.PodSandboxConfig{
		Metadata:     &runtimeapi.PodSandboxMetadata{Name: "web", Namespace: "default", Uid: "uid-1"},
		LogDirectory: t.TempDir(),
	}
	sb, err := c.RunPodSandbox(ctx, sbCfg, "")
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.CreateContainer(ctx, sb, &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "app"},
		Image:    &runtimeapi.ImageSpec{Image: "busybox"},
		LogPath:  "app/0.log",
		Labels:   map[string]string{cri.LabelContainerName: "app"},
	}, sbCfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StartContainer(ctx, id); err != nil {
		t.Fatal(err)
	}
	return f, c, id
}

func TestExecProbe(t *testing.T) {
	f, c, id := runningContainer(t)
	h := NewHandler(c)
	tests := []struct {
		name       string
		stdout     string
		code       int32
		delay      time.Duration
		want       Result
		wantOutput string
		wantErr    bool
	}{
		{name: "exit 0 is success", stdout: "fine", want: Success, wantOutput: "fine"},
		{name: "non-zero exit is failure with output", stdout: "not ready", code: 1, want: Failure, wantOutput: "not ready"},
		{name: "timeout is failure", delay: 2 * time.Second, want: Failure, wantOutput: `command "check" timed out`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f.SetExecSync(func(_ string, _ []string) ([]byte, []byte, int32) {
				time.Sleep(tt.delay)
				return []byte(tt.stdout), nil, tt.code
			})
			res, out, err := h.Probe(context.Background(), Target{ContainerID: id}, &v1.Probe{
				ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}}, TimeoutSeconds: 1,
			})
			if res != tt.want || out != tt.wantOutput || (err != nil) != tt.wantErr {
				t.Errorf("Probe = %v, %q, %v; want %v, %q", res, out, err, tt.want, tt.wantOutput)
			}
		})
	}
	// A container that is gone is an error (no verdict), not a failure.
	res, _, err := h.Probe(context.Background(), Target{ContainerID: "missing"}, &v1.Probe{
		ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}},
	})
	if res != Unknown || err == nil {
		t.Errorf("probe of a missing container = %v, %v; want unknown and an error", res, err)
	}
}

func hostPort(t *testing.T, rawURL string) (string, int) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	host, p, _ := net.SplitHostPort(u.Host)
	port, _ := strconv.Atoi(p)
	return host, port
}

func TestHTTPGetProbe(t *testing.T) {
	var seen *http.Request
	mux := http.NewServeMux()
	mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { seen = r; _, _ = w.Write([]byte("fine")) })
	mux.HandleFunc("/missing", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://0.0.0.0/", http.StatusFound)
	})
	mux.HandleFunc("/here", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ok", http.StatusFound) })
	mux.HandleFunc("/here-missing", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/missing", http.StatusFound) })
	mux.HandleFunc("/loop", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/loop", http.StatusFound) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("x", 3*maxRespBody)))
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) { time.Sleep(1500 * time.Millisecond) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	tlsSrv := httptest.NewTLSServer(mux)
	defer tlsSrv.Close()
	ip, port := hostPort(t, srv.URL)
	_, tlsPort := hostPort(t, tlsSrv.URL)
	named := &v1.Container{Name: "web", Ports: []v1.ContainerPort{{Name: "http", ContainerPort: int32(port)}}}
	h := NewHandler(nil)

	tests := []struct {
		name   string
		action v1.HTTPGetAction
		want   Result
		output string
	}{
		{"2xx on the pod IP by port number", v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port))}, Success, "fine"},
		{"named port", v1.HTTPGetAction{Path: "ok", Port: intstr.FromString("http")}, Success, "fine"},
		{"404 fails", v1.HTTPGetAction{Path: "/missing", Port: intstr.FromInt32(int32(port))}, Failure, "HTTP probe failed with statuscode: 404"},
		{"https without verification", v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(tlsPort)), Scheme: v1.URISchemeHTTPS}, Success, "fine"},
		// Upstream's wording, which the conformance spec waits for in the ProbeWarning event.
		{"redirect to another host is not followed: a warning", v1.HTTPGetAction{Path: "/elsewhere", Port: intstr.FromInt32(int32(port))}, Warning,
			"Probe terminated redirects, Response body: <a href=\"http://0.0.0.0/\">Found</a>.\n\n"},
		{"redirect on the same host is followed to success", v1.HTTPGetAction{Path: "/here", Port: intstr.FromInt32(int32(port))}, Success, "fine"},
		{"redirect on the same host is followed to failure", v1.HTTPGetAction{Path: "/here-missing", Port: intstr.FromInt32(int32(port))}, Failure, "HTTP probe failed with statuscode: 404"},
		{"more than 10 redirects fail", v1.HTTPGetAction{Path: "/loop", Port: intstr.FromInt32(int32(port))}, Failure, `Get "/loop": stopped after 10 redirects`},
		{"a body over 10 KiB is cut, not an error", v1.HTTPGetAction{Path: "/big", Port: intstr.FromInt32(int32(port))}, Success, strings.Repeat("x", maxRespBody)},
		{"timeout fails", v1.HTTPGetAction{Path: "/slow", Port: intstr.FromInt32(int32(port))}, Failure, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out, err := h.Probe(context.Background(), Target{PodIP: ip, Container: named},
				&v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &tt.action}, TimeoutSeconds: 1})
			if err != nil || res != tt.want || (tt.output != "" && out != tt.output) {
				t.Errorf("Probe = %v, %q, %v; want %v, %q", res, out, err, tt.want, tt.output)
			}
		})
	}

	t.Run("headers and Host", func(t *testing.T) {
		seen = nil
		a := v1.HTTPGetAction{Path: "/ok", Port: intstr.FromInt32(int32(port)), HTTPHeaders: []v1.HTTPHeader{
			{Name: "Host", Value: "web.example"}, {Name: "X-Probe", Value: "a"}, {Name: "X-Probe", Value: "b"}, {Name: "Accept", Value: "text/plain"},
		}}
		if res, _, err := h.HTTPGet(context.Background(), Target{PodIP: ip}, &a, time.Second); res != Success || err != nil {
			t.Fatalf("HTTPGet = %v, %v", res, err)
		}
		if seen.Host != "web.example" || len(seen.Header["X-Probe"]) != 2 || seen.Header.Get("Accept") != "text/plain" ||
			seen.Header.Get("User-Agent") != userAgent {
			t.Errorf("request host %q headers %v", seen.Host, seen.Header)
		}
	})
	t.Run("unknown named port is an error", func(t *testing.T) {
		res, _, err := h.Probe(context.Background(), Target{PodIP: ip, Container: named},
			&v1.Probe{ProbeHandler: v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("nope")}}})
		if res != Unknown || err == nil {
			t.Errorf("Probe = %v, %v; want an error", res, err)
		}
	})
}

func TestTCPProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := closed.Addr().(*net.TCPAddr).Port
	_ = closed.Close()
	defer lis.Close()
	h := NewHandler(nil)
	tests := []struct {
		name string
		port int
		host string
		want Result
	}{
		{"listening port on the pod IP", port, "", Success},
		{"explicit host", port, "127.0.0.1", Success},
		{"closed port fails", closedPort, "", Failure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, err := h.Probe(context.Background(), Target{PodIP: "127.0.0.1"},
				&v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Host: tt.host, Port: intstr.FromInt32(int32(tt.port))}}})
			if res != tt.want || err != nil {
				t.Errorf("Probe = %v, %v; want %v", res, err, tt.want)
			}
		})
	}
}

func TestGRPCProbe(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	hs.SetServingStatus("db", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	port := int32(lis.Addr().(*net.TCPAddr).Port)

	plain := grpc.NewServer() // no health service
	plainLis, _ := net.Listen("tcp", "127.0.0.1:0")
	go func() { _ = plain.Serve(plainLis) }()
	defer plain.Stop()

	h := NewHandler(nil)
	tests := []struct {
		name    string
		port    int32
		service *string
		want    Result
	}{
		{"serving", port, nil, Success},
		{"named service not serving", port, ptr.To("db"), Failure},
		{"unknown service", port, ptr.To("nope"), Failure},
		{"no health service", int32(plainLis.Addr().(*net.TCPAddr).Port), nil, Failure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, out, err := h.Probe(context.Background(), Target{PodIP: "127.0.0.1"},
				&v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: tt.port, Service: tt.service}}, TimeoutSeconds: 2})
			if res != tt.want || err != nil {
				t.Errorf("Probe = %v, %q, %v; want %v", res, out, err, tt.want)
			}
		})
	}
}

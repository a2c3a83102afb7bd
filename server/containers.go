package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/cri"
)

// httpError is an error with the status the client should see.
type httpError struct {
	code int
	msg  string
}

func (e *httpError) Error() string { return e.msg }

func errorf(code int, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

func writeError(w http.ResponseWriter, err error) {
	var he *httpError
	if errors.As(err, &he) {
		http.Error(w, he.msg, he.code)
		return
	}
	http.Error(w, err.Error(), http.StatusInternalServerError)
}

// findSandbox returns the newest sandbox of the pod ns/name (of uid, when given), from
// the runtime: it knows pods that have finished too, whose logs are still wanted.
func (s *Server) findSandbox(ctx context.Context, ns, name, uid string, readyOnly bool) (*runtimeapi.PodSandbox, error) {
	labels := map[string]string{cri.LabelPodNamespace: ns, cri.LabelPodName: name}
	if uid != "" {
		labels[cri.LabelPodUID] = uid
	}
	filter := &runtimeapi.PodSandboxFilter{LabelSelector: labels}
	if readyOnly {
		filter.State = &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}
	}
	sbs, err := s.deps.Runtime.ListPodSandbox(ctx, filter)
	if err != nil {
		return nil, fmt.Errorf("listing the sandboxes of pod %s/%s: %w", ns, name, err)
	}
	if len(sbs) == 0 {
		return nil, errorf(http.StatusNotFound, "pod %q does not exist", name)
	}
	sort.Slice(sbs, func(i, j int) bool { return sbs[i].CreatedAt > sbs[j].CreatedAt })
	return sbs[0], nil
}

// findContainers returns the instances of a pod's container, newest first.
func (s *Server) findContainers(ctx context.Context, ns, pod, uid, container string) ([]*runtimeapi.Container, error) {
	sb, err := s.findSandbox(ctx, ns, pod, uid, false)
	if err != nil {
		return nil, err
	}
	podUID := sb.GetLabels()[cri.LabelPodUID]
	if podUID == "" {
		podUID = sb.GetMetadata().GetUid()
	}
	cs, err := s.deps.Runtime.ListContainers(ctx, &runtimeapi.ContainerFilter{
		LabelSelector: map[string]string{cri.LabelPodUID: podUID, cri.LabelContainerName: container},
	})
	if err != nil {
		return nil, fmt.Errorf("listing container %s of pod %s/%s: %w", container, ns, pod, err)
	}
	if len(cs) == 0 {
		return nil, errorf(http.StatusNotFound, "container %q not found in pod %q", container, pod)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].CreatedAt > cs[j].CreatedAt })
	return cs, nil
}

// runningContainer returns the pod's running instance of container.
func (s *Server) runningContainer(ctx context.Context, ns, pod, uid, container string) (*runtimeapi.Container, error) {
	cs, err := s.findContainers(ctx, ns, pod, uid, container)
	if err != nil {
		return nil, err
	}
	for _, c := range cs {
		if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING {
			return c, nil
		}
	}
	return nil, errorf(http.StatusNotFound, "container %q in pod %q is not running", container, pod)
}

// ---------------------------------------------------------------- logs

func (s *Server) containerLogs(w http.ResponseWriter, r *http.Request) {
	ns, pod, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("container")
	if container == "" {
		http.Error(w, `{"message": "Missing container name."}`, http.StatusBadRequest)
		return
	}
	po, err := parseLogOptions(r.URL.Query())
	if err != nil {
		http.Error(w, `{"message": "Unable to decode query."}`, http.StatusBadRequest)
		return
	}
	if err := validateLogOptions(po); err != nil {
		http.Error(w, `{"message": "Invalid request."}`, http.StatusUnprocessableEntity)
		return
	}
	ctx := r.Context()
	cs, err := s.findContainers(ctx, ns, pod, "", container)
	if err != nil {
		writeError(w, err)
		return
	}
	c := cs[0]
	if po.Previous {
		if len(cs) < 2 {
			writeError(w, errorf(http.StatusBadRequest, "previous terminated container %q in pod %q not found", container, pod))
			return
		}
		c = cs[1]
	}
	st, err := s.deps.Runtime.ContainerStatus(ctx, c.Id, false)
	if err != nil {
		writeError(w, fmt.Errorf("reading the status of container %s: %w", c.Id, err))
		return
	}
	logPath := st.GetStatus().GetLogPath()
	if logPath == "" {
		writeError(w, errorf(http.StatusNotFound, "container %q in pod %q has no log file", container, pod))
		return
	}
	opts := LogOptions{Follow: po.Follow, Tail: -1, Timestamps: po.Timestamps}
	if po.TailLines != nil {
		opts.Tail = *po.TailLines
	}
	if po.LimitBytes != nil {
		opts.LimitBytes = *po.LimitBytes
	}
	switch {
	case po.SinceSeconds != nil:
		opts.Since = s.deps.Clock.Now().Add(-time.Duration(*po.SinceSeconds) * time.Second)
	case po.SinceTime != nil:
		opts.Since = po.SinceTime.Time
	}
	running := followRunning(s.deps.Runtime, c.Id, po.Previous)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	var out io.Writer = w
	if opts.Follow {
		out = &flushWriter{w: w, f: http.NewResponseController(w)}
	}
	err = ReadLogs(ctx, logPath, opts, out, logFollower{running: running, clock: s.deps.Clock, poll: s.logPoll})
	if err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, "Reading container logs", "pod", klog.KRef(ns, pod), "container", container)
	}
}

// followRunning is how a followed log learns its container stopped. A previous
// instance has stopped: following it ends at its end. A runtime that does not
// answer (Unavailable: restarting) leaves the container running, as upstream's
// ReadLogs assumes: containers outlive their runtime's CRI server.
func followRunning(rt Runtime, id string, previous bool) func(ctx context.Context) bool {
	return func(ctx context.Context) bool {
		if previous {
			return false
		}
		st, err := rt.ContainerStatus(ctx, id, false)
		if err != nil {
			return cri.Code(err) == codes.Unavailable
		}
		return st.GetStatus().GetState() == runtimeapi.ContainerState_CONTAINER_RUNNING
	}
}

// parseLogOptions reads the v1.PodLogOptions query parameters the API server sends.
func parseLogOptions(q url.Values) (*v1.PodLogOptions, error) {
	po := &v1.PodLogOptions{}
	var err error
	boolOpt := func(name string, dst *bool) {
		if v := q.Get(name); v != "" && err == nil {
			*dst, err = strconv.ParseBool(v)
		}
	}
	intOpt := func(name string) *int64 {
		v := q.Get(name)
		if v == "" || err != nil {
			return nil
		}
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		return &n
	}
	boolOpt("follow", &po.Follow)
	boolOpt("previous", &po.Previous)
	boolOpt("timestamps", &po.Timestamps)
	po.SinceSeconds, po.TailLines, po.LimitBytes = intOpt("sinceSeconds"), intOpt("tailLines"), intOpt("limitBytes")
	if v := q.Get("sinceTime"); v != "" && err == nil {
		var t time.Time
		if t, err = time.Parse(time.RFC3339, v); err == nil {
			mt := metav1.NewTime(t)
			po.SinceTime = &mt
		}
	}
	if err != nil {
		return nil, fmt.Errorf("decoding the log options: %w", err)
	}
	return po, nil
}

func validateLogOptions(o *v1.PodLogOptions) error {
	if o.SinceSeconds != nil && o.SinceTime != nil {
		return errors.New("at most one of sinceSeconds or sinceTime may be specified")
	}
	if o.SinceSeconds != nil && *o.SinceSeconds < 1 {
		return errors.New("sinceSeconds must be greater than 0")
	}
	if o.TailLines != nil && *o.TailLines < 0 {
		return errors.New("tailLines must be greater than or equal to 0")
	}
	if o.LimitBytes != nil && *o.LimitBytes < 1 {
		return errors.New("limitBytes must be greater than 0")
	}
	return nil
}

// flushWriter sends each write to the client at once (followed logs).
type flushWriter struct {
	w io.Writer
	f *http.ResponseController
}

func (fw *flushWriter) Write(p []byte) (int, error) {
	n, err := fw.w.Write(p)
	if err == nil {
		err = fw.f.Flush()
	}
	return n, err
}

func (fw *flushWriter) Flush() { _ = fw.f.Flush() }

// ---------------------------------------------------------------- exec, attach, portForward, run

func boolParam(q url.Values, name string) bool {
	v := q.Get(name)
	if v == "1" {
		return true
	}
	b, _ := strconv.ParseBool(v)
	return b
}

// streamOptions reads the input/output/error/tty parameters ("1" is true) the API
// server sends.
func streamOptions(q url.Values) (stdin, stdout, stderr, tty bool, err error) {
	stdin, stdout, stderr = boolParam(q, v1.ExecStdinParam), boolParam(q, v1.ExecStdoutParam), boolParam(q, v1.ExecStderrParam)
	tty = boolParam(q, v1.ExecTTYParam)
	if tty && stderr {
		// With a tty, stderr is merged into stdout.
		stderr = false
	}
	if !stdin && !stdout && !stderr {
		return false, false, false, false, errors.New("you must specify at least 1 of stdin, stdout, stderr")
	}
	return stdin, stdout, stderr, tty, nil
}

func (s *Server) stream(verb string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns, pod, uid, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
		q := r.URL.Query()
		stdin, stdout, stderr, tty, err := streamOptions(q)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		c, err := s.runningContainer(ctx, ns, pod, uid, container)
		if err != nil {
			writeError(w, err)
			return
		}
		var streamURL string
		switch verb {
		case "exec":
			cmd := q["command"]
			if len(cmd) == 0 {
				http.Error(w, "missing command", http.StatusBadRequest)
				return
			}
			resp, err := s.deps.Runtime.Exec(ctx, &runtimeapi.ExecRequest{ContainerId: c.Id, Cmd: cmd, Tty: tty, Stdin: stdin, Stdout: stdout, Stderr: stderr})
			if err != nil {
				writeError(w, err)
				return
			}
			streamURL = resp.GetUrl()
		case "attach":
			resp, err := s.deps.Runtime.Attach(ctx, &runtimeapi.AttachRequest{ContainerId: c.Id, Tty: tty, Stdin: stdin, Stdout: stdout, Stderr: stderr})
			if err != nil {
				writeError(w, err)
				return
			}
			streamURL = resp.GetUrl()
		}
		proxyStream(w, r, streamURL)
	}
}

func (s *Server) portForward(w http.ResponseWriter, r *http.Request) {
	ns, pod, uid := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid")
	ctx := r.Context()
	sb, err := s.findSandbox(ctx, ns, pod, uid, true)
	if err != nil {
		writeError(w, err)
		return
	}
	// Over SPDY the ports arrive in stream headers; websocket clients name them here.
	var ports []int32
	for _, p := range r.URL.Query()["port"] {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			http.Error(w, fmt.Sprintf("invalid port %q", p), http.StatusBadRequest)
			return
		}
		ports = append(ports, int32(n))
	}
	resp, err := s.deps.Runtime.PortForward(ctx, &runtimeapi.PortForwardRequest{PodSandboxId: sb.Id, Port: ports})
	if err != nil {
		writeError(w, err)
		return
	}
	proxyStream(w, r, resp.GetUrl())
}

// proxyStream proxies the upgraded connection to the runtime's streaming server (as
// upstream does by default, rather than redirecting the client to it).
func proxyStream(w http.ResponseWriter, r *http.Request, streamURL string) {
	target, err := url.Parse(streamURL)
	if err != nil || target.Host == "" {
		http.Error(w, fmt.Sprintf("the runtime returned an unusable streaming URL %q", streamURL), http.StatusInternalServerError)
		return
	}
	if !isUpgrade(r) {
		http.Error(w, "Upgrade request required", http.StatusBadRequest)
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			u := *target
			u.RawQuery = pr.In.URL.RawQuery
			pr.Out.URL = &u
			pr.Out.Host = target.Host
			// The caller's credentials are for this API, not for the runtime.
			pr.Out.Header.Del("Authorization")
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			klog.FromContext(r.Context()).Error(err, "Proxying a stream to the runtime", "url", target.Redacted())
			http.Error(w, fmt.Sprintf("error proxying to the container runtime's streaming server: %v", err), http.StatusBadGateway)
		},
	}
	rp.ServeHTTP(w, r)
}

func isUpgrade(r *http.Request) bool {
	for _, v := range r.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return r.Header.Get("Upgrade") != ""
			}
		}
	}
	return false
}

// run is POST /run/{ns}/{pod}/{container}?cmd=...: the command's combined output.
func (s *Server) run(w http.ResponseWriter, r *http.Request) {
	ns, pod, uid, container := r.PathValue("ns"), r.PathValue("pod"), r.PathValue("uid"), r.PathValue("container")
	cmd := strings.Fields(r.URL.Query().Get("cmd"))
	if len(cmd) == 0 {
		http.Error(w, "missing cmd", http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	c, err := s.runningContainer(ctx, ns, pod, uid, container)
	if err != nil {
		writeError(w, err)
		return
	}
	stdout, stderr, err := s.deps.Runtime.ExecSync(ctx, c.Id, cmd, 0)
	var exitErr *cri.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = w.Write(append(stdout, stderr...))
}

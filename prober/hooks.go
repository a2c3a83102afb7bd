package prober

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
)

// RunHook runs a postStart or preStop handler (exec, httpGet or sleep) and
// returns a message describing a failure. ctx bounds it (preStop: the grace period).
func (h *Handler) RunHook(ctx context.Context, clk clock.Clock, pod *v1.Pod, t Target, hook *v1.LifecycleHandler) (string, error) {
	podName := pod.Name + "_" + pod.Namespace + "(" + string(pod.UID) + ")"
	switch {
	case hook.Exec != nil:
		stdout, stderr, err := h.exec.ExecSync(ctx, t.ContainerID, hook.Exec.Command, 0)
		if err != nil {
			return fmt.Sprintf("Exec lifecycle hook (%v) for Container %q in Pod %q failed - error: %v, message: %q",
				hook.Exec.Command, containerName(t.Container), podName, err, string(stdout)+string(stderr)), fmt.Errorf("running exec hook: %w", err)
		}
		return "", nil
	case hook.HTTPGet != nil:
		err := h.hookHTTPGet(ctx, t, hook.HTTPGet)
		if err != nil {
			return fmt.Sprintf("HTTP lifecycle hook (%s) for Container %q in Pod %q failed - error: %v",
				hook.HTTPGet.Path, containerName(t.Container), podName, err), fmt.Errorf("running httpGet hook: %w", err)
		}
		return "", nil
	case hook.Sleep != nil:
		select {
		case <-clk.After(time.Duration(hook.Sleep.Seconds) * time.Second):
			return "", nil
		case <-ctx.Done():
			// Cut short by the grace period: that is how sleep hooks end, not a failure.
			return "", nil
		}
	case hook.TCPSocket != nil:
		// Deprecated in the API and never run by the upstream kubelet.
		return "", nil
	}
	return "Cannot run handler: missing handler", errors.New("missing lifecycle handler")
}

// hookHTTPGet sends the hook's request; only a failed request is an error. An
// https hook that cannot speak TLS to a plain server is retried over http, as
// upstream does for hooks written before the scheme was honoured.
func (h *Handler) hookHTTPGet(ctx context.Context, t Target, a *v1.HTTPGetAction) error {
	req, err := newHTTPRequest(ctx, t, a)
	if err != nil {
		return err
	}
	resp, err := h.http.Do(req)
	if err != nil && req.URL.Scheme == "https" && strings.Contains(err.Error(), "server gave HTTP response") {
		req.URL.Scheme = "http"
		resp, err = h.http.Do(req)
	}
	if err != nil {
		return err
	}
	// The status code is not looked at: the upstream kubelet never has
	// (kubernetes#56963), so hooks answering 404 or 500 run under it, and
	// failing them here would kill containers it keeps.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxRespBody))
	_ = resp.Body.Close()
	return nil
}

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/test/e2e/framework"
)

// TestEnableServerFalse: with enableServer: false the node runs and becomes Ready, but
// nothing listens on the kubelet API port; healthz still answers.
func TestEnableServerFalse(t *testing.T) {
	f := framework.New(t)
	startNode(t, f, framework.NodeletOptions{Config: func(c *kubeletconfigv1beta1.KubeletConfiguration) {
		c.EnableServer = ptr.To(false)
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The healthz port answering proves nodelet is up and serving what it should.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/healthz", f.Env.NodeletHealthzPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("healthz: %v", err)
	}
	resp.Body.Close()
	addr := fmt.Sprintf("127.0.0.1:%d", f.Env.NodeletPort)
	if conn, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		conn.Close()
		t.Fatalf("%s accepts connections with enableServer: false", addr)
	}
}

// TestUnknownFeatureGateRefused: --feature-gates with a gate the kubelet does not know
// stops nodelet at start with an error naming the gate, as upstream, instead of running
// with the gate silently ignored.
func TestUnknownFeatureGateRefused(t *testing.T) {
	f := framework.New(t)
	n := f.StartNodelet(framework.NodeletOptions{ExtraArgs: []string{"--feature-gates=Bogus=true"}})
	if err := n.WaitExit(time.Minute); err == nil {
		t.Fatal("nodelet started with --feature-gates=Bogus=true")
	}
	if logs := n.Logs(); !strings.Contains(logs, "Bogus") || !strings.Contains(logs, "unrecognized feature gate") {
		t.Errorf("the start-up error does not name the gate:\n%s", logs)
	}
}

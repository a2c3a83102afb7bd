package node

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

const (
	// Upstream still sets the deprecated beta OS/arch labels next to the GA ones.
	betaLabelOS   = "beta.kubernetes.io/os"
	betaLabelArch = "beta.kubernetes.io/arch"
	// Tells the attach/detach controller that it, not the node agent, attaches volumes here.
	controllerAttachDetachAnnotation = "volumes.kubernetes.io/controller-managed-attach-detach"
)

// defaultLabels are the labels this agent owns and reconciles on an existing Node. As
// upstream, a --node-labels entry for one of these keys overrides the computed value.
func (c *Controller) defaultLabels() map[string]string {
	labels := map[string]string{
		v1.LabelHostname:   c.cfg.Hostname,
		v1.LabelOSStable:   runtime.GOOS,
		v1.LabelArchStable: runtime.GOARCH,
		betaLabelOS:        runtime.GOOS,
		betaLabelArch:      runtime.GOARCH,
	}
	for k := range labels {
		if v, ok := c.cfg.Labels[k]; ok {
			labels[k] = v
		}
	}
	return labels
}

// initialNode is the Node this agent would create: labels, taints, providerID and status.
func (c *Controller) initialNode(ctx context.Context) (*v1.Node, []conditionEvent) {
	n := c.localNode()
	events := c.setNodeStatus(ctx, n)
	return n, events
}

// localNode is the Node this agent would create without its status: its name,
// labels, taints and providerID.
func (c *Controller) localNode() *v1.Node {
	labels := map[string]string{}
	for k, v := range c.cfg.Labels {
		labels[k] = v
	}
	for k, v := range c.defaultLabels() {
		labels[k] = v
	}
	n := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.cfg.NodeName,
			Labels:      labels,
			Annotations: map[string]string{controllerAttachDetachAnnotation: "true"},
		},
		Spec: v1.NodeSpec{ProviderID: c.providerID},
	}
	for _, t := range c.taints {
		n.Spec.Taints = append(n.Spec.Taints, *t.DeepCopy())
	}
	if c.cfg.ExternalCloudProvider {
		// The cloud controller manager removes it once it has initialised the Node.
		n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: TaintExternalCloudProvider, Value: "true", Effect: v1.TaintEffectNoSchedule})
	}
	return n
}

// AdmissionNode is the Node pod admission judges pods against (its labels,
// taints, extended resources and runtime features), as upstream's admission
// reads it: the last one seen from the API server, or, with fresh, one read
// from it now (upstream's second look when only a pod's node affinity fails).
// Before the Node is known (standalone, not registered yet) it is the Node
// this agent would register, with the runtime's features as its only status.
func (c *Controller) AdmissionNode(ctx context.Context, fresh bool) (*v1.Node, error) {
	if fresh && c.client != nil {
		n, err := c.client.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("reading node %q: %w", c.cfg.NodeName, err)
		}
		return n, nil
	}
	if n := c.Node(); n != nil {
		return n, nil
	}
	n := c.localNode()
	if c.runtimeStatus != nil {
		c.setRuntimeFeatures(ctx, &n.Status)
	}
	return n, nil
}

func (c *Controller) isRegistered() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registered
}

// Register creates the Node, or reconciles an existing one, retrying with back-off (100ms
// doubling to 7s) until it succeeds or ctx is done. It does nothing without a client, when
// registerNode is false, or once it has succeeded.
func (c *Controller) Register(ctx context.Context) error {
	if c.client == nil || !c.registerNode || c.isRegistered() {
		return nil
	}
	backoff := initialBackoff
	for {
		err := c.tryRegister(ctx)
		if err == nil {
			c.mu.Lock()
			c.registered = true
			c.mu.Unlock()
			select {
			case c.registeredCh <- struct{}{}:
			default:
			}
			klog.InfoS("Successfully registered node", "node", c.cfg.NodeName)
			return nil
		}
		klog.ErrorS(err, "Unable to register node with API server", "node", c.cfg.NodeName, "retryIn", backoff)
		if !c.sleep(ctx, backoff) {
			return fmt.Errorf("registering node %q: %w", c.cfg.NodeName, ctx.Err())
		}
		backoff = nextBackoff(backoff)
	}
}

func (c *Controller) tryRegister(ctx context.Context) error {
	node, events := c.initialNode(ctx)
	created, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err == nil {
		c.reported(created, events)
		return nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %q: %w", c.cfg.NodeName, err)
	}

	existing, err := c.client.CoreV1().Nodes().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("getting existing node %q: %w", c.cfg.NodeName, err)
	}
	// Reconcile what we own (default labels, attach/detach annotation); --node-labels,
	// taints and spec stay as the cluster has them, as upstream does.
	updated := existing.DeepCopy()
	if updated.Labels == nil {
		updated.Labels = map[string]string{}
	}
	for k, v := range c.defaultLabels() {
		updated.Labels[k] = v
	}
	if updated.Annotations == nil {
		updated.Annotations = map[string]string{}
	}
	updated.Annotations[controllerAttachDetachAnnotation] = "true"
	events = c.setNodeStatus(ctx, updated)
	stored, err := c.patchNodeStatus(ctx, c.client, existing, updated)
	if err != nil {
		return fmt.Errorf("reconciling existing node: %w", err)
	}
	c.reported(stored, events)
	return nil
}

// reported records that n (with its status) is now stored in the API server.
func (c *Controller) reported(n *v1.Node, events []conditionEvent) {
	c.mu.Lock()
	c.lastReport = c.clk.Now()
	c.mu.Unlock()
	c.setNode(n)
	c.recordEvents(events)
}

// ValidateNodeLabels rejects --node-labels in the kubernetes.io / k8s.io namespaces that a
// node may not set on itself (the NodeRestriction admission plugin would refuse the Node),
// as the upstream kubelet does at startup.
func ValidateNodeLabels(labels map[string]string) error {
	var bad []string
	for k := range labels {
		ns, _, found := strings.Cut(k, "/")
		if !found {
			continue
		}
		restricted := false
		for _, r := range []string{"kubernetes.io", "k8s.io"} {
			if ns == r || strings.HasSuffix(ns, "."+r) {
				restricted = true
			}
		}
		if restricted && !kubeletapis.IsKubeletLabel(k) {
			bad = append(bad, k)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	sort.Strings(bad)
	return fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: %v; "+
		"labels in these namespaces must begin with an allowed prefix (%s) or be one of %s",
		bad, strings.Join(kubeletapis.KubeletLabelNamespaces(), ", "), strings.Join(kubeletapis.KubeletLabels(), ", "))
}

package podconfig

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
)

// DefaultMirrorReconcilePeriod is how often mirror pods are checked without a trigger.
const DefaultMirrorReconcilePeriod = 5 * time.Second

// RunMirrorReconciler keeps one mirror pod in the API server per static pod, until ctx is
// done. It blocks; run it in its own goroutine. It runs every period and whenever static
// pods or mirror pods change. It needs RunAPISource running (it reads the mirror pods
// from that watch) and does nothing until the API source is ready. nodeUID returns the
// registered Node's UID ("" while not registered: mirror pods then wait, because the
// API server's NodeRestriction requires the owner reference to the Node).
func (c *Config) RunMirrorReconciler(ctx context.Context, client kubernetes.Interface, nodeUID func() types.UID, period time.Duration) {
	if period <= 0 {
		period = DefaultMirrorReconcilePeriod
	}
	t := c.clk.NewTimer(period)
	defer t.Stop()
	for {
		c.reconcileMirrors(ctx, client, nodeUID())
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t.Reset(period)
		case <-c.mirrorTrigger:
		}
	}
}

// reconcileMirrors makes one pass: create missing mirrors, replace stale ones, delete
// orphans. Errors are logged; the next pass retries.
func (c *Config) reconcileMirrors(ctx context.Context, client kubernetes.Interface, nodeUID types.UID) {
	c.mu.RLock()
	apiReady := c.sources[podutil.SourceAPI] != nil && c.sources[podutil.SourceAPI].ready
	staticReady := true
	statics := map[string]*v1.Pod{}
	for src, s := range c.sources {
		if src == podutil.SourceAPI {
			continue
		}
		staticReady = staticReady && s.ready
		for _, p := range s.pods {
			statics[fullName(p)] = p.DeepCopy()
		}
	}
	mirrors := make(map[string]*v1.Pod, len(c.mirrors))
	for n, m := range c.mirrors {
		mirrors[n] = m.DeepCopy()
	}
	c.mu.RUnlock()
	if !apiReady {
		klog.V(4).InfoS("Mirror pods wait for the API pod source to sync")
		return
	}

	for name, static := range statics {
		m := mirrors[name]
		if m != nil && (m.DeletionTimestamp != nil || !isMirrorOf(m, static)) {
			klog.InfoS("Replacing stale mirror pod", "pod", klog.KObj(m), "mirrorUID", m.UID,
				"deleting", m.DeletionTimestamp != nil, "mirrorHash", m.Annotations[podutil.AnnotationConfigMirror], "staticHash", static.Annotations[podutil.AnnotationConfigHash])
			if err := deleteMirror(ctx, client, m); err != nil {
				klog.ErrorS(err, "Unable to delete stale mirror pod", "pod", klog.KObj(m))
				continue
			}
			m = nil
		}
		if m != nil {
			continue
		}
		if nodeUID == "" {
			klog.V(2).InfoS("Mirror pod waits for the Node to be registered", "pod", klog.KObj(static))
			continue
		}
		if err := createMirror(ctx, client, static, c.nodeName, nodeUID); err != nil {
			if apierrors.IsAlreadyExists(err) {
				// Our watch has not caught up with a create or a delete yet; next pass.
				klog.V(2).InfoS("Mirror pod already exists, checking again later", "pod", klog.KObj(static))
				continue
			}
			klog.ErrorS(err, "Unable to create mirror pod", "pod", klog.KObj(static))
			continue
		}
		klog.InfoS("Created mirror pod", "pod", klog.KObj(static), "staticUID", static.UID)
	}

	// Until every static source has been read once, a missing static pod may just not
	// be loaded yet: deleting its mirror then would be wrong.
	if !staticReady {
		return
	}
	for name, m := range mirrors {
		if _, ok := statics[name]; ok {
			continue
		}
		klog.InfoS("Deleting orphaned mirror pod", "pod", klog.KObj(m), "mirrorUID", m.UID)
		if err := deleteMirror(ctx, client, m); err != nil {
			klog.ErrorS(err, "Unable to delete orphaned mirror pod", "pod", klog.KObj(m))
		}
	}
}

// mirrorFor builds the API object for a static pod's mirror.
func mirrorFor(static *v1.Pod, nodeName string, nodeUID types.UID) *v1.Pod {
	m := static.DeepCopy()
	m.UID = ""
	m.ResourceVersion = ""
	m.Status = v1.PodStatus{}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations[podutil.AnnotationConfigMirror] = static.Annotations[podutil.AnnotationConfigHash]
	controller := true
	m.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: "v1",
		Kind:       "Node",
		Name:       nodeName,
		UID:        nodeUID,
		Controller: &controller,
	}}
	return m
}

func createMirror(ctx context.Context, client kubernetes.Interface, static *v1.Pod, nodeName string, nodeUID types.UID) error {
	m := mirrorFor(static, nodeName, nodeUID)
	if _, err := client.CoreV1().Pods(m.Namespace).Create(ctx, m, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create mirror pod %s/%s: %w", m.Namespace, m.Name, err)
	}
	return nil
}

// deleteMirror deletes exactly this mirror (UID precondition) at once; already gone is fine.
func deleteMirror(ctx context.Context, client kubernetes.Interface, m *v1.Pod) error {
	grace := int64(0)
	uid := m.UID
	err := client.CoreV1().Pods(m.Namespace).Delete(ctx, m.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      &metav1.Preconditions{UID: &uid},
	})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete mirror pod %s/%s (uid %s): %w", m.Namespace, m.Name, uid, err)
	}
	return nil
}

package podconfig

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/internal/podutil"
)

// RunAPISource watches the pods bound to this node (all namespaces) until ctx is done.
// It blocks; run it in its own goroutine. The initial list arrives as one Add; the
// source is ready once the handler has seen it.
func (c *Config) RunAPISource(ctx context.Context, client kubernetes.Interface) {
	c.registerSource(podutil.SourceAPI)
	selector := fields.OneTermEqualSelector("spec.nodeName", c.nodeName).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithNamespace(metav1.NamespaceAll),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector }))
	inf := factory.Core().V1().Pods().Informer()
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj interface{}, initial bool) {
			if p, ok := obj.(*v1.Pod); ok {
				c.apiEvent(p, false, initial)
			}
		},
		UpdateFunc: func(_, obj interface{}) {
			if p, ok := obj.(*v1.Pod); ok {
				c.apiEvent(p, false, false)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*v1.Pod); ok {
				c.apiEvent(p, true, false)
			}
		},
	})
	if err != nil {
		klog.ErrorS(err, "Unable to watch pods from the API server")
		return
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return
	}
	c.sendMu.Lock()
	c.flushAPIPendingLocked()
	c.sendMu.Unlock()
	c.markReady(podutil.SourceAPI)
	<-ctx.Done()
}

// apiEvent applies one informer event to the API source.
func (c *Config) apiEvent(pod *v1.Pod, deleted, initial bool) {
	if pod.Spec.NodeName != c.nodeName {
		return // the field selector should make this impossible; be safe
	}
	pod = pod.DeepCopy() // informer objects are shared; we annotate ours
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if initial && !c.apiFlushed && !deleted {
		c.apiPending = append(c.apiPending, pod)
		return
	}
	c.flushAPIPendingLocked()

	c.mu.Lock()
	s := c.ensureSource(podutil.SourceAPI)
	var ch changes
	mirrorsChanged := c.applyAPIPodLocked(s, pod, deleted, &ch)
	c.mu.Unlock()
	if mirrorsChanged {
		c.triggerMirrors()
	}
	c.send(podutil.SourceAPI, ch)
}

// flushAPIPendingLocked emits the buffered initial list as one Add. Caller holds sendMu.
func (c *Config) flushAPIPendingLocked() {
	if c.apiFlushed {
		return
	}
	c.apiFlushed = true
	pending := c.apiPending
	c.apiPending = nil
	c.mu.Lock()
	s := c.ensureSource(podutil.SourceAPI)
	var ch changes
	mirrorsChanged := false
	for _, p := range pending {
		if c.applyAPIPodLocked(s, p, false, &ch) {
			mirrorsChanged = true
		}
	}
	c.mu.Unlock()
	if mirrorsChanged {
		c.triggerMirrors()
	}
	c.send(podutil.SourceAPI, ch)
}

// applyAPIPodLocked records one pod from the API server. Mirror pods go to the mirror
// index, never to the pods to run. It reports whether the mirror index changed.
func (c *Config) applyAPIPodLocked(s *sourceState, pod *v1.Pod, deleted bool, ch *changes) bool {
	if podutil.IsMirrorPod(pod) {
		name := fullName(pod)
		if deleted {
			if m, ok := c.mirrors[name]; ok && m.UID == pod.UID {
				delete(c.mirrors, name)
				return true
			}
			return false
		}
		c.mirrors[name] = pod
		// A pod never turns into a mirror pod, but if one did it must stop running as a pod.
		if old, ok := s.pods[pod.UID]; ok {
			delete(s.pods, pod.UID)
			ch.removes = append(ch.removes, old)
		}
		return true
	}
	if deleted {
		if old, ok := s.pods[pod.UID]; ok {
			delete(s.pods, pod.UID)
			ch.removes = append(ch.removes, old)
		}
		return false
	}
	c.upsertLocked(podutil.SourceAPI, s, pod, ch)
	return false
}

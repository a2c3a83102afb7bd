package podconfig

import (
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/internal/podutil"
)

// Op says what happened to the pods of an Update.
type Op int

const (
	// OpAdd: pods new to their source (also every pod of a source's first snapshot).
	OpAdd Op = iota
	// OpUpdate: spec or metadata changed; a newly set deletionTimestamp (graceful
	// delete) arrives as OpUpdate.
	OpUpdate
	// OpRemove: the pod is gone from its source.
	OpRemove
	// OpReconcile: only the pod's status changed in the API server.
	OpReconcile
)

func (o Op) String() string {
	switch o {
	case OpAdd:
		return "Add"
	case OpUpdate:
		return "Update"
	case OpRemove:
		return "Remove"
	case OpReconcile:
		return "Reconcile"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Update is one change of one source. Pods are copies owned by the receiver.
type Update struct {
	Op     Op
	Pods   []*v1.Pod
	Source string
}

// updatesBuffer matches upstream's config channel capacity.
const updatesBuffer = 50

// Config merges the pod sources. Create it with New.
type Config struct {
	nodeName string
	clk      clock.Clock

	updates chan Update
	// mirrorTrigger wakes the mirror reconciler when static pods or mirror pods change.
	mirrorTrigger chan struct{}

	// sendMu serialises "change state, then send" so updates leave in the order the
	// state changed; it is held while blocking on the updates channel, mu is not.
	sendMu sync.Mutex
	// apiPending holds the API source's initial list until it is flushed as one Add
	// (guarded by sendMu).
	apiPending []*v1.Pod
	apiFlushed bool

	mu      sync.RWMutex
	sources map[string]*sourceState
	// mirrors are the API server's mirror pods on this node, by full name ("ns/name").
	mirrors map[string]*v1.Pod

	// listRuntime lists the runtime's pods for adoptStatic; nil adopts nothing.
	listRuntime RuntimeLister
	// adopted maps, per static source, the UID nodelet derives from a manifest
	// to the UID of the kubelet's pod it adopted (guarded by mu).
	adopted map[string]map[types.UID]types.UID
}

type sourceState struct {
	pods  map[types.UID]*v1.Pod
	ready bool
}

// Option configures a Config.
type Option func(*Config)

// WithSources declares the sources that will be started, so SourcesReady stays false
// until each has delivered its first snapshot even if a Run* goroutine has not begun yet.
func WithSources(names ...string) Option {
	return func(c *Config) {
		for _, n := range names {
			c.ensureSource(n)
		}
	}
}

// New returns a Config for the node nodeName.
func New(nodeName string, clk clock.Clock, opts ...Option) *Config {
	c := &Config{
		nodeName:      nodeName,
		clk:           clk,
		updates:       make(chan Update, updatesBuffer),
		mirrorTrigger: make(chan struct{}, 1),
		sources:       map[string]*sourceState{},
		mirrors:       map[string]*v1.Pod{},
		adopted:       map[string]map[types.UID]types.UID{},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Updates is the merged stream. The consumer must keep reading it: sources block on it.
func (c *Config) Updates() <-chan Update { return c.updates }

// SourcesReady reports whether every started (or declared) source has delivered its
// first snapshot. False while no source is known.
func (c *Config) SourcesReady() bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if len(c.sources) == 0 {
		return false
	}
	for _, s := range c.sources {
		if !s.ready {
			return false
		}
	}
	return true
}

func (c *Config) sourceReady(name string) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	s, ok := c.sources[name]
	return ok && s.ready
}

// ensureSource must be called with mu held or before c is shared.
func (c *Config) ensureSource(name string) *sourceState {
	s, ok := c.sources[name]
	if !ok {
		s = &sourceState{pods: map[types.UID]*v1.Pod{}}
		c.sources[name] = s
	}
	return s
}

func (c *Config) registerSource(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ensureSource(name)
}

func (c *Config) markReady(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.ensureSource(name)
	if !s.ready {
		s.ready = true
		klog.InfoS("Pod source ready", "source", name)
		// The mirror reconciler waits for the sources; wake it.
		c.triggerMirrors()
	}
}

// MirrorPod returns the API server's mirror pod for the static pod with the given UID,
// if one with the same full name and the static pod's config hash has been seen.
func (c *Config) MirrorPod(staticPodUID types.UID) (*v1.Pod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	static := c.staticPodLocked(staticPodUID)
	if static == nil {
		return nil, false
	}
	m, ok := c.mirrors[fullName(static)]
	if !ok || !isMirrorOf(m, static) {
		return nil, false
	}
	return m.DeepCopy(), true
}

// StaticPodFor returns the static pod that the mirror pod with the given UID mirrors.
func (c *Config) StaticPodFor(mirrorUID types.UID) (*v1.Pod, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for name, m := range c.mirrors {
		if m.UID != mirrorUID {
			continue
		}
		for src, s := range c.sources {
			if src == podutil.SourceAPI {
				continue
			}
			for _, p := range s.pods {
				if fullName(p) == name && isMirrorOf(m, p) {
					return p.DeepCopy(), true
				}
			}
		}
		return nil, false
	}
	return nil, false
}

func (c *Config) staticPodLocked(uid types.UID) *v1.Pod {
	for src, s := range c.sources {
		if src == podutil.SourceAPI {
			continue
		}
		if p, ok := s.pods[uid]; ok {
			return p
		}
	}
	return nil
}

func isMirrorOf(mirror, static *v1.Pod) bool {
	h, ok := mirror.Annotations[podutil.AnnotationConfigMirror]
	return ok && h != "" && h == static.Annotations[podutil.AnnotationConfigHash]
}

func fullName(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// changes is what one source event did, in the order upstream sends it.
type changes struct {
	removes, adds, updates, reconciles []*v1.Pod
}

func (ch *changes) empty() bool {
	return len(ch.removes)+len(ch.adds)+len(ch.updates)+len(ch.reconciles) == 0
}

// send emits ch. Caller holds sendMu and not mu.
func (c *Config) send(source string, ch changes) {
	for _, u := range []struct {
		op   Op
		pods []*v1.Pod
	}{{OpRemove, ch.removes}, {OpAdd, ch.adds}, {OpUpdate, ch.updates}, {OpReconcile, ch.reconciles}} {
		if len(u.pods) == 0 {
			continue
		}
		out := make([]*v1.Pod, len(u.pods))
		for i, p := range u.pods {
			out[i] = p.DeepCopy()
		}
		c.updates <- Update{Op: u.op, Pods: out, Source: source}
	}
}

func (c *Config) triggerMirrors() {
	select {
	case c.mirrorTrigger <- struct{}{}:
	default:
	}
}

// setSnapshot replaces a source's whole pod set and emits the difference.
func (c *Config) setSnapshot(source string, pods []*v1.Pod) {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()

	c.mu.Lock()
	s := c.ensureSource(source)
	var ch changes
	seen := make(map[types.UID]bool, len(pods))
	for _, p := range pods {
		seen[p.UID] = true
		c.upsertLocked(source, s, p, &ch)
	}
	for uid, old := range s.pods {
		if !seen[uid] {
			delete(s.pods, uid)
			ch.removes = append(ch.removes, old)
		}
	}
	wasReady := s.ready
	c.mu.Unlock()

	c.send(source, ch)
	if !wasReady {
		// Ready only once the first snapshot is sent, as the API source: whoever sees
		// SourcesReady finds the source's pods in Updates, or already handled.
		c.mu.Lock()
		s.ready = true
		c.mu.Unlock()
		klog.InfoS("Pod source ready", "source", source, "pods", len(pods))
	}
	if !ch.empty() || !wasReady {
		c.triggerMirrors()
	}
}

// upsertLocked stores p (a copy owned by Config) into s and records what it changed.
func (c *Config) upsertLocked(source string, s *sourceState, p *v1.Pod, ch *changes) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[podutil.AnnotationConfigSource] = source
	old, ok := s.pods[p.UID]
	if !ok {
		if _, set := p.Annotations[podutil.AnnotationConfigSeen]; !set {
			p.Annotations[podutil.AnnotationConfigSeen] = c.clk.Now().UTC().Format(time.RFC3339Nano)
		}
		s.pods[p.UID] = p
		ch.adds = append(ch.adds, p)
		return
	}
	// The first-seen time is the node's own record; a re-read must not move it.
	p.Annotations[podutil.AnnotationConfigSeen] = old.Annotations[podutil.AnnotationConfigSeen]
	s.pods[p.UID] = p
	switch {
	case specOrMetaChanged(old, p):
		ch.updates = append(ch.updates, p)
	case !apiequality.Semantic.DeepEqual(old.Status, p.Status):
		ch.reconciles = append(ch.reconciles, p)
	}
}

// specOrMetaChanged compares what upstream compares for an UPDATE: spec, labels,
// annotations, deletion timestamp and grace period.
func specOrMetaChanged(a, b *v1.Pod) bool {
	return !apiequality.Semantic.DeepEqual(a.Spec, b.Spec) ||
		!apiequality.Semantic.DeepEqual(a.Labels, b.Labels) ||
		!apiequality.Semantic.DeepEqual(a.Annotations, b.Annotations) ||
		!apiequality.Semantic.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) ||
		!apiequality.Semantic.DeepEqual(a.DeletionGracePeriodSeconds, b.DeletionGracePeriodSeconds)
}

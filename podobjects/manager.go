// Package podobjects serves the configMaps and secrets the node's pods
// reference (volumes, env, imagePullSecrets), read the way the kubelet's
// configMapAndSecretChangeDetectionStrategy says:
//
//   - Watch (the default): while a pod references an object, one watch of that
//     object alone keeps a local copy; reads come from it, so a pod's sync reads
//     fresh content without asking the API server.
//   - Cache: reads go through a TTL cache (the node's
//     node.alpha.kubernetes.io/ttl annotation, else 1m); registering a pod
//     drops the cached copies of what it references, so every pod sync reads
//     them again at least once.
//   - Get: every read asks the API server.
//
// Pods register what they reference on each sync and unregister once their
// volumes are torn down. A read of an object no pod registered asks the API
// server directly, whatever the strategy.
package podobjects

import (
	"context"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// DefaultTTL is the Cache strategy's TTL when the node has no TTL annotation,
// as upstream's.
const DefaultTTL = time.Minute

// defaultSyncTimeout bounds how long a read waits for a new watch's first
// list. Upstream waits 1s; the longer bound spares a loaded node a failed
// sync (and a 10s retry) when the first list is slow.
const defaultSyncTimeout = 5 * time.Second

// Option configures a Manager.
type Option func(*Manager)

// WithTTL gives the Cache strategy's TTL source: ok false means "use
// DefaultTTL" (upstream reads the node's node.alpha.kubernetes.io/ttl).
func WithTTL(f func() (time.Duration, bool)) Option {
	return func(m *Manager) { m.ttl = f }
}

// WithSyncTimeout changes how long a read waits for a new watch's first list.
func WithSyncTimeout(d time.Duration) Option {
	return func(m *Manager) { m.syncTimeout = d }
}

// Manager serves referenced configMaps and secrets. The objects it returns
// are shared: callers must not modify them.
type Manager struct {
	strategy    kubeletconfigv1beta1.ResourceChangeDetectionStrategy
	client      kubernetes.Interface
	clock       clock.Clock
	ttl         func() (time.Duration, bool)
	syncTimeout time.Duration

	// base bounds every watch; Run cancels it.
	base   context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	pods  map[types.UID]map[Key]bool
	items map[Key]*item
}

// item is one registered object.
type item struct {
	refs int
	// Watch: the object's local copy and the watch keeping it.
	store     *syncedStore
	stopWatch context.CancelFunc // nil once stopped (object immutable)
	// Cache: the last read and a generation that registering bumps.
	cached *cachedRead
	gen    uint64
}

type cachedRead struct {
	obj runtime.Object
	err error // only NotFound is cached
	at  time.Time
}

// New returns a manager for strategy ("" is Watch). Call Run to stop its
// watches when done.
func New(strategy kubeletconfigv1beta1.ResourceChangeDetectionStrategy, client kubernetes.Interface, clk clock.Clock, opts ...Option) (*Manager, error) {
	switch strategy {
	case "":
		strategy = kubeletconfigv1beta1.WatchChangeDetectionStrategy
	case kubeletconfigv1beta1.WatchChangeDetectionStrategy, kubeletconfigv1beta1.TTLCacheChangeDetectionStrategy, kubeletconfigv1beta1.GetChangeDetectionStrategy:
	default:
		return nil, fmt.Errorf("unknown configMapAndSecretChangeDetectionStrategy %q", strategy)
	}
	base, cancel := context.WithCancel(context.Background())
	m := &Manager{
		strategy: strategy, client: client, clock: clk,
		ttl:         func() (time.Duration, bool) { return 0, false },
		syncTimeout: defaultSyncTimeout,
		base:        base, cancel: cancel,
		pods:  map[types.UID]map[Key]bool{},
		items: map[Key]*item{},
	}
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// Strategy is the strategy in use.
func (m *Manager) Strategy() kubeletconfigv1beta1.ResourceChangeDetectionStrategy {
	return m.strategy
}

// Run waits for ctx to end, then stops every watch and returns once they
// have stopped. Reads after that ask the API server.
func (m *Manager) Run(ctx context.Context) {
	<-ctx.Done()
	m.cancel()
	m.wg.Wait()
}

// RegisterPod records what pod references now: new references are added
// before the ones it dropped are released, so an object kept is never
// re-fetched from scratch. Called on every sync of the pod.
func (m *Manager) RegisterPod(pod *v1.Pod) {
	if m.strategy == kubeletconfigv1beta1.GetChangeDetectionStrategy {
		return
	}
	refs := References(pod)
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range refs {
		m.addRefLocked(k)
	}
	for k := range m.pods[pod.UID] {
		m.releaseLocked(k)
	}
	if len(refs) == 0 {
		delete(m.pods, pod.UID)
		return
	}
	m.pods[pod.UID] = refs
}

// UnregisterPod releases what the pod referenced.
func (m *Manager) UnregisterPod(uid types.UID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.pods[uid] {
		m.releaseLocked(k)
	}
	delete(m.pods, uid)
}

// Registered reports whether some pod references the object (for tests and
// debugging).
func (m *Manager) Registered(k Key) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.items[k] != nil
}

func (m *Manager) addRefLocked(k Key) {
	it := m.items[k]
	if it == nil {
		it = &item{}
		m.items[k] = it
		if m.strategy == kubeletconfigv1beta1.WatchChangeDetectionStrategy && m.client != nil && m.base.Err() == nil {
			m.startWatchLocked(k, it)
		}
	}
	it.refs++
	// Cache: the next read of a pod's objects after its sync started is fresh.
	it.cached = nil
	it.gen++
}

func (m *Manager) releaseLocked(k Key) {
	it := m.items[k]
	if it == nil {
		return
	}
	it.refs--
	if it.refs > 0 {
		return
	}
	if it.stopWatch != nil {
		it.stopWatch()
		klog.V(4).InfoS("Stopped watching object: no pod references it", "kind", k.Kind, "object", klog.KRef(k.Namespace, k.Name))
	}
	delete(m.items, k)
}

// GetConfigMap returns the configMap; a missing one is a NotFound error.
func (m *Manager) GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	obj, err := m.get(ctx, Key{Kind: ConfigMap, Namespace: namespace, Name: name})
	if err != nil {
		return nil, err
	}
	cm, ok := obj.(*v1.ConfigMap)
	if !ok {
		return nil, fmt.Errorf("reading configmap %s/%s: got a %T", namespace, name, obj)
	}
	return cm, nil
}

// GetSecret returns the secret; a missing one is a NotFound error.
func (m *Manager) GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	obj, err := m.get(ctx, Key{Kind: Secret, Namespace: namespace, Name: name})
	if err != nil {
		return nil, err
	}
	s, ok := obj.(*v1.Secret)
	if !ok {
		return nil, fmt.Errorf("reading secret %s/%s: got a %T", namespace, name, obj)
	}
	return s, nil
}

func (m *Manager) get(ctx context.Context, k Key) (runtime.Object, error) {
	if m.client == nil {
		return nil, fmt.Errorf("reading %s %s/%s: no API server connection (standalone mode)", k.Kind, k.Namespace, k.Name)
	}
	m.mu.Lock()
	it := m.items[k]
	m.mu.Unlock()
	switch {
	case it == nil || m.strategy == kubeletconfigv1beta1.GetChangeDetectionStrategy:
		return m.fetch(ctx, k)
	case m.strategy == kubeletconfigv1beta1.TTLCacheChangeDetectionStrategy:
		return m.getCached(ctx, k, it)
	}
	return m.getWatched(ctx, k, it)
}

func (m *Manager) getWatched(ctx context.Context, k Key, it *item) (runtime.Object, error) {
	if it.store == nil {
		// Registered after Run ended: no watch runs.
		return m.fetch(ctx, k)
	}
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, m.syncTimeout, true, func(context.Context) (bool, error) {
		return it.store.hasSynced(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the watch of %s %s/%s to list it: %w", k.Kind, k.Namespace, k.Name, err)
	}
	obj, ok, err := it.store.GetByKey(k.Namespace + "/" + k.Name)
	if err != nil {
		return nil, fmt.Errorf("reading %s %s/%s from its watch: %w", k.Kind, k.Namespace, k.Name, err)
	}
	if !ok {
		return nil, notFound(k)
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("reading %s %s/%s from its watch: got a %T", k.Kind, k.Namespace, k.Name, obj)
	}
	if isImmutable(ro) {
		// An immutable object never changes: its copy needs no watch any more.
		m.mu.Lock()
		if it.stopWatch != nil {
			it.stopWatch()
			it.stopWatch = nil
			klog.V(4).InfoS("Stopped watching object: it is immutable", "kind", k.Kind, "object", klog.KRef(k.Namespace, k.Name))
		}
		m.mu.Unlock()
	}
	return ro, nil
}

func (m *Manager) getCached(ctx context.Context, k Key, it *item) (runtime.Object, error) {
	m.mu.Lock()
	c, gen := it.cached, it.gen
	m.mu.Unlock()
	if c != nil && (isImmutable(c.obj) || m.clock.Now().Before(c.at.Add(m.currentTTL()))) {
		return c.obj, c.err
	}
	obj, err := m.fetch(ctx, k)
	if err != nil && !apierrors.IsNotFound(err) {
		return nil, err
	}
	m.mu.Lock()
	if it.gen == gen {
		it.cached = &cachedRead{obj: obj, err: err, at: m.clock.Now()}
	}
	m.mu.Unlock()
	return obj, err
}

func (m *Manager) currentTTL() time.Duration {
	if d, ok := m.ttl(); ok {
		return d
	}
	return DefaultTTL
}

// fetch reads the object from the API server.
func (m *Manager) fetch(ctx context.Context, k Key) (runtime.Object, error) {
	var obj runtime.Object
	var err error
	switch k.Kind {
	case ConfigMap:
		obj, err = m.client.CoreV1().ConfigMaps(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	case Secret:
		obj, err = m.client.CoreV1().Secrets(k.Namespace).Get(ctx, k.Name, metav1.GetOptions{})
	default:
		return nil, fmt.Errorf("unknown kind %q", k.Kind)
	}
	if apierrors.IsNotFound(err) {
		return nil, notFound(k)
	}
	if err != nil {
		return nil, fmt.Errorf("getting %s %s/%s: %w", k.Kind, k.Namespace, k.Name, err)
	}
	return obj, nil
}

// startWatchLocked starts the watch of k alone (field selector on its name).
func (m *Manager) startWatchLocked(k Key, it *item) {
	ctx, cancel := context.WithCancel(m.base)
	it.store = newSyncedStore()
	it.stopWatch = cancel
	sel := fields.OneTermEqualSelector("metadata.name", k.Name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			if k.Kind == ConfigMap {
				return m.client.CoreV1().ConfigMaps(k.Namespace).List(ctx, o)
			}
			return m.client.CoreV1().Secrets(k.Namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			if k.Kind == ConfigMap {
				return m.client.CoreV1().ConfigMaps(k.Namespace).Watch(ctx, o)
			}
			return m.client.CoreV1().Secrets(k.Namespace).Watch(ctx, o)
		},
	}
	var example runtime.Object = &v1.ConfigMap{}
	if k.Kind == Secret {
		example = &v1.Secret{}
	}
	// The wrapper tells the reflector whether the client can stream its first
	// list (a fake clientset cannot).
	r := cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, m.client), example, it.store, cache.ReflectorOptions{
		Name: fmt.Sprintf("%s %s/%s", k.Kind, k.Namespace, k.Name),
	})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		r.RunWithContext(ctx)
	}()
	klog.V(4).InfoS("Watching object for the pods that reference it", "kind", k.Kind, "object", klog.KRef(k.Namespace, k.Name))
}

func notFound(k Key) error {
	// Upstream's managers name the resource in the singular
	// (`configmap "x" not found`), as FailedMount events show it.
	return apierrors.NewNotFound(v1.Resource(string(k.Kind)), k.Name)
}

func isImmutable(obj runtime.Object) bool {
	switch o := obj.(type) {
	case *v1.ConfigMap:
		return o.Immutable != nil && *o.Immutable
	case *v1.Secret:
		return o.Immutable != nil && *o.Immutable
	}
	return false
}

// syncedStore is a store that knows when the watch's first list arrived.
type syncedStore struct {
	cache.Store
	mu     sync.Mutex
	synced bool
}

func newSyncedStore() *syncedStore {
	return &syncedStore{Store: cache.NewStore(cache.MetaNamespaceKeyFunc)}
}

func (s *syncedStore) Replace(list []interface{}, rv string) error {
	if err := s.Store.Replace(list, rv); err != nil {
		return err
	}
	s.mu.Lock()
	s.synced = true
	s.mu.Unlock()
	return nil
}

func (s *syncedStore) hasSynced() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.synced
}

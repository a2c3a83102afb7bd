package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// envSources feeds envvars from the API server: configMaps and secrets come
// from the object source (per configMapAndSecretChangeDetectionStrategy, as
// upstream's env and pull secrets read them), services from an informer
// because every container start needs them all.
type envSources struct {
	objects  objectGetter
	factory  informers.SharedInformerFactory
	services corelisters.ServiceLister
	synced   cache.InformerSynced
}

// objectGetter reads configMaps and secrets (podobjects.Manager).
type objectGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// newEnvSources builds the sources; the services informer runs in Run.
func newEnvSources(client kubernetes.Interface, objects objectGetter) *envSources {
	if client == nil {
		return &envSources{}
	}
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Core().V1().Services()
	return &envSources{objects: objects, factory: f, services: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Run runs the services informer until ctx ends and returns once its goroutines
// have. Services waits for the informer's first list, so a container start that
// needs services before Run began waits for it.
func (s *envSources) Run(ctx context.Context) {
	if s.factory == nil {
		<-ctx.Done()
		return
	}
	s.factory.Start(ctx.Done())
	<-ctx.Done()
	s.factory.Shutdown()
}

func (s *envSources) ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error) {
	if s.objects == nil {
		return nil, fmt.Errorf("configmap %s/%s: no API server in standalone mode", namespace, name)
	}
	return s.objects.GetConfigMap(ctx, namespace, name)
}

func (s *envSources) Secret(ctx context.Context, namespace, name string) (*v1.Secret, error) {
	if s.objects == nil {
		return nil, fmt.Errorf("secret %s/%s: no API server in standalone mode", namespace, name)
	}
	return s.objects.GetSecret(ctx, namespace, name)
}

func (s *envSources) Services(ctx context.Context, namespace string) ([]*v1.Service, error) {
	if s.services == nil {
		return nil, nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.synced) {
		return nil, fmt.Errorf("waiting for the services cache: %w", ctx.Err())
	}
	svcs, err := s.services.Services(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing services of namespace %s: %w", namespace, err)
	}
	klog.FromContext(ctx).V(5).Info("Listed services for env", "namespace", namespace, "count", len(svcs))
	return svcs, nil
}

// nodeObjectTTL is the Cache strategy's TTL the node suggests in its
// node.alpha.kubernetes.io/ttl annotation (seconds), as upstream reads it.
func nodeObjectTTL(node *v1.Node) (time.Duration, bool) {
	if node == nil {
		return 0, false
	}
	v, ok := node.Annotations[v1.ObjectTTLAnnotationKey]
	if !ok {
		return 0, false
	}
	secs, err := strconv.Atoi(v)
	if err != nil || secs < 0 {
		return 0, false
	}
	return time.Duration(secs) * time.Second, true
}

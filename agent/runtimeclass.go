package agent

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	nodelisters "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
)

// runtimeClasses resolves a pod's runtimeClassName to the CRI runtime handler
// of its RuntimeClass (node.k8s.io/v1), from an informer as upstream's
// RuntimeClass manager. Without an API server (standalone) it is not built and
// every pod runs with the default handler, as upstream.
type runtimeClasses struct {
	factory informers.SharedInformerFactory
	lister  nodelisters.RuntimeClassLister
	synced  cache.InformerSynced
}

func newRuntimeClasses(client kubernetes.Interface) *runtimeClasses {
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Node().V1().RuntimeClasses()
	return &runtimeClasses{factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Run runs the informer until ctx ends and returns once its goroutines have.
func (r *runtimeClasses) Run(ctx context.Context) {
	r.factory.Start(ctx.Done())
	<-ctx.Done()
	r.factory.Shutdown()
}

// LookupRuntimeHandler returns the handler of the named RuntimeClass: "" for
// no name (the runtime's default), the lister's NotFound error
// (runtimeclass.node.k8s.io "x" not found) for a class that does not exist.
// Unlike upstream it waits for the informer's first list, so a pod synced
// right after the start is not refused for a class the cache has not seen yet.
func (r *runtimeClasses) LookupRuntimeHandler(ctx context.Context, name *string) (string, error) {
	if name == nil || *name == "" {
		return "", nil
	}
	if !cache.WaitForCacheSync(ctx.Done(), r.synced) {
		return "", fmt.Errorf("waiting for the RuntimeClass cache: %w", ctx.Err())
	}
	rc, err := r.lister.Get(*name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return "", err
		}
		return "", fmt.Errorf("failed to lookup RuntimeClass %s: %w", *name, err)
	}
	return rc.Handler, nil
}

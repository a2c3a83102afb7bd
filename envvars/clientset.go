package envvars

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// SourcesFromClientset adapts a clientset: every call goes to the API
// server (no cache). A lister-backed Sources is cheaper for busy nodes.
func SourcesFromClientset(cs kubernetes.Interface) Sources {
	return clientsetSources{cs: cs}
}

type clientsetSources struct{ cs kubernetes.Interface }

func (s clientsetSources) ConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	return s.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (s clientsetSources) Secret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	return s.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (s clientsetSources) Services(ctx context.Context, ns string) ([]*v1.Service, error) {
	list, err := s.cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]*v1.Service, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

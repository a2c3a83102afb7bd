package volumes

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

const (
	defaultTokenExpirationSeconds = 3600
	minTokenExpirationSeconds     = 600
	// A token is replaced once it is older than 80% of its lifetime or 24h,
	// as the upstream token manager does.
	tokenRefreshFraction = 0.8
	tokenMaxAge          = 24 * time.Hour
)

type cachedToken struct {
	token    string
	issued   time.Time // when we received it, by the manager's clock
	expiry   time.Time
	cacheKey string
}

func (t *cachedToken) needsRefresh(now time.Time) bool {
	if !now.Before(t.expiry) {
		return true
	}
	ttl := t.expiry.Sub(t.issued)
	refreshAt := t.issued.Add(time.Duration(float64(ttl) * tokenRefreshFraction))
	return !now.Before(refreshAt) || !now.Before(t.issued.Add(tokenMaxAge))
}

// serviceAccountToken returns a token for the pod's service account, bound
// to the pod, from the cache unless it needs a refresh. When a refresh
// fails and the cached token is still valid, the cached one is used.
func (m *Manager) serviceAccountToken(ctx context.Context, pod *v1.Pod, volName string, p *v1.ServiceAccountTokenProjection, st *podState) (string, error) {
	t, err := m.podToken(ctx, pod, volName, p, st)
	if err != nil {
		return "", err
	}
	return t.token, nil
}

// podToken is serviceAccountToken with the token's expiry (CSI drivers'
// tokenRequests are given both); volName keys the cache.
func (m *Manager) podToken(ctx context.Context, pod *v1.Pod, volName string, p *v1.ServiceAccountTokenProjection, st *podState) (*cachedToken, error) {
	expSeconds := int64(defaultTokenExpirationSeconds)
	if p.ExpirationSeconds != nil {
		expSeconds = max(*p.ExpirationSeconds, minTokenExpirationSeconds)
	}
	var audiences []string
	if p.Audience != "" {
		audiences = []string{p.Audience}
	}
	key := fmt.Sprintf("%s\x00%s", volName, p.Path)
	cacheKey := fmt.Sprintf("%s\x00%d\x00%s", p.Audience, expSeconds, pod.Spec.ServiceAccountName)

	now := m.clock.Now()
	cached := st.tokens[key]
	if cached != nil && cached.cacheKey == cacheKey && !cached.needsRefresh(now) {
		return cached, nil
	}
	if m.kube == nil {
		return nil, fmt.Errorf("cannot request a service account token: no API server connection (standalone mode)")
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	req := &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			Audiences:         audiences,
			ExpirationSeconds: &expSeconds,
			BoundObjectRef: &authenticationv1.BoundObjectReference{
				APIVersion: "v1",
				Kind:       "Pod",
				Name:       pod.Name,
				UID:        pod.UID,
			},
		},
	}
	tr, err := m.kube.CreateToken(ctx, pod.Namespace, sa, req)
	if err == nil && (tr == nil || tr.Status.Token == "") {
		err = fmt.Errorf("the API server returned an empty token")
	}
	if err != nil {
		if cached != nil && cached.cacheKey == cacheKey && now.Before(cached.expiry) {
			klog.ErrorS(err, "Failed to refresh service account token, using the cached one",
				"pod", klog.KObj(pod), "serviceAccount", sa, "expiry", cached.expiry)
			return cached, nil
		}
		return nil, fmt.Errorf("requesting token for service account %s/%s: %w", pod.Namespace, sa, err)
	}
	expiry := tr.Status.ExpirationTimestamp.Time
	if expiry.IsZero() {
		expiry = now.Add(time.Duration(expSeconds) * time.Second)
	}
	t := &cachedToken{token: tr.Status.Token, issued: now, expiry: expiry, cacheKey: cacheKey}
	st.tokens[key] = t
	klog.V(3).InfoS("Got service account token", "pod", klog.KObj(pod), "serviceAccount", sa, "expiry", expiry)
	return t, nil
}

// KubeGetterFromClientset adapts a clientset; every call goes to the API
// server (no cache), the manager itself avoids rewrites.
func KubeGetterFromClientset(cs kubernetes.Interface) KubeGetter {
	return clientsetGetter{cs: cs}
}

// ObjectGetter reads configMaps and secrets (podobjects.Manager, which honours
// configMapAndSecretChangeDetectionStrategy).
type ObjectGetter interface {
	GetConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	GetSecret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// KubeGetterWithObjects reads configMaps and secrets through objects and
// requests service-account tokens from cs.
func KubeGetterWithObjects(objects ObjectGetter, cs kubernetes.Interface) KubeGetter {
	return objectsGetter{ObjectGetter: objects, tokens: clientsetGetter{cs: cs}}
}

type objectsGetter struct {
	ObjectGetter
	tokens clientsetGetter
}

func (g objectsGetter) CreateToken(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return g.tokens.CreateToken(ctx, ns, sa, req)
}

type clientsetGetter struct{ cs kubernetes.Interface }

func (g clientsetGetter) GetConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	return g.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (g clientsetGetter) GetSecret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	return g.cs.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (g clientsetGetter) CreateToken(ctx context.Context, ns, sa string, req *authenticationv1.TokenRequest) (*authenticationv1.TokenRequest, error) {
	return g.cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
}

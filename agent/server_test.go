package agent

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/nodelet/nodelet/config"
)

// exhaustedLimiter is a main-client limiter with no tokens left: every request on it
// fails, and is counted.
type exhaustedLimiter struct{ waits atomic.Int32 }

func (l *exhaustedLimiter) TryAccept() bool { l.waits.Add(1); return false }
func (l *exhaustedLimiter) Accept()         { panic("Accept on the exhausted test limiter") }
func (l *exhaustedLimiter) Stop()           {}
func (l *exhaustedLimiter) QPS() float32    { return 1 }
func (l *exhaustedLimiter) Wait(context.Context) error {
	l.waits.Add(1)
	return errors.New("the main client's rate limit is exhausted")
}

// TestAuthClientHasItsOwnRateLimiter: TokenReviews go through while the main client's
// limiter is exhausted, and never take from it.
func TestAuthClientHasItsOwnRateLimiter(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authenticationv1.TokenReview
		if err := json.NewDecoder(r.Body).Decode(&tr); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		tr.Status.Authenticated = tr.Spec.Token == "good"
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&tr)
	}))
	defer srv.Close()
	main := &exhaustedLimiter{}
	rc := &rest.Config{Host: srv.URL, RateLimiter: main, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}

	client, _, err := newClientsForConfig(rest.CopyConfig(rc), config.Resolve(&kubeletconfigv1beta1.KubeletConfiguration{}).APIClient)
	if err != nil {
		t.Fatal(err)
	}
	authClient, err := newAuthClient(rest.CopyConfig(rc))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: "good"}}
	for i := 0; i < authClientBurst; i++ {
		got, err := authClient.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil || !got.Status.Authenticated {
			t.Fatalf("TokenReview %d on the auth client: %v %+v", i, err, got)
		}
	}
	if n := main.waits.Load(); n != 0 {
		t.Errorf("the auth client took %d times from the main client's limiter", n)
	}
	if q := authClient.AuthenticationV1().RESTClient().GetRateLimiter().QPS(); q != authClientQPS {
		t.Errorf("auth client QPS = %v, want %v", q, float32(authClientQPS))
	}
	// The main client does use the exhausted limiter (so the check above means something).
	if _, err := client.AuthenticationV1().TokenReviews().Create(ctx, review, metav1.CreateOptions{}); err == nil || main.waits.Load() == 0 {
		t.Errorf("main client: err %v, limiter waits %d; want the exhausted limiter's error", err, main.waits.Load())
	}
}

package agent

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// eventClientConfig is the configuration of the client events are sent on: as
// upstream, a client of its own limited to eventRecordQPS/eventBurst, so a burst
// of events neither waits behind nor starves the main client. eventRecordQPS 0
// means no limit, as documented (client-go alone would read 0 as its default 5).
func eventClientConfig(rc *rest.Config, kc *kubeletconfigv1beta1.KubeletConfiguration) *rest.Config {
	ec := rest.CopyConfig(rc)
	ec.UserAgent = userAgent()
	ec.RateLimiter = nil
	ec.QPS = float32(ptr.Deref(kc.EventRecordQPS, 50))
	ec.Burst = int(kc.EventBurst)
	if ec.QPS == 0 {
		ec.QPS = -1 // client-go: a negative QPS disables the rate limiter
	}
	if ec.Burst == 0 {
		ec.Burst = 100
	}
	return ec
}

// newEventClient builds the client events are recorded with.
func newEventClient(rc *rest.Config, kc *kubeletconfigv1beta1.KubeletConfiguration) (kubernetes.Interface, error) {
	c, err := kubernetes.NewForConfig(eventClientConfig(rc, kc))
	if err != nil {
		return nil, fmt.Errorf("creating the event API client: %w", err)
	}
	return c, nil
}

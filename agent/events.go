package agent

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nodelet/nodelet/config"
)

// eventClientConfig is the configuration of the client events are sent on: as
// upstream, a client of its own limited to eventRecordQPS/eventBurst, so a burst
// of events neither waits behind nor starves the main client. eventRecordQPS 0
// means no limit, as documented (client-go alone would read 0 as its default 5).
func eventClientConfig(rc *rest.Config, api config.APIClientSettings) *rest.Config {
	ec := rest.CopyConfig(rc)
	ec.UserAgent = userAgent()
	ec.RateLimiter = nil
	ec.QPS = api.EventQPS
	ec.Burst = api.EventBurst
	if ec.QPS == 0 {
		ec.QPS = -1 // client-go: a negative QPS disables the rate limiter
	}
	return ec
}

// newEventClient builds the client events are recorded with.
func newEventClient(rc *rest.Config, api config.APIClientSettings) (kubernetes.Interface, error) {
	c, err := kubernetes.NewForConfig(eventClientConfig(rc, api))
	if err != nil {
		return nil, fmt.Errorf("creating the event API client: %w", err)
	}
	return c, nil
}

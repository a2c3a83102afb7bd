package agent

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/nodelet/nodelet/logrotate"
)

// logRotationConfig is the container log manager's settings from kc
// (defaulted); ok is false for a negative containerLogMaxSize, which upstream
// takes as no rotation.
func logRotationConfig(kc *kubeletconfigv1beta1.KubeletConfiguration) (cfg logrotate.Config, ok bool, err error) {
	q, err := resource.ParseQuantity(kc.ContainerLogMaxSize)
	if err != nil {
		return cfg, false, fmt.Errorf("parsing containerLogMaxSize %q: %w", kc.ContainerLogMaxSize, err)
	}
	size, whole := q.AsInt64()
	if !whole {
		return cfg, false, fmt.Errorf("containerLogMaxSize %q is not a whole number of bytes", kc.ContainerLogMaxSize)
	}
	if size < 0 {
		return cfg, false, nil
	}
	interval := 10 * time.Second
	if kc.ContainerLogMonitorInterval != nil {
		interval = kc.ContainerLogMonitorInterval.Duration
	}
	return logrotate.Config{
		PodLogsDir: kc.PodLogsDir,
		Policy:     logrotate.Policy{MaxSize: size, MaxFiles: int(ptr.Deref(kc.ContainerLogMaxFiles, 5))},
		Workers:    int(ptr.Deref(kc.ContainerLogMaxWorkers, 1)),
		Interval:   interval,
	}, true, nil
}

// newLogRotation is the container log manager, or nil when rotation is off.
func newLogRotation(kc *kubeletconfigv1beta1.KubeletConfiguration, rt logrotate.Runtime, clk clock.WithTicker) (*logrotate.Manager, error) {
	cfg, ok, err := logRotationConfig(kc)
	if err != nil || !ok {
		return nil, err
	}
	return logrotate.New(cfg, rt, clk), nil
}

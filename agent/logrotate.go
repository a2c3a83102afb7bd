package agent

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/logrotate"
)

// logRotationConfig is the container log manager's settings from kc and its
// resolved values; ok is false for a negative containerLogMaxSize, which upstream
// takes as no rotation.
func logRotationConfig(kc *kubeletconfigv1beta1.KubeletConfiguration, s config.LogRotationSettings) (cfg logrotate.Config, ok bool, err error) {
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
	return logrotate.Config{
		PodLogsDir: kc.PodLogsDir,
		Policy:     logrotate.Policy{MaxSize: size, MaxFiles: s.MaxFiles},
		Workers:    s.Workers,
		Interval:   s.MonitorInterval,
	}, true, nil
}

// newLogRotation is the container log manager, or nil when rotation is off.
func newLogRotation(kc *kubeletconfigv1beta1.KubeletConfiguration, s config.LogRotationSettings, rt logrotate.Runtime, clk clock.WithTicker) (*logrotate.Manager, error) {
	cfg, ok, err := logRotationConfig(kc, s)
	if err != nil || !ok {
		return nil, err
	}
	return logrotate.New(cfg, rt, clk), nil
}

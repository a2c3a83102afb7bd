package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/cri"
	"github.com/nodelet/nodelet/gc"
)

// Upstream GC periods.
const (
	containerGCPeriod = time.Minute
	imageGCPeriod     = 5 * time.Minute
)

// garbageCollectors are container GC (dead containers and sandboxes, logs of deleted
// pods) and image GC (unused images by disk thresholds and age), as the kubelet runs them.
type garbageCollectors struct {
	containers *gc.ContainerGC
	images     *gc.ImageManager
}

func newGarbageCollectors(kc *kubeletconfigv1beta1.KubeletConfiguration, thresholds config.ImageGCSettings, containerPolicy gc.ContainerPolicy, rootDir, sandboxImage, nodeName string, rt *cri.Client,
	pods gc.PodState, recorder record.EventRecorder, clk clock.WithTicker, reg prometheus.Registerer) (*garbageCollectors, error) {
	images, err := gc.NewImageManager(gc.ImagePolicy{
		HighThresholdPercent: thresholds.HighThresholdPercent,
		LowThresholdPercent:  thresholds.LowThresholdPercent,
		MinAge:               kc.ImageMinimumGCAge.Duration,
		MaxAge:               kc.ImageMaximumGCAge.Duration,
		SandboxImage:         sandboxImage,
	}, rt, rt, rootDir, clk, gc.WithRegisterer(reg),
		gc.WithRecorder(recorder, &v1.ObjectReference{Kind: "Node", Name: nodeName, UID: types.UID(nodeName)}))
	if err != nil {
		return nil, fmt.Errorf("setting up image garbage collection: %w", err)
	}
	return &garbageCollectors{
		containers: gc.NewContainerGC(containerPolicy, rt, pods, kc.PodLogsDir, clk),
		images:     images,
	}, nil
}

// containerGCPolicy is the container GC policy of the deprecated upstream
// flags (--minimum-container-ttl-duration, --maximum-dead-containers-per-container,
// --maximum-dead-containers), whose defaults are upstream's.
func containerGCPolicy(opts *config.Options) gc.ContainerPolicy {
	if opts.ContainerGC == nil {
		return gc.DefaultContainerPolicy()
	}
	return gc.ContainerPolicy{
		MinAge:             opts.ContainerGC.MinimumTTL,
		MaxPerPodContainer: int(opts.ContainerGC.MaxPerPodContainer),
		MaxContainers:      int(opts.ContainerGC.MaxContainers),
	}
}

// runtimeSandboxImage asks the runtime which pause image it uses (containerd puts its
// CRI config, with sandboxImage, in the verbose status). Runtimes older than CRI's
// `pinned` flag (containerd 1.6) do not protect that image, and image GC removing it
// would leave the node unable to start pods: it is pinned by name instead.
func runtimeSandboxImage(ctx context.Context, rt runtimeStatuser) string {
	resp, err := rt.Status(ctx, true)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Cannot read the runtime's sandbox image", "err", err)
		return ""
	}
	return sandboxImageFromInfo(resp.GetInfo())
}

func sandboxImageFromInfo(info map[string]string) string {
	var cfg struct {
		SandboxImage string `json:"sandboxImage"`
	}
	if raw, ok := info["config"]; ok && json.Unmarshal([]byte(raw), &cfg) == nil {
		return cfg.SandboxImage
	}
	return ""
}

package agent

import (
	"testing"
	"time"

	"github.com/nodelet/nodelet/config"
	"github.com/nodelet/nodelet/gc"
)

func TestSandboxImageFromInfo(t *testing.T) {
	tests := []struct {
		name string
		info map[string]string
		want string
	}{
		{name: "containerd verbose status", info: map[string]string{"config": `{"containerd":{},"sandboxImage":"nodelet.local/pause:latest"}`}, want: "nodelet.local/pause:latest"},
		{name: "no config", info: map[string]string{"other": "x"}, want: ""},
		{name: "config not JSON", info: map[string]string{"config": "sandboxImage=x"}, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sandboxImageFromInfo(tt.info); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// The container GC policy comes from the deprecated upstream flags; Options
// built without Load (nil) keep upstream's defaults.
func TestContainerGCPolicyFromFlags(t *testing.T) {
	if got := containerGCPolicy(&config.Options{}); got != gc.DefaultContainerPolicy() {
		t.Errorf("nil flags: %+v, want upstream's default", got)
	}
	opts, err := config.Load([]string{"--minimum-container-ttl-duration=30s", "--maximum-dead-containers-per-container=3", "--maximum-dead-containers=50"})
	if err != nil {
		t.Fatal(err)
	}
	want := gc.ContainerPolicy{MinAge: 30 * time.Second, MaxPerPodContainer: 3, MaxContainers: 50}
	if got := containerGCPolicy(opts); got != want {
		t.Errorf("policy = %+v, want %+v", got, want)
	}
}

package agent

import "testing"

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

package config

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// TestApplyLogging: logging (format text or json, verbosity, vmodule,
// flushFrequency) from the loaded configuration drives klog, as the kubelet.
func TestApplyLogging(t *testing.T) {
	load := func(t *testing.T, doc string) *kubeletconfigv1beta1.KubeletConfiguration {
		t.Helper()
		o, err := Load([]string{"--config", writeFile(t, t.TempDir(), "config.yaml", header+doc)})
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		return o.Config
	}
	apply := func(t *testing.T, kc *kubeletconfigv1beta1.KubeletConfiguration) *bytes.Buffer {
		t.Helper()
		var out bytes.Buffer
		t.Cleanup(func() {
			klog.Flush()
			if err := logsapi.ResetForTest(nil); err != nil {
				t.Errorf("resetting logging: %v", err)
			}
		})
		if err := ApplyLogging(kc, &logsapi.LoggingOptions{ErrorStream: &out, InfoStream: &out}); err != nil {
			t.Fatalf("ApplyLogging: %v", err)
		}
		return &out
	}

	t.Run("json with verbosity", func(t *testing.T) {
		kc := load(t, "logging:\n  format: json\n  verbosity: 3\n  flushFrequency: 2s\n")
		if kc.Logging.FlushFrequency.Duration.Duration != 2*time.Second {
			t.Errorf("flushFrequency = %v, want 2s", kc.Logging.FlushFrequency.Duration.Duration)
		}
		out := apply(t, kc)
		klog.V(3).InfoS("shown at three", "k", "v")
		klog.V(4).InfoS("hidden at four")
		klog.Flush()
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		if len(lines) != 1 {
			t.Fatalf("want one line, got %q", out.String())
		}
		var entry map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &entry); err != nil {
			t.Fatalf("not JSON: %q: %v", lines[0], err)
		}
		if entry["msg"] != "shown at three" || entry["k"] != "v" || entry["v"] != float64(3) {
			t.Errorf("entry %v", entry)
		}
	})
	t.Run("text with vmodule", func(t *testing.T) {
		kc := load(t, "logging:\n  format: text\n  verbosity: 1\n  vmodule:\n  - filePattern: logging_test\n    verbosity: 5\n")
		out := apply(t, kc)
		klog.V(5).InfoS("shown by vmodule")
		klog.Flush()
		if !strings.Contains(out.String(), `"shown by vmodule"`) {
			t.Errorf("vmodule not applied: %q", out.String())
		}
		if strings.HasPrefix(strings.TrimSpace(out.String()), "{") {
			t.Errorf("text format wrote JSON: %q", out.String())
		}
	})
	t.Run("invalid logging refused by field", func(t *testing.T) {
		_, err := Load([]string{"--config", writeFile(t, t.TempDir(), "config.yaml", header+"logging:\n  format: xml\n")})
		if err == nil || !strings.Contains(err.Error(), "logging.format") {
			t.Errorf("got %v, want logging.format refused", err)
		}
	})
}

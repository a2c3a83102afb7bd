package config

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// FuzzLoad feeds Load a --config file and a --config-dir drop-in of random
// content. Whatever the bytes, Load must not panic, and a configuration it
// accepts must pass validation: nothing nodelet runs with may have skipped it.
// Seeds: testdata/fuzz/FuzzLoad.
func FuzzLoad(f *testing.F) {
	// One directory for every input: the fuzz function runs one input at a
	// time in each process, and a directory per input would cost more than Load.
	dir := f.TempDir()
	configFile := filepath.Join(dir, "config.yaml")
	dropInDir := filepath.Join(dir, "config.d")
	if err := os.Mkdir(dropInDir, 0o755); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, config, dropIn []byte) {
		if err := os.WriteFile(configFile, config, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dropInDir, "10-fuzz.conf"), dropIn, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"--config", configFile}
		if len(dropIn) > 0 {
			args = append(args, "--config-dir", dropInDir)
		}
		opts, err := Load(args)
		if err != nil {
			return
		}
		if opts.Config == nil {
			t.Fatal("Load accepted the configuration but returned none")
		}
		if err := Validate(opts.Config); err != nil {
			t.Fatalf("Load accepted a configuration that does not validate: %v", err)
		}
		// What was accepted, written out whole and loaded again, is the same
		// configuration: defaulting is idempotent and encoding loses nothing.
		kc := opts.Config.DeepCopy()
		kc.APIVersion, kc.Kind = kubeletconfigv1beta1.SchemeGroupVersion.String(), kubeletConfigKind
		out, err := marshalKeepingEmpty(kc)
		if err != nil {
			t.Fatalf("encoding the accepted configuration: %v", err)
		}
		if err := os.WriteFile(configFile, out, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := Load([]string{"--config", configFile})
		if err != nil {
			t.Fatalf("the accepted configuration, written out, is refused: %v\n%s", err, out)
		}
		if !apiequality.Semantic.DeepEqual(again.Config, opts.Config) {
			second, _ := json.Marshal(again.Config)
			t.Fatalf("the accepted configuration changes when loaded again:\nfirst  %s\nsecond %s", out, second)
		}
	})
}

// marshalKeepingEmpty encodes kc and writes out the top-level maps and lists
// that are empty but set: the upstream type's omitempty tags drop them, yet
// `evictionHard: {}` (no hard thresholds) and `enforceNodeAllocatable: []`
// (enforce nothing) differ from unset, which takes the defaults.
func marshalKeepingEmpty(kc *kubeletconfigv1beta1.KubeletConfiguration) ([]byte, error) {
	out, err := json.Marshal(kc)
	if err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(out, &fields); err != nil {
		return nil, err
	}
	v := reflect.ValueOf(kc).Elem()
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		f := v.Field(i)
		switch {
		case name == "" || name == "-":
		case f.Kind() == reflect.Map && !f.IsNil() && f.Len() == 0:
			fields[name] = json.RawMessage("{}")
		case f.Kind() == reflect.Slice && !f.IsNil() && f.Len() == 0:
			fields[name] = json.RawMessage("[]")
		}
	}
	return json.Marshal(fields)
}

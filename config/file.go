package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

const (
	kubeletConfigKind = "KubeletConfiguration"
	dropInExtension   = ".conf"
)

// document is one KubeletConfiguration file decoded twice: as the JSON it
// literally contains (the merge patch for drop-ins) and as the typed object.
type document struct {
	raw    []byte
	config *kubeletconfigv1beta1.KubeletConfiguration
}

// loadConfigFile reads --config: strict decoding, relative paths resolved
// against the file's directory, upstream defaults for everything unset.
func loadConfigFile(path string) (*kubeletconfigv1beta1.KubeletConfiguration, error) {
	doc, err := readDocument(path)
	if err != nil {
		return nil, err
	}
	if doc == nil {
		return nil, fmt.Errorf("kubelet config file %q is empty", path)
	}
	setBaseDefaults(doc.config)
	return doc.config, nil
}

// mergeConfigDir applies every *.conf file below dir, in lexical order, as
// an RFC 7386 merge patch over kc, which it replaces with the result.
func mergeConfigDir(kc *kubeletconfigv1beta1.KubeletConfiguration, dir string) (*kubeletconfigv1beta1.KubeletConfiguration, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("reading config dir %q: %w", dir, err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("config dir %q is not a directory", dir)
	}
	base, err := json.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("encoding the configuration before merging %q: %w", dir, err)
	}
	// WalkDir visits entries in lexical order, which is the documented
	// drop-in order (10-*.conf before 20-*.conf).
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil {
			return walkErr
		}
		if d.IsDir() || filepath.Ext(d.Name()) != dropInExtension {
			return nil
		}
		doc, err := readDocument(path)
		if err != nil {
			return err
		}
		if doc == nil {
			klog.V(2).InfoS("Skipping empty kubelet drop-in config file", "path", path)
			return nil
		}
		merged, err := mergePatch(base, doc.raw)
		if err != nil {
			return fmt.Errorf("merging drop-in config file %q: %w", path, err)
		}
		base = merged
		klog.V(2).InfoS("Merged kubelet drop-in config file", "path", path)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("merging drop-in configs from %q: %w", dir, err)
	}
	out := &kubeletconfigv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(base, out); err != nil {
		return nil, fmt.Errorf("decoding the configuration merged from %q: %w", dir, err)
	}
	return out, nil
}

// readDocument strictly decodes one KubeletConfiguration file (YAML or
// JSON). It returns nil for a file that holds nothing but whitespace.
func readDocument(path string) (*document, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading kubelet config file %q: %w", path, err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, nil
	}
	doc, err := decodeDocument(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("decoding kubelet config file %q: %w", path, err)
	}
	return doc, nil
}

// decodeDocument decodes data, resolving relative paths against baseDir.
func decodeDocument(data []byte, baseDir string) (*document, error) {
	// YAMLToJSONStrict rejects duplicate keys; JSON input is valid YAML.
	js, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return nil, err
	}
	var obj map[string]any
	if err := decodeJSONNumbers(js, &obj); err != nil {
		return nil, fmt.Errorf("the document is not an object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("the document is not an object")
	}
	if err := checkTypeMeta(obj); err != nil {
		return nil, err
	}
	if errs := strictCheck(obj, reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration](), ""); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	resolveRelativePaths(obj, baseDir)
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("re-encoding the document: %w", err)
	}
	kc := &kubeletconfigv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(raw, kc); err != nil {
		return nil, err
	}
	return &document{raw: raw, config: kc}, nil
}

func checkTypeMeta(obj map[string]any) error {
	want := kubeletconfigv1beta1.SchemeGroupVersion.String()
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	var errs []error
	switch {
	case apiVersion == "":
		errs = append(errs, fmt.Errorf("apiVersion: is missing, want %q", want))
	case apiVersion != want:
		errs = append(errs, fmt.Errorf("apiVersion: %q is not supported, want %q", apiVersion, want))
	}
	switch {
	case kind == "":
		errs = append(errs, fmt.Errorf("kind: is missing, want %q", kubeletConfigKind))
	case kind != kubeletConfigKind:
		errs = append(errs, fmt.Errorf("kind: %q is not supported, want %q", kind, kubeletConfigKind))
	}
	return errors.Join(errs...)
}

// pathFields are the file paths of a KubeletConfiguration that are resolved
// relative to the directory of the file that sets them.
func pathFields() [][]string {
	return [][]string{
		{"staticPodPath"},
		{"tlsCertFile"},
		{"tlsPrivateKeyFile"},
		{"authentication", "x509", "clientCAFile"},
		{"resolvConf"},
		{"podLogsDir"},
	}
}

func resolveRelativePaths(obj map[string]any, baseDir string) {
	for _, p := range pathFields() {
		m := obj
		for _, k := range p[:len(p)-1] {
			next, ok := m[k].(map[string]any)
			if !ok {
				m = nil
				break
			}
			m = next
		}
		if m == nil {
			continue
		}
		last := p[len(p)-1]
		if s, ok := m[last].(string); ok && s != "" && !filepath.IsAbs(s) {
			m[last] = filepath.Join(baseDir, s)
		}
	}
}

// strictCheck walks a generic JSON value against the Go type it will be
// decoded into and reports, with full field paths, unknown fields
// (case-sensitively, as upstream does) and values that do not decode
// (e.g. "syncFrequency: time: invalid duration \"10x\"").
// encoding/json alone names neither the path of an unknown field nor the
// field whose UnmarshalJSON failed.
func strictCheck(v any, t reflect.Type, path string) []error {
	if v == nil {
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) || t.Kind() != reflect.Struct && t.Kind() != reflect.Map && t.Kind() != reflect.Slice {
		return checkDecode(v, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return checkDecode(v, t, path)
		}
		fields := jsonFields(t)
		var errs []error
		for _, k := range sortedKeys(obj) {
			ft, ok := fields[k]
			if !ok {
				errs = append(errs, fmt.Errorf("%s: unknown field", joinPath(path, k)))
				continue
			}
			errs = append(errs, strictCheck(obj[k], ft, joinPath(path, k))...)
		}
		return errs
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return checkDecode(v, t, path)
		}
		var errs []error
		for _, k := range sortedKeys(obj) {
			errs = append(errs, strictCheck(obj[k], t.Elem(), path+"["+k+"]")...)
		}
		return errs
	default: // slice
		list, ok := v.([]any)
		if !ok || t.Elem().Kind() == reflect.Uint8 {
			return checkDecode(v, t, path)
		}
		var errs []error
		for i, e := range list {
			errs = append(errs, strictCheck(e, t.Elem(), path+"["+strconv.Itoa(i)+"]")...)
		}
		return errs
	}
}

func checkDecode(v any, t reflect.Type, path string) []error {
	raw, err := json.Marshal(v)
	if err != nil {
		return []error{fmt.Errorf("%s: %w", path, err)}
	}
	if err := json.Unmarshal(raw, reflect.New(t).Interface()); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return []error{fmt.Errorf("%s: cannot use %s value %s as %s", path, typeErr.Value, raw, typeErr.Type)}
		}
		return []error{fmt.Errorf("%s: %w", path, err)}
	}
	return nil
}

// jsonFields maps the JSON names of t's fields (inlined structs flattened)
// to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if f.Anonymous && name == "" || strings.Contains(","+opts+",", ",inline,") && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range jsonFields(ft) {
					out[k] = v
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	return out
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

func sortedKeys(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return maps.Keys(m)
}

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
	"regexp"
	"slices"
	"strconv"

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
	// warnings are what strict decoding refused and lenient decoding let
	// through: unknown and duplicate fields.
	warnings []DecodeWarning
}

// DecodeWarning is a field of a configuration file that the upstream kubelet's
// strict decoding refuses and its lenient v1beta1 decoding tolerates: an
// unknown field (a typo, a field of a newer version, a field in the wrong
// case), which is ignored, or a duplicate field, whose last value wins. The
// kubelet logs these and runs; so does nodelet.
type DecodeWarning struct {
	File   string
	Field  string // JSON path
	Detail string // "unknown field" or "duplicate field"
}

func (w DecodeWarning) String() string {
	return fmt.Sprintf("%s: %s: %s", w.File, w.Field, w.Detail)
}

// loadConfigFile reads --config: lenient decoding (strict-decoding failures
// become warnings), relative paths resolved against the file's directory,
// upstream defaults for everything unset.
func loadConfigFile(path string) (*kubeletconfigv1beta1.KubeletConfiguration, []DecodeWarning, error) {
	doc, err := readDocument(path)
	if err != nil {
		return nil, nil, err
	}
	if doc == nil {
		return nil, nil, fmt.Errorf("kubelet config file %q is empty", path)
	}
	setBaseDefaults(doc.config)
	return doc.config, doc.warnings, nil
}

// mergeConfigDir applies every *.conf file below dir, in lexical order, as
// an RFC 7386 merge patch over kc, which it replaces with the result.
//
// As upstream, the result is not defaulted again: kc was defaulted when it was
// loaded (from --config, or from the flags' legacy defaults), and a value a
// drop-in spells out, even an explicit zero such as cpuManagerReconcilePeriod:
// 0s, is kept (upstream's e2e "should merge kubelet configs correctly" asserts
// exactly that). Validation then refuses the zeros that cannot work, by name.
func mergeConfigDir(kc *kubeletconfigv1beta1.KubeletConfiguration, dir string) (*kubeletconfigv1beta1.KubeletConfiguration, []DecodeWarning, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading config dir %q: %w", dir, err)
	}
	if !info.IsDir() {
		return nil, nil, fmt.Errorf("config dir %q is not a directory", dir)
	}
	base, err := json.Marshal(kc)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the configuration before merging %q: %w", dir, err)
	}
	var warnings []DecodeWarning
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
		warnings = append(warnings, doc.warnings...)
		merged, err := mergePatch(base, doc.raw)
		if err != nil {
			return fmt.Errorf("merging drop-in config file %q: %w", path, err)
		}
		base = merged
		klog.V(2).InfoS("Merged kubelet drop-in config file", "path", path)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("merging drop-in configs from %q: %w", dir, err)
	}
	out := &kubeletconfigv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(base, out); err != nil {
		return nil, nil, fmt.Errorf("decoding the configuration merged from %q: %w", dir, err)
	}
	return out, warnings, nil
}

// readDocument decodes one KubeletConfiguration file (YAML or JSON) the way
// upstream does: strictly if it can, else leniently with the strict failures
// as warnings. Bad values still fail, naming the field. It returns nil for a
// file that holds nothing but whitespace.
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
	for i := range doc.warnings {
		doc.warnings[i].File = path
	}
	return doc, nil
}

// duplicateKey matches the strict YAML decoder's duplicate-key error, e.g.
// `line 3: key "port" already set in map`.
var duplicateKey = regexp.MustCompile(`line (\d+): key "([^"]*)" already set in map`)

// decodeDocument decodes data, resolving relative paths against baseDir.
func decodeDocument(data []byte, baseDir string) (*document, error) {
	var warnings []DecodeWarning
	// YAMLToJSONStrict rejects duplicate keys; JSON input is valid YAML. The
	// lenient fallback keeps the last value, as upstream's lenient decoder.
	js, strictErr := yaml.YAMLToJSONStrict(data)
	if strictErr != nil {
		var err error
		if js, err = yaml.YAMLToJSON(data); err != nil {
			return nil, err
		}
		found := duplicateKey.FindAllStringSubmatch(strictErr.Error(), -1)
		for _, m := range found {
			warnings = append(warnings, DecodeWarning{Field: m[2], Detail: "duplicate field (line " + m[1] + "), the last value is used"})
		}
		if len(found) == 0 {
			warnings = append(warnings, DecodeWarning{Detail: strictErr.Error()})
		}
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
	unknown, errs := strictCheck(obj, reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration]())
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	for _, f := range unknown {
		warnings = append(warnings, DecodeWarning{Field: f, Detail: "unknown field, ignored"})
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
	return &document{raw: raw, config: kc, warnings: warnings}, nil
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
// decoded into. It removes unknown fields (matched case-sensitively, as
// upstream does) from v and returns their full paths, and reports values that
// do not decode (e.g. "syncFrequency: time: invalid duration \"10x\"").
// encoding/json alone names neither the path of an unknown field nor the
// field whose UnmarshalJSON failed, and it would match a field in the wrong
// case that upstream ignores.
func strictCheck(v any, t reflect.Type) (unknown []string, errs []error) {
	c := &checker{}
	c.walk(v, t, "")
	return c.unknown, c.errs
}

type checker struct {
	unknown []string
	errs    []error
}

func (c *checker) walk(v any, t reflect.Type, path string) {
	if v == nil {
		return
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) || t.Kind() != reflect.Struct && t.Kind() != reflect.Map && t.Kind() != reflect.Slice {
		c.errs = append(c.errs, checkDecode(v, t, path)...)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			c.errs = append(c.errs, checkDecode(v, t, path)...)
			return
		}
		fields := jsonFields(t)
		for _, k := range sortedKeys(obj) {
			ft, ok := fields[k]
			if !ok {
				c.unknown = append(c.unknown, joinPath(path, k))
				delete(obj, k)
				continue
			}
			c.walk(obj[k], ft, joinPath(path, k))
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			c.errs = append(c.errs, checkDecode(v, t, path)...)
			return
		}
		for _, k := range sortedKeys(obj) {
			c.walk(obj[k], t.Elem(), path+"["+k+"]")
		}
	default: // slice
		list, ok := v.([]any)
		if !ok || t.Elem().Kind() == reflect.Uint8 {
			c.errs = append(c.errs, checkDecode(v, t, path)...)
			return
		}
		for i, e := range list {
			c.walk(e, t.Elem(), path+"["+strconv.Itoa(i)+"]")
		}
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
	for name, idx := range jsonFieldIndex(t) {
		out[name] = t.FieldByIndex(idx).Type
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

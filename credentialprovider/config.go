// Package credentialprovider runs the kubelet's image credential provider
// plugins (KEP-2133): executables named in a CredentialProviderConfig
// (kubelet.config.k8s.io/v1, a file or a directory), found in
// --image-credential-provider-bin-dir, asked for an image's registry
// credentials with a CredentialProviderRequest on stdin
// (credentialprovider.kubelet.k8s.io/v1, with the configured env and args) and
// answering with a CredentialProviderResponse on stdout, whose credentials are
// cached per image, registry or globally as the response says, for
// cacheDuration or defaultCacheDuration.
//
// The configuration is validated as upstream; tokenAttributes is refused
// (there is no service account token mode). Its matchImages globbing is the
// one image matcher, also used by the pull secrets keyring. The providers'
// credentials are tried after the pod's pull secrets and are recorded as
// node-wide by pullrecords.
package credentialprovider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	"sigs.k8s.io/yaml"
)

// The config's group and kind, and the plugin protocol versions upstream
// speaks (their request and response have one shape).
const (
	configGroup = "kubelet.config.k8s.io"
	configKind  = "CredentialProviderConfig"

	protocolV1      = "credentialprovider.kubelet.k8s.io/v1"
	protocolV1beta1 = "credentialprovider.kubelet.k8s.io/v1beta1"
	protocolV1alpha = "credentialprovider.kubelet.k8s.io/v1alpha1"
)

// errTokenAttributes is why a provider with tokenAttributes is refused.
var errTokenAttributes = errors.New("tokenAttributes (service account tokens for image pulls) is not built into nodelet: remove it, or give the plugin credentials of its own")

// ReadConfig reads the providers of path: a CredentialProviderConfig file
// (YAML or JSON), or a directory whose files are read in lexical order, their
// providers together. Fields the type does not have are errors, as upstream
// decodes the file strictly.
func ReadConfig(path string) ([]kubeletconfigv1.CredentialProvider, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading credential provider config: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, fmt.Errorf("reading credential provider config directory: %w", err)
		}
		files = nil
		for _, e := range entries { // ReadDir sorts by name
			if e.Type().IsRegular() {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("credential provider config directory %s has no files", path)
		}
	}
	var out []kubeletconfigv1.CredentialProvider
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading credential provider config: %w", err)
		}
		cfg, err := decodeConfig(data)
		if err != nil {
			return nil, fmt.Errorf("decoding credential provider config %s: %w", f, err)
		}
		out = append(out, cfg.Providers...)
	}
	return out, nil
}

func decodeConfig(data []byte) (*kubeletconfigv1.CredentialProviderConfig, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	var cfg kubeletconfigv1.CredentialProviderConfig
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&cfg); err != nil {
		return nil, err
	}
	group, version, _ := strings.Cut(cfg.APIVersion, "/")
	if cfg.Kind != configKind || group != configGroup || (version != "v1" && version != "v1beta1" && version != "v1alpha1") {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s/v1 %s", cfg.APIVersion, cfg.Kind, configGroup, configKind)
	}
	return &cfg, nil
}

// Validate checks the providers as upstream does; a provider with
// tokenAttributes is refused by name, nodelet lacking service account token
// mode.
func Validate(providers []kubeletconfigv1.CredentialProvider) error {
	if len(providers) == 0 {
		return errors.New("providers: at least 1 item in plugins is required")
	}
	var errs []error
	add := func(i int, field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("providers[%d].%s: %s", i, field, fmt.Sprintf(format, args...)))
	}
	seen := map[string]bool{}
	for i, p := range providers {
		switch {
		case p.Name == "":
			add(i, "name", "name is required")
		case strings.ContainsAny(p.Name, "/ ") || p.Name == "." || p.Name == "..":
			add(i, "name", "%q: provider name cannot contain '/', ' ' or be '.' or '..'", p.Name)
		case seen[p.Name]:
			add(i, "name", "duplicate provider name %q", p.Name)
		}
		seen[p.Name] = true
		if len(p.MatchImages) == 0 {
			add(i, "matchImages", "at least 1 item in matchImages is required")
		}
		for j, m := range p.MatchImages {
			if !validPattern(m) {
				add(i, fmt.Sprintf("matchImages[%d]", j), "%q is not a valid image pattern (host[:port][/path], globs only in the host)", m)
			}
		}
		switch d := p.DefaultCacheDuration; {
		case d == nil:
			add(i, "defaultCacheDuration", "defaultCacheDuration is required")
		case d.Duration < 0:
			add(i, "defaultCacheDuration", "must be greater than or equal to 0")
		}
		switch p.APIVersion {
		case "":
			add(i, "apiVersion", "apiVersion is required")
		case protocolV1, protocolV1beta1, protocolV1alpha:
		default:
			add(i, "apiVersion", "%q: supported values are %q, %q and %q", p.APIVersion, protocolV1, protocolV1beta1, protocolV1alpha)
		}
		for j, e := range p.Env {
			if e.Name == "" {
				add(i, fmt.Sprintf("env[%d].name", j), "name is required")
			}
		}
		if p.TokenAttributes != nil {
			add(i, "tokenAttributes", "%v", errTokenAttributes)
		}
	}
	return errors.Join(errs...)
}

// binaries resolves each provider's executable in binDir, which must exist,
// as upstream does at start.
func binaries(binDir string, providers []kubeletconfigv1.CredentialProvider) ([]string, error) {
	if binDir == "" {
		return nil, errors.New("--image-credential-provider-bin-dir is required with --image-credential-provider-config")
	}
	if _, err := os.Stat(binDir); err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("plugin binary directory %s did not exist", binDir)
		}
		return nil, fmt.Errorf("error inspecting binary directory %s: %w", binDir, err)
	}
	out := make([]string, 0, len(providers))
	for _, p := range providers {
		bin := filepath.Join(binDir, p.Name)
		fi, err := os.Stat(bin)
		switch {
		case os.IsNotExist(err):
			return nil, fmt.Errorf("plugin binary executable %s did not exist", bin)
		case err != nil:
			return nil, fmt.Errorf("error inspecting binary executable %s: %w", bin, err)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			return nil, fmt.Errorf("plugin binary %s is not an executable file", bin)
		}
		out = append(out, bin)
	}
	return out, nil
}

// Load reads, validates and resolves the plugins of configPath (a file or a
// directory) in binDir. A bad config stops the start, as upstream's kubelet
// exits on it.
func Load(configPath, binDir string, opts ...Option) (*Providers, error) {
	providers, err := ReadConfig(configPath)
	if err != nil {
		return nil, err
	}
	if err := Validate(providers); err != nil {
		return nil, fmt.Errorf("failed to validate credential provider config %s: %w", configPath, err)
	}
	bins, err := binaries(binDir, providers)
	if err != nil {
		return nil, fmt.Errorf("registering credential provider plugins: %w", err)
	}
	return newProviders(providers, bins, opts...), nil
}

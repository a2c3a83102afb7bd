// Package config builds nodelet's KubeletConfiguration the way the upstream
// kubelet does: command-line flags, a --config file, --config-dir drop-ins
// merged as JSON merge patches, upstream defaults, flag precedence and
// validation.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	cliflag "k8s.io/component-base/cli/flag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// Options is everything nodelet takes from its command line and config files.
type Options struct {
	// Config is merged, defaulted and validated. It is nil when ShowVersion
	// is set: --version short-circuits loading, as upstream.
	Config *kubeletconfigv1beta1.KubeletConfiguration

	ConfigFile, ConfigDir                             string
	Kubeconfig, BootstrapKubeconfig, CertDir, RootDir string
	HostnameOverride                                  string
	// NodeIPs is --node-ip: at most one address per IP family.
	NodeIPs []net.IP
	// NodeLabels is --node-labels, keys and values validated.
	NodeLabels map[string]string
	// PodInfraContainerImage is the deprecated upstream flag; nodelet uses
	// it to pin the sandbox image.
	PodInfraContainerImage string
	ShowVersion            bool
	// DecodeWarnings are the unknown and duplicate fields of --config and the
	// --config-dir drop-ins, which upstream's lenient decoding tolerates and
	// logs; nodelet logs them at start.
	DecodeWarnings []DecodeWarning
}

// flagValues holds what the command line said before it is known which
// flags were given explicitly.
type flagValues struct {
	opts       Options
	kc         kubeletconfigv1beta1.KubeletConfiguration
	failSwapOn bool
	register   bool
	nodeIPs    string
	labels     map[string]string
	taints     []v1.Taint
}

// kcFlag copies one explicitly given flag into the final configuration.
type kcFlag struct {
	name  string
	apply func(dst *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues)
}

func newFlagSet(f *flagValues) (*pflag.FlagSet, []kcFlag) {
	// The help text shows the upstream defaults of the configuration fields.
	SetDefaults(&f.kc)
	f.kc.ImageServiceEndpoint = ""
	f.failSwapOn = *f.kc.FailSwapOn
	f.register = *f.kc.RegisterNode
	f.opts.CertDir = DefaultCertDir
	f.opts.RootDir = DefaultRootDir

	fs := pflag.NewFlagSet("nodelet", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = true

	o := &f.opts
	fs.StringVar(&o.ConfigFile, "config", "", "Path to a KubeletConfiguration file (kubelet.config.k8s.io/v1beta1). Flags override its values.")
	fs.StringVar(&o.ConfigDir, "config-dir", "", "Directory of *.conf KubeletConfiguration drop-ins, applied in lexical order as JSON merge patches over --config.")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "Path to a kubeconfig file for connecting to the API server. Without it nodelet runs standalone.")
	fs.StringVar(&o.BootstrapKubeconfig, "bootstrap-kubeconfig", "", "Path to a bootstrap kubeconfig used to get a client certificate when --kubeconfig does not exist.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "Directory where the TLS certs are located.")
	fs.StringVar(&o.RootDir, "root-dir", o.RootDir, "Directory for managing nodelet files (volume mounts, etc).")
	fs.StringVar(&o.HostnameOverride, "hostname-override", "", "If non-empty, use this string as the node name instead of the hostname.")
	fs.StringVar(&f.nodeIPs, "node-ip", "", "Comma-separated IP addresses of the node (at most one IPv4 and one IPv6).")
	fs.Var(cliflag.NewMapStringString(&f.labels), "node-labels", "Labels to add when registering the node, as key=value pairs separated by ','.")
	fs.StringVar(&o.PodInfraContainerImage, "pod-infra-container-image", "", "Sandbox image; only used to keep the image pinned. DEPRECATED upstream, accepted for compatibility.")
	fs.BoolVar(&o.ShowVersion, "version", false, "Print version information and quit.")

	flags := []kcFlag{}
	add := func(name string, apply func(*kubeletconfigv1beta1.KubeletConfiguration, *flagValues)) {
		flags = append(flags, kcFlag{name: name, apply: apply})
	}
	kc := &f.kc
	fs.Var(&taintsValue{taints: &f.taints}, "register-with-taints", "Taints to add when registering the node, as key=value:Effect separated by ','.")
	add("register-with-taints", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.RegisterWithTaints = slices.Clone(f.taints)
	})
	fs.StringVar(&kc.ContainerRuntimeEndpoint, "container-runtime-endpoint", kc.ContainerRuntimeEndpoint, "The endpoint of the CRI runtime service.")
	add("container-runtime-endpoint", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.ContainerRuntimeEndpoint = f.kc.ContainerRuntimeEndpoint
	})
	fs.StringVar(&kc.ImageServiceEndpoint, "image-service-endpoint", "", "The endpoint of the CRI image service; defaults to --container-runtime-endpoint.")
	add("image-service-endpoint", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.ImageServiceEndpoint = f.kc.ImageServiceEndpoint
	})
	fs.DurationVar(&kc.RuntimeRequestTimeout.Duration, "runtime-request-timeout", kc.RuntimeRequestTimeout.Duration, "Timeout of CRI requests except long-running ones.")
	add("runtime-request-timeout", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.RuntimeRequestTimeout = f.kc.RuntimeRequestTimeout
	})
	fs.StringVar(&kc.StaticPodPath, "pod-manifest-path", "", "Path to the directory (or file) of static pod manifests (staticPodPath).")
	add("pod-manifest-path", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.StaticPodPath = f.kc.StaticPodPath
	})
	fs.StringSliceVar(&kc.ClusterDNS, "cluster-dns", nil, "Comma-separated DNS server IPs given to pods.")
	add("cluster-dns", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.ClusterDNS = slices.Clone(f.kc.ClusterDNS)
	})
	fs.StringVar(&kc.ClusterDomain, "cluster-domain", "", "Cluster DNS domain appended to pods' search paths.")
	add("cluster-domain", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.ClusterDomain = f.kc.ClusterDomain
	})
	fs.Int32Var(&kc.MaxPods, "max-pods", kc.MaxPods, "Number of pods that can run on this node.")
	add("max-pods", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) { d.MaxPods = f.kc.MaxPods })
	fs.BoolVar(&f.failSwapOn, "fail-swap-on", f.failSwapOn, "Fail to start if swap is enabled on the node.")
	add("fail-swap-on", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) { d.FailSwapOn = ptr.To(f.failSwapOn) })
	fs.StringVar(&kc.CgroupDriver, "cgroup-driver", kc.CgroupDriver, "Cgroup driver: cgroupfs or systemd.")
	add("cgroup-driver", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) { d.CgroupDriver = f.kc.CgroupDriver })
	fs.StringVar(&kc.CgroupRoot, "cgroup-root", "", "Optional root cgroup for pods.")
	add("cgroup-root", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) { d.CgroupRoot = f.kc.CgroupRoot })
	fs.BoolVar(&f.register, "register-node", f.register, "Register the node with the API server.")
	add("register-node", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) { d.RegisterNode = ptr.To(f.register) })
	fs.DurationVar(&kc.NodeStatusUpdateFrequency.Duration, "node-status-update-frequency", kc.NodeStatusUpdateFrequency.Duration, "How often node status is computed and posted.")
	add("node-status-update-frequency", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.NodeStatusUpdateFrequency = f.kc.NodeStatusUpdateFrequency
	})
	fs.DurationVar(&kc.FileCheckFrequency.Duration, "file-check-frequency", kc.FileCheckFrequency.Duration, "How often the static pod path is checked for new data.")
	add("file-check-frequency", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.FileCheckFrequency = f.kc.FileCheckFrequency
	})
	fs.DurationVar(&kc.SyncFrequency.Duration, "sync-frequency", kc.SyncFrequency.Duration, "Maximum period between syncs of running pods with their spec.")
	add("sync-frequency", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) {
		d.SyncFrequency = f.kc.SyncFrequency
	})
	fs.StringVar(&kc.ProviderID, "provider-id", "", "Unique identifier of the node in the machine database (spec.providerID).")
	add("provider-id", func(d *kubeletconfigv1beta1.KubeletConfiguration, f *flagValues) { d.ProviderID = f.kc.ProviderID })

	// klog's own flags (-v, --vmodule, ...): the upstream kubelet takes its
	// verbosity from the command line too.
	gofs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gofs)
	fs.AddGoFlagSet(gofs)
	add("v", func(d *kubeletconfigv1beta1.KubeletConfiguration, _ *flagValues) {
		if lv, err := parseVerbosity(fs.Lookup("v").Value.String()); err == nil {
			d.Logging.Verbosity = logsapi.VerbosityLevel(lv)
		}
	})
	return fs, flags
}

// Usage returns the help text of nodelet's flags.
func Usage() string {
	fs, _ := newFlagSet(&flagValues{})
	return "Usage of nodelet:\n" + fs.FlagUsages()
}

// Load parses args (the command line without the program name), loads
// --config, merges --config-dir, lets explicitly given flags win, applies
// the defaults and validates the result. --help yields an error wrapping
// pflag.ErrHelp; print Usage() for it.
func Load(args []string) (*Options, error) {
	f := &flagValues{}
	fs, kcFlags := newFlagSet(f)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("parsing command line: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("parsing command line: unexpected arguments %q", fs.Args())
	}
	opts := f.opts
	if opts.ShowVersion {
		return &opts, nil
	}

	var kc *kubeletconfigv1beta1.KubeletConfiguration
	if opts.ConfigFile != "" {
		var err error
		if kc, opts.DecodeWarnings, err = loadConfigFile(opts.ConfigFile); err != nil {
			return nil, err
		}
	} else {
		// Flags-only mode keeps the upstream kubelet's insecure legacy defaults.
		kc = &kubeletconfigv1beta1.KubeletConfiguration{}
		setBaseDefaults(kc)
		setLegacyDefaults(kc)
	}
	if opts.ConfigDir != "" {
		var err error
		var warnings []DecodeWarning
		if kc, warnings, err = mergeConfigDir(kc, opts.ConfigDir); err != nil {
			return nil, err
		}
		opts.DecodeWarnings = append(opts.DecodeWarnings, warnings...)
	}
	// Flags win over the file and the drop-ins (upstream #56171).
	for _, kf := range kcFlags {
		if fs.Changed(kf.name) {
			kf.apply(kc, f)
		}
	}
	setDerivedDefaults(kc)

	var errs []error
	if err := Validate(kc); err != nil {
		errs = append(errs, err)
	}
	ips, err := parseNodeIPs(f.nodeIPs)
	if err != nil {
		errs = append(errs, fmt.Errorf("--node-ip: %w", err))
	}
	if err := validateNodeLabels(f.labels); err != nil {
		errs = append(errs, fmt.Errorf("--node-labels: %w", err))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid configuration: %w", errors.Join(errs...))
	}
	opts.Config = kc
	opts.NodeIPs = ips
	opts.NodeLabels = f.labels
	return &opts, nil
}

func parseVerbosity(s string) (uint32, error) {
	var lv uint32
	_, err := fmt.Sscanf(s, "%d", &lv)
	return lv, err
}

// parseNodeIPs parses --node-ip: one address, or two of different families
// (dual stack). An unspecified address (0.0.0.0 / ::) only picks a family.
func parseNodeIPs(s string) ([]net.IP, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var ips []net.IP
	for _, part := range strings.Split(s, ",") {
		ip := net.ParseIP(strings.TrimSpace(part))
		if ip == nil {
			return nil, fmt.Errorf("%q is not a valid IP address", strings.TrimSpace(part))
		}
		ips = append(ips, ip)
	}
	switch {
	case len(ips) > 2:
		return nil, fmt.Errorf("at most two addresses (one per family) may be given, got %d", len(ips))
	case len(ips) == 2:
		if (ips[0].To4() == nil) == (ips[1].To4() == nil) {
			return nil, fmt.Errorf("dual-stack addresses must be of different IP families: %s", s)
		}
		if ips[0].IsUnspecified() || ips[1].IsUnspecified() {
			return nil, fmt.Errorf("an unspecified address cannot be part of a dual-stack pair: %s", s)
		}
	}
	return ips, nil
}

// validateNodeLabels checks label syntax and, like the upstream kubelet,
// refuses labels in the kubernetes.io / k8s.io namespaces that a kubelet
// may not set on itself.
func validateNodeLabels(labels map[string]string) error {
	var errs []error
	var restricted []string
	for _, k := range slices.Sorted(mapKeys(labels)) {
		for _, msg := range content.IsLabelKey(k) {
			errs = append(errs, fmt.Errorf("invalid label key %q: %s", k, msg))
		}
		for _, msg := range content.IsLabelValue(labels[k]) {
			errs = append(errs, fmt.Errorf("invalid label value %q for key %q: %s", labels[k], k, msg))
		}
		if !isAllowedKubeletLabel(k) {
			restricted = append(restricted, k)
		}
	}
	if len(restricted) > 0 {
		errs = append(errs, fmt.Errorf("unknown 'kubernetes.io' or 'k8s.io' labels %v: labels in these namespaces must begin with kubelet.kubernetes.io/ or node.kubernetes.io/, or be one of the well-known node labels", restricted))
	}
	return errors.Join(errs...)
}

func isAllowedKubeletLabel(key string) bool {
	prefix, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	if prefix != "kubernetes.io" && prefix != "k8s.io" && !strings.HasSuffix(prefix, ".kubernetes.io") && !strings.HasSuffix(prefix, ".k8s.io") {
		return true
	}
	wellKnown := []string{
		"kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
		"beta.kubernetes.io/os", "beta.kubernetes.io/arch", "beta.kubernetes.io/instance-type",
		"node.kubernetes.io/instance-type",
		"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
		"topology.kubernetes.io/region", "topology.kubernetes.io/zone",
	}
	if slices.Contains(wellKnown, key) {
		return true
	}
	for _, ns := range []string{"kubelet.kubernetes.io", "node.kubernetes.io"} {
		if prefix == ns || strings.HasSuffix(prefix, "."+ns) {
			return true
		}
	}
	return false
}

// taintsValue parses --register-with-taints: key=value:Effect or
// key:Effect, comma separated.
type taintsValue struct {
	taints *[]v1.Taint
	set    bool
}

func (t *taintsValue) String() string {
	if t.taints == nil {
		return ""
	}
	parts := make([]string, 0, len(*t.taints))
	for _, tt := range *t.taints {
		parts = append(parts, tt.ToString())
	}
	return strings.Join(parts, ",")
}

func (t *taintsValue) Set(s string) error {
	var out []v1.Taint
	for _, spec := range strings.Split(s, ",") {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok || effect == "" {
			return fmt.Errorf("invalid taint %q: want key=value:Effect or key:Effect", spec)
		}
		key, value, _ := strings.Cut(kv, "=")
		taint := v1.Taint{Key: key, Value: value, Effect: v1.TaintEffect(effect)}
		switch taint.Effect {
		case v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute:
		default:
			return fmt.Errorf("invalid taint %q: effect must be NoSchedule, PreferNoSchedule or NoExecute", spec)
		}
		if msgs := content.IsLabelKey(key); len(msgs) > 0 {
			return fmt.Errorf("invalid taint key %q: %s", key, strings.Join(msgs, "; "))
		}
		if value != "" {
			if msgs := content.IsLabelValue(value); len(msgs) > 0 {
				return fmt.Errorf("invalid taint value %q: %s", value, strings.Join(msgs, "; "))
			}
		}
		out = append(out, taint)
	}
	// Repeating the flag accumulates, as upstream's string-slice flags do.
	if t.set {
		*t.taints = append(*t.taints, out...)
	} else {
		*t.taints = out
		t.set = true
	}
	return nil
}

func (t *taintsValue) Type() string { return "taints" }

// NodeName returns the node's name: hostnameOverride if non-empty, else the
// machine's hostname, trimmed and lower-cased, and valid as an RFC 1123
// subdomain (the API server's rule for Node names).
func NodeName(hostnameOverride string) (string, error) {
	return nodeName(hostnameOverride, os.Hostname)
}

func nodeName(override string, hostname func() (string, error)) (string, error) {
	name := override
	source := "--hostname-override"
	if name == "" {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("getting the hostname for the node name: %w", err)
		}
		name, source = h, "hostname"
	}
	name = strings.ToLower(strings.TrimSpace(name))
	if name == "" {
		return "", fmt.Errorf("node name from %s is empty", source)
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return "", fmt.Errorf("node name %q from %s is not a valid RFC 1123 subdomain: %s", name, source, strings.Join(msgs, "; "))
	}
	return name, nil
}

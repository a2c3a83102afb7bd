package csi

import (
	"fmt"
	"path/filepath"
	"strings"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/nodelet/nodelet/pluginmanager"
)

// logPrefix starts the CSI plugin's messages as upstream's (its log() helper).
const logPrefix = PluginName + ": "

// checkedPlugin is a registration that passed checkPluginInfo.
type checkedPlugin struct {
	name     string
	endpoint string
	version  *utilversion.Version
}

// checkPluginInfo decides whether a CSI plugin's GetInfo answer can
// register, returning the error to send back with NotifyRegistrationStatus
// in upstream's wording (the watcher adds its prefix). registered holds the
// highest version of each driver already registered (or registering) from
// another socket: a driver of the same name replaces it only with a higher
// version, as upstream.
func checkPluginInfo(p pluginmanager.Plugin, registered map[string]*utilversion.Version) (checkedPlugin, error) {
	endpoint := p.Endpoint
	if endpoint == "" {
		// As upstream: the plugin serves CSI on its registration socket.
		endpoint = p.Socket
	}
	v, err := validateCSIPlugin(p.Name, endpoint, p.Versions, registered)
	if err != nil {
		return checkedPlugin{}, fmt.Errorf("validation failed for CSI Driver %s at endpoint %s: %w", p.Name, endpoint, err)
	}
	return checkedPlugin{name: p.Name, endpoint: endpoint, version: v}, nil
}

// validateCSIPlugin is upstream's version check of a CSI driver (a 1.x
// version among those supported, not lower than one registered under the
// same name) plus what nodelet needs to use it: a name and a unix socket
// path it can dial.
func validateCSIPlugin(name, endpoint string, versions []string, registered map[string]*utilversion.Version) (*utilversion.Version, error) {
	const caller = "ValidatePlugin"
	if name == "" {
		return nil, fmt.Errorf("%s%s for CSI driver %q failed. Plugin returned an empty driver name", logPrefix, caller, name)
	}
	if len(versions) == 0 {
		return nil, fmt.Errorf("%s%s for CSI driver %q failed. Plugin returned an empty list for supported versions", logPrefix, caller, name)
	}
	v, err := utilversion.HighestSupportedVersion(versions)
	if err != nil {
		return nil, fmt.Errorf("%s%s for CSI driver %q failed. None of the versions specified %q are supported. err=%w", logPrefix, caller, name, versions, err)
	}
	if existing, ok := registered[name]; ok && !existing.LessThan(v) {
		return nil, fmt.Errorf("%s%s for CSI driver %q failed. Another driver with the same name is already registered with a higher supported version: %q", logPrefix, caller, name, existing)
	}
	if p := strings.TrimPrefix(endpoint, "unix://"); !filepath.IsAbs(p) {
		return nil, fmt.Errorf("%s%s for CSI driver %q failed. Endpoint %q is not the absolute path of a unix socket", logPrefix, caller, name, endpoint)
	}
	return v, nil
}

// endpointPath is the socket path of an endpoint that passed validation
// (a path, or a unix:// URL of one).
func endpointPath(endpoint string) string { return strings.TrimPrefix(endpoint, "unix://") }

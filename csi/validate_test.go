package csi

import (
	"strings"
	"testing"

	utilversion "k8s.io/apimachinery/pkg/util/version"

	"github.com/nodelet/nodelet/pluginmanager"
)

func TestCheckPluginInfo(t *testing.T) {
	const sock = "/var/lib/kubelet/plugins_registry/d-reg.sock"
	const ep = "/var/lib/kubelet/plugins/d/csi.sock"
	registered := map[string]*utilversion.Version{"old.csi.k8s.io": utilversion.MustParseGeneric("1.5.0")}
	for _, c := range []struct {
		name         string
		info         pluginmanager.Plugin
		wantErr      string // substring; "" = accepted
		wantEndpoint string
		wantVersion  string
	}{
		{name: "CSI plugin", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: ep, Versions: []string{"1.0.0"}},
			wantEndpoint: ep, wantVersion: "1.0.0"},
		{name: "highest 1.x of several", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: ep, Versions: []string{"0.3.0", "1.2.0", "2.0.0", "v1.10.0"}},
			wantEndpoint: ep, wantVersion: "1.10.0"},
		{name: "no endpoint: the registration socket serves CSI", info: pluginmanager.Plugin{Socket: sock, Name: "d", Versions: []string{"1.0.0"}},
			wantEndpoint: sock, wantVersion: "1.0.0"},
		{name: "unix URL endpoint", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: "unix://" + ep, Versions: []string{"1.0.0"}},
			wantEndpoint: "unix://" + ep, wantVersion: "1.0.0"},
		{name: "no versions", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: ep},
			wantErr: `validation failed for CSI Driver d at endpoint ` + ep + `: kubernetes.io/csi: ValidatePlugin for CSI driver "d" failed. Plugin returned an empty list for supported versions`},
		{name: "only 0.x", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: ep, Versions: []string{"0.3.0"}},
			wantErr: `None of the versions specified ["0.3.0"] are supported. err=highest supported version reported is 0.3.0, must be v1.x`},
		{name: "only 2.x", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: ep, Versions: []string{"2.0.0"}},
			wantErr: `None of the versions specified ["2.0.0"] are supported`},
		{name: "garbage version", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: ep, Versions: []string{"one"}},
			wantErr: `None of the versions specified ["one"] are supported`},
		{name: "no name", info: pluginmanager.Plugin{Socket: sock, Endpoint: ep, Versions: []string{"1.0.0"}},
			wantErr: `ValidatePlugin for CSI driver "" failed. Plugin returned an empty driver name`},
		{name: "relative endpoint", info: pluginmanager.Plugin{Socket: sock, Name: "d", Endpoint: "csi.sock", Versions: []string{"1.0.0"}},
			wantErr: `Endpoint "csi.sock" is not the absolute path of a unix socket`},
		{name: "same name, same version registered", info: pluginmanager.Plugin{Socket: sock, Name: "old.csi.k8s.io", Endpoint: ep, Versions: []string{"1.5.0"}},
			wantErr: `ValidatePlugin for CSI driver "old.csi.k8s.io" failed. Another driver with the same name is already registered with a higher supported version: "1.5.0"`},
		{name: "same name, higher version replaces", info: pluginmanager.Plugin{Socket: sock, Name: "old.csi.k8s.io", Endpoint: ep, Versions: []string{"1.6.0"}},
			wantEndpoint: ep, wantVersion: "1.6.0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := checkPluginInfo(c.info, registered)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if p.name != c.info.Name || p.endpoint != c.wantEndpoint || p.version.String() != c.wantVersion {
				t.Errorf("got name %q endpoint %q version %s, want %q %q %s", p.name, p.endpoint, p.version, c.info.Name, c.wantEndpoint, c.wantVersion)
			}
		})
	}
}

module github.com/nodelet/nodelet

go 1.26.8

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/godbus/dbus/v5 v5.2.4 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/spf13/pflag v1.1.0 // indirect
	go.yaml.in/yaml/v2 v2.4.4 // indirect
	golang.org/x/net v0.60.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260817212433-ac3dfec99bb1 // indirect
	google.golang.org/grpc v1.85.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
	k8s.io/api v0.37.2 // indirect
	k8s.io/apimachinery v0.37.2 // indirect
	k8s.io/client-go v0.37.2 // indirect
	k8s.io/component-base v0.37.2 // indirect
	k8s.io/cri-api v0.37.2 // indirect
	k8s.io/klog/v2 v2.140.0 // indirect
	k8s.io/kubelet v0.37.2 // indirect
	k8s.io/utils v0.0.0-20261023123148-ca04ba58ecab // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

// Command nodelet is a Kubernetes node agent: a reimplementation of the kubelet.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/nodelet/nodelet/agent"
	"github.com/nodelet/nodelet/config"
)

func main() {
	opts, err := config.Load(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "nodelet: %v\n", err)
		os.Exit(1)
	}
	if opts.ShowVersion {
		fmt.Println("nodelet " + agent.Version)
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := agent.Run(ctx, opts); err != nil {
		klog.ErrorS(err, "nodelet stopped with an error")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

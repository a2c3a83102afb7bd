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
	args := os.Args[1:]
	// `nodelet shutdown plan [flags]` prints what a node shutdown would do, with the
	// same flags and config files as the daemon.
	plan := len(args) >= 2 && args[0] == "shutdown" && args[1] == "plan"
	if plan {
		args = args[2:]
	}
	opts, err := config.Load(args)
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
	if plan {
		if err := agent.PrintShutdownPlan(ctx, os.Stdout, opts); err != nil {
			fmt.Fprintf(os.Stderr, "nodelet shutdown plan: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := agent.Run(ctx, opts); err != nil {
		klog.ErrorS(err, "nodelet stopped with an error")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

package node

import (
	"context"
	"fmt"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
)

// syncLease renews the node Lease once: an optimistic Update from the last lease we saw (no
// GET), falling back to GET/Create with back-off and a few re-GET'ing updates.
func (c *Controller) syncLease(ctx context.Context) {
	if c.heartbeat == nil {
		return
	}
	if c.latestLease != nil {
		lease, err := c.updateLease(ctx, c.latestLease)
		if err == nil {
			c.latestLease = lease
			return
		}
		klog.InfoS("Failed to renew node lease from the cached copy, will read it again", "node", c.cfg.NodeName, "err", err)
	}
	lease, created := c.backoffEnsureLease(ctx)
	if lease == nil {
		return // ctx done
	}
	c.latestLease = lease
	if created {
		return // a fresh lease already carries this renewal
	}
	if err := c.retryUpdateLease(ctx, lease); err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "Unable to renew node lease", "node", c.cfg.NodeName)
	}
}

func (c *Controller) leases() leaseClient {
	return c.heartbeat.CoordinationV1().Leases(nodeLeaseNamespace)
}

type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

func (c *Controller) updateLease(ctx context.Context, base *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	lease, err := c.leases().Update(ctx, c.newLease(base), metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("updating lease %s/%s: %w", nodeLeaseNamespace, c.cfg.NodeName, err)
	}
	return lease, nil
}

// backoffEnsureLease GETs the lease, creating it when missing, retrying with back-off until
// it succeeds or ctx ends (then it returns nil). created tells whether we made it.
func (c *Controller) backoffEnsureLease(ctx context.Context) (lease *coordinationv1.Lease, created bool) {
	backoff := initialBackoff
	for {
		lease, created, err := c.ensureLease(ctx)
		if err == nil {
			return lease, created
		}
		klog.ErrorS(err, "Failed to ensure node lease exists, will retry", "node", c.cfg.NodeName, "retryIn", backoff)
		if !c.sleep(ctx, backoff) {
			return nil, false
		}
		backoff = nextBackoff(backoff)
	}
}

func (c *Controller) ensureLease(ctx context.Context) (*coordinationv1.Lease, bool, error) {
	lease, err := c.leases().Get(ctx, c.cfg.NodeName, metav1.GetOptions{})
	if err == nil {
		return lease, false, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, false, fmt.Errorf("getting lease %s/%s: %w", nodeLeaseNamespace, c.cfg.NodeName, err)
	}
	lease, err = c.leases().Create(ctx, c.newLease(nil), metav1.CreateOptions{})
	if err != nil {
		return nil, false, fmt.Errorf("creating lease %s/%s: %w", nodeLeaseNamespace, c.cfg.NodeName, err)
	}
	return lease, true, nil
}

// retryUpdateLease updates from base up to maxLeaseUpdateRetries times; a conflict means
// someone else wrote the lease, so it is read again first.
func (c *Controller) retryUpdateLease(ctx context.Context, base *coordinationv1.Lease) error {
	var err error
	for i := range maxLeaseUpdateRetries {
		var lease *coordinationv1.Lease
		lease, err = c.updateLease(ctx, base)
		if err == nil {
			c.latestLease = lease
			return nil
		}
		if ctx.Err() != nil {
			return err
		}
		klog.ErrorS(err, "Failed to update node lease", "node", c.cfg.NodeName, "attempt", i+1)
		if apierrors.IsConflict(err) {
			if base = c.latestLeaseAfterConflict(ctx); base == nil {
				return err
			}
			continue
		}
		if i > 0 && c.onHeartbeatFailure != nil {
			c.onHeartbeatFailure()
		}
	}
	return fmt.Errorf("renewing lease: %d attempts failed, last: %w", maxLeaseUpdateRetries, err)
}

func (c *Controller) latestLeaseAfterConflict(ctx context.Context) *coordinationv1.Lease {
	lease, _ := c.backoffEnsureLease(ctx)
	if lease != nil {
		c.latestLease = lease
	}
	return lease
}

// newLease is base (or a fresh lease) held by this node, renewed now, owned by the Node
// once its UID is known, so it is garbage-collected with the Node.
func (c *Controller) newLease(base *coordinationv1.Lease) *coordinationv1.Lease {
	var lease *coordinationv1.Lease
	if base == nil {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: c.cfg.NodeName, Namespace: nodeLeaseNamespace}}
	} else {
		lease = base.DeepCopy()
	}
	holder := c.cfg.NodeName
	duration := int32(c.leaseDuration.Seconds())
	renew := metav1.NewMicroTime(c.clk.Now())
	lease.Spec.HolderIdentity = &holder
	lease.Spec.LeaseDurationSeconds = &duration
	lease.Spec.RenewTime = &renew
	if len(lease.OwnerReferences) == 0 {
		if n := c.Node(); n != nil && n.UID != "" {
			lease.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: "v1",
				Kind:       "Node",
				Name:       c.cfg.NodeName,
				UID:        n.UID,
			}}
		}
	}
	return lease
}

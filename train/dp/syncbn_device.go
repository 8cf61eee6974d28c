package dp

import (
	"context"
	"fmt"

	"github.com/gdist/gdist/gpu/devmodel"
	"github.com/gdist/gdist/syncbn"
	"github.com/gdist/gdist/train"
	"github.com/gdist/gdist/train/internal/rankdev"
)

// deviceSyncBN is the placed model's SyncBatchNorm hook (devmodel's
// Config.SyncBN) for -syncbn, where train has converted the host model's
// batch norms (syncbn.Convert; nil otherwise). With a Comm that takes
// device buffers (-backend nccl), the statistics stay on the device:
// syncbn.Device over the training Comm, each collective tied to the
// model's stream by events, the host never waiting (the Comm's order
// puts them among the gradient buckets, as PyTorch's SyncBatchNorm and
// DDP share a process group; a failed one fails the Comm, and so the
// step's gradient collectives). With a host backend, through host memory:
// devmodel.HostSyncBN over the host model's hook (syncbn's Syncer on its
// duplicate of the Comm). Both give the same bits (at 2 ranks the
// backward sums are in the same order too; TestDeviceSyncBN). The
// strategy's Close frees the device's memory and events for it
// (closeSyncBN).
func (b *deviceBase) deviceSyncBN(ctx context.Context, s train.Setup, first int) (devmodel.SyncBNFunc, error) {
	if !s.Config.SyncBN || len(s.Model.BNs) == 0 || s.Model.BNs[0].Sync == nil {
		return nil, nil
	}
	dev, direct := rankdev.Device(s.Comm, first)
	if !direct {
		return devmodel.HostSyncBN(ctx, s.Model.BNs[0].Sync), nil // holds nothing to free
	}
	d, err := syncbn.NewDevice(s.Comm, dev)
	if err != nil {
		return nil, fmt.Errorf("train: rank %d: -syncbn on the device: %w", s.Comm.Rank(), err)
	}
	rank := s.Comm.Rank()
	b.syncBNClose = func() error {
		// within the run's context, as the hook's collectives; after
		// the model's Close, whose stream waited for them all
		if err := d.Close(ctx); err != nil {
			return fmt.Errorf("train: rank %d: -syncbn on the device: %w", rank, err)
		}
		return nil
	}
	return d.Hook(ctx), nil
}

// closeSyncBN frees the device's memory and events for -syncbn (the
// strategy's Close, after the model's; and where the strategy is not
// made after all). It returns a failed collective's error, if any.
func (b *deviceBase) closeSyncBN() error {
	f := b.syncBNClose
	b.syncBNClose = nil
	if f == nil {
		return nil
	}
	return f()
}

//go:build cgo

package nccl

import (
	"errors"
	"fmt"
	"time"

	"github.com/gdist/gdist/comm"
)

// namePeer turns NCCL's asynchronous error for a lost peer into one that
// names the rank, where that can be known. Over sockets (two ranks posing
// as hosts of their own, or hosts without InfiniBand) NCCL reports a
// killed peer as ncclRemoteError ("remote process exited or there was a
// network error", seen on an H200 with NCCL 2.28) or ncclSystemError, but
// not which rank it was. In a world Comm of two ranks it can only be the
// other one. In a larger world Comm the heartbeats name it within the peer
// deadline: namePeer waits that long for them (or for a failure notice)
// and returns nil when they failed the Comm first; otherwise it returns
// err unchanged. Other errors are returned at once.
func (c *Comm) namePeer(err error) error {
	var ne *Error
	if !errors.As(err, &ne) || ne.Code != ncclRemoteError && ne.Code != ncclSystemError {
		return err
	}
	if c.hbStop == nil { // no heartbeats: a sub-group, a p2p channel, or no store
		return err
	}
	if c.size == 2 {
		return &comm.PeerError{Rank: 1 - c.rank, Err: fmt.Errorf("%w: NCCL lost the connection to it: %v", comm.ErrPeerLost, err)}
	}
	deadline := time.Now().Add(c.opts.PeerDeadline() + time.Second)
	for time.Now().Before(deadline) {
		c.mu.Lock()
		failed := c.failed != nil
		c.mu.Unlock()
		if failed {
			return nil
		}
		select {
		case <-c.life.Done():
			return err
		case <-time.After(20 * time.Millisecond):
		}
	}
	return err
}

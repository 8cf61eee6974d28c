package mailbox

import (
	"fmt"

	"github.com/gdist/gdist/comm"
)

// The errors of a link to a peer, which the transports share: each names
// the peer's world rank (a *comm.PeerError) and wraps the comm sentinel a
// caller tests with errors.Is.

// PeerClosedErr is the error of operations on a link whose peer said
// goodbye; reason is the failure the peer gave for closing, if any.
func PeerClosedErr(rank int, reason string) error {
	if reason != "" {
		return &comm.PeerError{Rank: rank, Err: fmt.Errorf("closed its comm after a failure (%s): %w", reason, comm.ErrClosed)}
	}
	return &comm.PeerError{Rank: rank, Err: fmt.Errorf("closed its comm: %w", comm.ErrClosed)}
}

// LostErr says that the link to rank was lost (comm.ErrPeerLost).
func LostErr(rank int, format string, args ...any) error {
	return &comm.PeerError{Rank: rank, Err: fmt.Errorf("%w: %s", comm.ErrPeerLost, fmt.Sprintf(format, args...))}
}

// ProtoErr says that rank sent what the protocol does not allow
// (comm.ErrProtocol).
func ProtoErr(rank int, format string, args ...any) error {
	return &comm.PeerError{Rank: rank, Err: fmt.Errorf("%w: %s", comm.ErrProtocol, fmt.Sprintf(format, args...))}
}

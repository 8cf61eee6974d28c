package algo

// NewMemWorld builds n Comms over an in-memory test transport; with payload
// the transport is a PayloadReceiver that delivers in random pieces.
var NewMemWorld = newMemWorld

// NewMemEagerWorld builds n Comms over an in-memory test transport that is
// a PayloadReceiver and an EagerSender (sends of up to 4 KiB).
var NewMemEagerWorld = newMemEagerWorld

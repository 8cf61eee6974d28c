package algo

// NewMemWorld builds n Comms over an in-memory test transport; with payload
// the transport is a PayloadReceiver that delivers in random pieces.
var NewMemWorld = newMemWorld

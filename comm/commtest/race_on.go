//go:build race

package commtest

// Race is true in a build with the race detector, whose sync.Pool drops
// items at random (so allocation counts mean nothing there).
const Race = true

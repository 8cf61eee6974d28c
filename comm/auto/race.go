//go:build race

package auto

import "syscall"

// raceReleaseIO tells the race detector that what this goroutine did so far
// happens before what a TCP peer does after reading the next frame. The
// net package writes payload frames with writev, which (unlike
// syscall.Write) does not release the detector's I/O sync object that
// syscall.Read acquires; without this, a message that goes one hop over
// shared memory (annotated by comm/shm) and the next over TCP looks
// unordered to the detector. A write to an invalid descriptor does the
// release and nothing else.
func raceReleaseIO() { syscall.Write(-1, nil) }

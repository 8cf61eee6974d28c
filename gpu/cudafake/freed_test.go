package cudafake_test

import (
	"testing"
	"time"

	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

// FreedUses counts work that names device memory already freed (a copy,
// a memset; each also fails), and not work queued before the free: the
// fake's cudaFree, like CUDA's, waits for the device first, so a memset
// queued on a slowed stream before the free completes on live memory.
func TestFreedUses(t *testing.T) {
	cudafake.RequireFake(t)
	s := cudafake.NewStream(t, 0, true)
	p, err := cuda.Malloc(0, 64)
	if err != nil {
		t.Fatal(err)
	}
	n0 := cudafake.FreedUses(t)
	cudafake.StreamDelay(t, s, 50*time.Millisecond)
	if err := s.MemsetAsync(p, 1, 64); err != nil {
		t.Fatal(err)
	}
	if err := cuda.Free(0, p); err != nil { // waits for the memset
		t.Fatal(err)
	}
	cudafake.StreamDelay(t, s, 0)
	if n := cudafake.FreedUses(t) - n0; n != 0 {
		t.Fatalf("a memset queued before the free counted %d uses after free", n)
	}
	if err := cuda.Memset(0, p, 0, 64); err == nil {
		t.Error("a memset of freed memory succeeded")
	}
	b := make([]byte, 8)
	if err := cuda.CopyDtoH(0, b, p+8); err == nil {
		t.Error("a copy from freed memory succeeded")
	}
	if n := cudafake.FreedUses(t) - n0; n != 2 {
		t.Errorf("%d uses after free counted, want 2 (a memset and a copy)", n)
	}
}

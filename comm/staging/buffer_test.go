package staging_test

import (
	"errors"
	"testing"

	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/comm/staging"
	"github.com/gdist/gdist/gpu/cuda"
	"github.com/gdist/gdist/gpu/cudafake"
)

func TestCopyRoundTrip(t *testing.T) {
	cudafake.RequireCUDA(t)
	host := make([]float32, 1000)
	for i := range host {
		host[i] = float32(i) * 0.5
	}
	d, err := staging.Upload(0, comm.FromSlice(host))
	if err != nil {
		t.Fatal(err)
	}
	defer staging.FreeBuffer(d)
	if !d.IsDevice() || d.Len() != 1000 || d.DType() != comm.Float32 {
		t.Fatalf("Upload gave %v", d)
	}
	if err := staging.CheckDevice(d); err != nil {
		t.Fatal(err)
	}
	d2, err := staging.NewBuffer(0, comm.Float32, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer staging.FreeBuffer(d2)
	if err := staging.Copy(d2, d); err != nil {
		t.Fatal(err)
	}
	back := make([]float32, 1000)
	if err := staging.Copy(comm.FromSlice(back), d2); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != host[i] {
			t.Fatalf("element %d: %v, want %v", i, back[i], host[i])
		}
	}
	// A slice of a device buffer is a device buffer at an offset.
	part := make([]float32, 10)
	if err := staging.Copy(comm.FromSlice(part), d2.Slice(500, 510)); err != nil {
		t.Fatal(err)
	}
	if part[0] != 250 || part[9] != 254.5 {
		t.Fatalf("slice copy: %v", part)
	}
	ptr, _ := d2.Device()
	if err := cuda.Memset(0, ptr, 0, 4000); err != nil {
		t.Fatal(err)
	}
	if err := staging.Copy(comm.FromSlice(back), d2); err != nil {
		t.Fatal(err)
	}
	for i, v := range back {
		if v != 0 {
			t.Fatalf("after Memset element %d = %v", i, v)
		}
	}
	if err := staging.Copy(comm.FromSlice(back[:3]), d2); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("Copy with different lengths: %v", err)
	}
}

func TestCheckDevice(t *testing.T) {
	cudafake.RequireCUDA(t)
	p := cudafake.Malloc(t, 0, 64)
	if err := staging.CheckDevice(comm.DeviceBuffer(p, 0, comm.Float32, 16)); err != nil {
		t.Fatal(err)
	}
	bad := comm.DeviceBuffer(0x1000, 0, comm.Float32, 4)
	if err := staging.CheckDevice(bad); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("CheckDevice(0x1000) = %v", err)
	}
	if err := staging.CheckDevice(comm.DeviceBuffer(p, 99, comm.Float32, 4)); !errors.Is(err, comm.ErrInvalidArgument) {
		t.Fatalf("CheckDevice(device 99) = %v", err)
	}
}

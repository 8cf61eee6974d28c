package staging

import (
	"github.com/gdist/gdist/comm"
	"github.com/gdist/gdist/gpu/cuda"
)

// Device buffers as comm.Buffers: the adapter between package gpu/cuda,
// which knows nothing of comm (it sits below it), and comm's Buffer.

// NewBuffer allocates n elements of dt on device and returns a comm.Buffer
// that describes them (comm.DeviceBuffer). The memory is not initialized.
// Free it with FreeBuffer. A zero-length buffer still gets a (one-element)
// allocation, so that it is a device buffer.
func NewBuffer(device int, dt comm.DType, n int) (comm.Buffer, error) {
	if !dt.Valid() {
		return comm.Buffer{}, comm.InvalidArgf("staging: NewBuffer: unsupported dtype %v", dt)
	}
	if n < 0 {
		return comm.Buffer{}, comm.InvalidArgf("staging: NewBuffer: negative length %d", n)
	}
	p, err := cuda.Malloc(device, max(n, 1)*dt.Size())
	if err != nil {
		return comm.Buffer{}, err
	}
	return comm.DeviceBuffer(p, device, dt, n), nil
}

// FreeBuffer releases a buffer from NewBuffer.
func FreeBuffer(b comm.Buffer) error {
	if !b.IsDevice() {
		return comm.InvalidArgf("staging: FreeBuffer of %v, which is not device memory", b)
	}
	ptr, dev := b.Device()
	return cuda.Free(dev, ptr)
}

// Copy copies src into dst, each host or device memory, with cudaMemcpy on
// the legacy default stream. A copy to the host returns once the data is in
// dst. A copy to the device is asynchronous to the host: it returns once
// src may be reused, and work queued later on the default stream (or on
// streams that wait for it, or a later copy to the host) sees the data.
// dst and src must have the same dtype and length.
func Copy(dst, src comm.Buffer) error {
	if dst.DType() != src.DType() || dst.Len() != src.Len() {
		return comm.InvalidArgf("staging: Copy from %v to %v: dtypes and lengths must match", src, dst)
	}
	n := dst.Bytes()
	if n == 0 {
		return nil
	}
	switch {
	case dst.IsDevice() && src.IsDevice():
		dp, dd := dst.Device()
		sp, _ := src.Device()
		return cuda.CopyDtoD(dd, dp, sp, n)
	case dst.IsDevice():
		dp, dd := dst.Device()
		return cuda.CopyHtoD(dd, dp, src.Host())
	case src.IsDevice():
		sp, sd := src.Device()
		return cuda.CopyDtoH(sd, dst.Host(), sp)
	}
	copy(dst.Host(), src.Host())
	return nil
}

// Upload returns a new device buffer on device holding a copy of host
// buffer src (free it with FreeBuffer).
func Upload(device int, src comm.Buffer) (comm.Buffer, error) {
	if src.IsDevice() {
		return comm.Buffer{}, comm.InvalidArgf("staging: Upload of %v, which is already device memory", src)
	}
	d, err := NewBuffer(device, src.DType(), src.Len())
	if err != nil {
		return comm.Buffer{}, err
	}
	if err := Copy(d, src); err != nil {
		FreeBuffer(d)
		return comm.Buffer{}, err
	}
	return d, nil
}

// CheckDevice returns an error wrapping comm.ErrInvalidArgument unless b is
// device memory that CUDA knows, on the device b names.
func CheckDevice(b comm.Buffer) error {
	if !b.IsDevice() {
		return comm.InvalidArgf("%v is not device memory", b)
	}
	ptr, dev := b.Device()
	if n := cuda.DeviceCount(); dev < 0 || dev >= n {
		return comm.InvalidArgf("%v names device %d, but there are %d CUDA device(s)", b, dev, n)
	}
	typ, pdev, err := cuda.PointerInfo(dev, ptr)
	if err != nil {
		return comm.InvalidArgf("%v at %#x: %v", b, ptr, err)
	}
	switch typ {
	case cuda.DeviceMemory:
		if pdev != dev {
			return comm.InvalidArgf("%v at %#x: the memory is on cuda:%d", b, ptr, pdev)
		}
	case cuda.Managed:
	default:
		return comm.InvalidArgf("%v at %#x is %v, not device memory", b, ptr, typ)
	}
	return nil
}

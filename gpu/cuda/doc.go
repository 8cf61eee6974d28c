// Package cuda is gdist's small window on the CUDA runtime: device memory
// (Malloc, Free, NewBuffer), pinned host memory (HostAlloc), copies between
// them, streams, events and a caching Pool. It exists so that the GPU path
// builds and its tests run on machines with no CUDA at all.
//
// # Loading
//
// Nothing links against CUDA. The first call loads the runtime library with
// dlopen: the file named by $GDIST_CUDART_PATH, or else libcudart.so,
// libcudart.so.12, libcudart.so.11.0 from the usual library path. The C
// prototypes of the two dozen functions used are re-declared in shim.h (with
// the enum values they need, and their meaning), so building needs only a C
// compiler and libc, never the CUDA headers. gorgonia's own CUDA build tag
// is not used: it needs headers, generated kernels and a patched
// gorgonia.org/cu.
//
// Available reports whether a runtime was loaded and sees a device, and if
// not, why (which libraries were tried, whether the NVIDIA driver is there,
// what cudaGetDeviceCount said). Every other function returns an error
// wrapping ErrUnavailable when CUDA is not usable, and a *Error naming the
// call and the runtime's error string when a call fails.
//
// # Threads and devices
//
// The current device of the CUDA runtime is per OS thread, and goroutines
// move between threads, so every call that concerns a device takes the
// device ordinal and makes it current inside the same C call.
//
// # Tests
//
// The tests run against the real runtime when it sees a device, and
// otherwise against a fake runtime (package gpu/cudafake) that keeps
// "device" memory at addresses no host code can dereference and checks
// every copy's bounds, kinds and pinning.
package cuda

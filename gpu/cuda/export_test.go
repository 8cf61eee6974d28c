package cuda

// For the ABI check (realabi_test.go): the Go constants that must equal the
// real header's values.
var GoValues = map[string]int{
	"HostToHost":     int(HostToHost),
	"HostToDevice":   int(HostToDevice),
	"DeviceToHost":   int(DeviceToHost),
	"DeviceToDevice": int(DeviceToDevice),
	"CopyDefault":    int(CopyDefault),
	"Unregistered":   int(Unregistered),
	"HostPinned":     int(HostPinned),
	"DeviceMemory":   int(DeviceMemory),
	"Managed":        int(Managed),
}

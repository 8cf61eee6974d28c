// Package host identifies the host a rank runs on, for the transports that
// must tell ranks of one host from ranks of others (shm, tcp, auto): one
// rule, and the one place that reads GDIST_HOST_ID.
package host

import (
	"os"
	"strings"
)

// EnvID names the variable that overrides ID (tests fake a multi-host job
// on one machine with it).
const EnvID = "GDIST_HOST_ID"

// ID identifies this host: $GDIST_HOST_ID if set, else the hostname and
// the kernel's boot id, so that two containers or two boots never look
// alike.
func ID() string {
	if v := os.Getenv(EnvID); v != "" {
		return v
	}
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return name + "/" + strings.TrimSpace(string(boot))
}

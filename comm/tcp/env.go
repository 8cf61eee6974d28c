package tcp

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gdist/gdist/comm"
)

// withEnv is the one place the tcp transport reads its environment
// variables: it fills the fields of o left empty from EnvHost (Host),
// EnvSocketIfname (SocketIfname), EnvConnectTimeout (ConnectTimeout: a Go
// duration or a number of seconds; anything else is an error) and
// EnvCongestion (Congestion). GDIST_HOST_ID, the host's identity, is
// comm/internal/host's; GDIST_CHUNK_BYTES and the other tuning variables
// are comm/algo's (TuningFromEnv).
func (o Options) withEnv() (Options, error) {
	if o.Host == "" {
		o.Host = os.Getenv(EnvHost)
	}
	if o.SocketIfname == "" {
		o.SocketIfname = os.Getenv(EnvSocketIfname)
	}
	if o.ConnectTimeout <= 0 {
		if v := strings.TrimSpace(os.Getenv(EnvConnectTimeout)); v != "" {
			d, err := parseTimeout(v)
			if err != nil {
				return o, err
			}
			o.ConnectTimeout = d
		}
	}
	if o.Congestion == "" {
		o.Congestion = strings.TrimSpace(os.Getenv(EnvCongestion))
	}
	return o, nil
}

// parseTimeout reads EnvConnectTimeout's value v.
func parseTimeout(v string) (time.Duration, error) {
	if s, err := strconv.ParseFloat(v, 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second)), nil
	}
	if d, err := time.ParseDuration(v); err == nil && d > 0 {
		return d, nil
	}
	return 0, comm.InvalidArgf("tcp: %s=%q is neither a duration (\"45s\") nor a number of seconds", EnvConnectTimeout, v)
}

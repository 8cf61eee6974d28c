package launch

import (
	"fmt"
	"os"
	"strings"
)

// shareGPUEnv is what a worker needs to share a GPU with other NCCL ranks
// when the job asks for it with GDIST_NCCL_SHARE_GPU=1 (see package
// comm/nccl): NCCL refuses two ranks of one host on one GPU, so each worker
// poses as its own host, with an NCCL_HOSTID of its own (this host's name
// and the global rank), and, on one node, NCCL_SOCKET_IFNAME=lo unless it
// is set. env is the worker's environment so far (the last value of a
// variable wins); nil when sharing was not asked for.
func shareGPUEnv(env []string, rank int, multiNode bool) []string {
	if strings.TrimSpace(lookupEnv(env, "GDIST_NCCL_SHARE_GPU")) != "1" {
		return nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	out := []string{fmt.Sprintf("NCCL_HOSTID=%s-gdist-rank%d", host, rank)}
	if !multiNode && lookupEnv(env, "NCCL_SOCKET_IFNAME") == "" {
		out = append(out, "NCCL_SOCKET_IFNAME=lo")
	}
	return out
}

// lookupEnv is the value of key in env ("KEY=value" entries, the last one
// winning, as os/exec does), or "".
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}

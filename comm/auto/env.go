package auto

import "os"

// env is the auto backend's environment, read in one place (readEnv) when
// the backend is built and passed down: the transports it builds read
// theirs likewise (comm/shm, comm/tcp env.go), and the tuning is
// comm/algo's.
type env struct {
	noNCCL bool // EnvNCCL is "0": keep off NCCL
	debug  bool // GDIST_DEBUG is set: say on stderr why NCCL is not used
}

func readEnv() env {
	return env{noNCCL: os.Getenv(EnvNCCL) == "0", debug: os.Getenv("GDIST_DEBUG") != ""}
}

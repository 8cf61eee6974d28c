package rendezvous

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gdist/gdist/comm"
)

// refusalGrace is how long the ranks waiting for others to join wait
// after the store refused a wrong token before they fail, as long as no
// rank joins meanwhile.
const refusalGrace = 3 * time.Second

// Store keys of the join.
const (
	jobKey      = "rdzv/job"   // "job=<id> size=<n> from=<addr>" of the first rank to join
	rankKeyPref = "rdzv/rank/" // + rank: the claim of the process that joined as that rank
)

func rankKey(r int) string { return rankKeyPref + strconv.Itoa(r) }

// claim identifies the process that joined as a rank.
type claim struct {
	job, host, from, nonce string
	size, pid              int
}

func (c claim) encode() []byte {
	return fmt.Appendf(nil, "job=%s\nsize=%d\npid=%d\nhost=%s\nfrom=%s\nnonce=%s", c.job, c.size, c.pid, c.host, c.from, c.nonce)
}

func decodeClaim(b []byte) claim {
	var c claim
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, "=")
		switch k {
		case "job":
			c.job = v
		case "size":
			c.size, _ = strconv.Atoi(v)
		case "pid":
			c.pid, _ = strconv.Atoi(v)
		case "host":
			c.host = v
		case "from":
			c.from = v
		case "nonce":
			c.nonce = v
		}
	}
	return c
}

func (c claim) String() string {
	s := fmt.Sprintf("pid %d on %s, from %s", c.pid, c.host, c.from)
	if c.job != "" {
		s += ", job " + c.job
	}
	return s
}

func jobDesc(job string) string {
	if job == "" {
		return "no job id"
	}
	return "job id " + job
}

// anotherJob is the fix named when two jobs meet on one store.
const anotherJob = "another job is probably using the same MASTER_PORT: give each job its own MASTER_PORT " +
	"(or GDIST_STORE_PORT), or set GDIST_TOKEN (or GDIST_JOB_ID) to a value of its own on every rank of each job"

// join makes this rank a member of the job served by rank 0's store: it
// checks that the store's job has this rank's job id and world size,
// claims its rank (refusing a second process claiming a taken rank: another
// job on the same port), and waits for every rank to join. It fails early
// if the store refused a wrong token and no rank joined for refusalGrace
// since, and after the join timeout (ctx) naming the missing ranks.
func join(ctx context.Context, st *Client, env Env, storeAddr string) error {
	who := fmt.Sprintf("rendezvous: rank %d of %d", env.Rank, env.Size)
	host, _ := os.Hostname()
	nonce := make([]byte, 8)
	rand.Read(nonce)
	me := claim{job: env.JobID, size: env.Size, pid: os.Getpid(), host: host,
		from: st.LocalAddr().String(), nonce: hex.EncodeToString(nonce)}

	job := fmt.Appendf(nil, "job=%s size=%d from=%s", env.JobID, env.Size, me.from)
	got, err := st.CompareAndSet(ctx, jobKey, nil, job)
	if err != nil {
		return fmt.Errorf("%s: joining the store at %s: %w", who, storeAddr, err)
	}
	if !bytes.Equal(got, job) {
		var oj, ofrom string
		var osize int
		fmt.Sscanf(strings.Replace(string(got), "job= ", "job=- ", 1), "job=%s size=%d from=%s", &oj, &osize, &ofrom)
		if oj == "-" {
			oj = ""
		}
		if oj != env.JobID || osize != env.Size {
			return fmt.Errorf("%w: %s: the store at %s serves a job of world size %d with %s (first joined from %s), but this rank has world size %d with %s: %s",
				comm.ErrInvalidArgument, who, storeAddr, osize, jobDesc(oj), ofrom, env.Size, jobDesc(env.JobID), anotherJob)
		}
	}

	mine := me.encode()
	got, err = st.CompareAndSet(ctx, rankKey(env.Rank), nil, mine)
	if err != nil {
		return fmt.Errorf("%s: joining the store at %s: %w", who, storeAddr, err)
	}
	if !bytes.Equal(got, mine) {
		other := decodeClaim(got)
		return fmt.Errorf("%w: %s: refused by the store at %s: rank %d already joined it (%s); this process (%s) is a second rank %d, so %s",
			comm.ErrInvalidArgument, who, storeAddr, env.Rank, other, me, env.Rank, anotherJob)
	}

	keys := make([]string, env.Size)
	for r := range keys {
		keys[r] = rankKey(r)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	done := make(chan error, 1)
	go func() { done <- st.Wait(wctx, keys...) }()
	refused := make(chan string, 1)
	go func() {
		if v, err := st.Get(wctx, RefusedKey); err == nil {
			refused <- string(v)
		}
	}()
	var grace <-chan time.Time
	var refusal string
	lastMissing := 0 // ranks missing when the refusal was seen, then at each grace check
	for {
		select {
		case err := <-done:
			if err == nil {
				return nil
			}
			if ctx.Err() == nil {
				return fmt.Errorf("%s: waiting for the other ranks to join the store at %s: %w", who, storeAddr, err)
			}
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			missing := missingRanks(pctx, st, env.Size)
			cancel()
			d := env.JoinTimeout
			if d <= 0 {
				d = DefaultJoinTimeout
			}
			return fmt.Errorf("%s: rank(s) %v did not join the store at %s within %v (GDIST_JOIN_TIMEOUT): %w; check that they were started with the same MASTER_ADDR and MASTER_PORT and can reach it",
				who, missing, storeAddr, d, timeoutErr(ctx.Err()))
		case refusal = <-refused:
			lastMissing = len(missingRanks(ctx, st, env.Size))
			grace = time.After(refusalGrace)
		case <-grace:
			missing := missingRanks(ctx, st, env.Size)
			if len(missing) == 0 {
				grace = nil // done comes next
				continue
			}
			if len(missing) < lastMissing { // someone joined: give the rest time
				lastMissing = len(missing)
				grace = time.After(refusalGrace)
				continue
			}
			return fmt.Errorf("%w: %s: the store at %s refused a connection %s; rank(s) %v have not joined since: every rank of a job needs the same GDIST_TOKEN (set it to one value on every rank, or on none)",
				comm.ErrAuth, who, storeAddr, refusal, missing)
		}
	}
}

// missingRanks lists the ranks that have not claimed their rank key; a
// CompareAndSet whose old value no claim has reads a key without setting it.
func missingRanks(ctx context.Context, st *Client, size int) []int {
	probe := []byte("\x00probe")
	var missing []int
	for r := range size {
		v, err := st.CompareAndSet(ctx, rankKey(r), probe, probe)
		if err == nil && len(v) == 0 {
			missing = append(missing, r)
		}
	}
	return missing
}

func timeoutErr(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w (%w)", comm.ErrTimeout, err)
	}
	return err
}

// serveStore starts rank 0's store on the address it was given:
// MASTER_ADDR if it is an IP address of this host (loopback included),
// else all interfaces (a host name, or an address that is not local, such
// as a NAT address). It returns the address rank 0 dials: one the other
// hosts reach too where it can tell, so that the local address of rank 0's
// connection is one they can reach (the tcp backend advertises it).
func serveStore(env Env, logf func(string, ...any)) (*Server, string, error) {
	port := strconv.Itoa(env.StorePort)
	host := env.MasterAddr
	if host == "localhost" {
		host = "127.0.0.1"
	}
	inUse := func(addr string, err error) error {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("rendezvous: rank 0: cannot serve the store on %s: %w; another process (another job?) uses port %s: give each job its own MASTER_PORT (or GDIST_STORE_PORT)", addr, err, port)
		}
		return fmt.Errorf("rendezvous: rank 0: cannot serve the store on %s: %w", addr, err)
	}
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil {
		addr := net.JoinHostPort(ip.String(), port)
		srv, err := NewServer(addr, env.Token, logf)
		if err == nil {
			return srv, addr, nil
		}
		if !errors.Is(err, syscall.EADDRNOTAVAIL) {
			return nil, "", inUse(addr, err)
		}
		logf("rendezvous: rank 0: MASTER_ADDR=%s is not an address of this host; serving the store on all interfaces", env.MasterAddr)
		srv, err = NewServer(":"+port, env.Token, logf)
		if err != nil {
			return nil, "", inUse(":"+port, err)
		}
		return srv, net.JoinHostPort("127.0.0.1", port), nil
	}
	srv, err := NewServer(":"+port, env.Token, logf)
	if err != nil {
		return nil, "", inUse(":"+port, err)
	}
	return srv, net.JoinHostPort(host, port), nil
}

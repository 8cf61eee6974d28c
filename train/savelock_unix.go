//go:build unix

package train

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"
)

// lockSave takes the lock of the -save path for this job: an exclusive
// flock on <path>.lock, which names the holder (pid, host, since when)
// for the error of a second job. Two jobs saving to one path would
// overwrite each other's checkpoints and remove each other's temporary
// files mid-save (a save first removes the temporary files an earlier
// crashed save left). The kernel releases the lock when the holder's
// process ends, however it ends (a lock file left behind by a crash
// locks nothing); release removes the file and unlocks. A job that
// locked a file just removed by the job before it (the lock file is
// not the one at the path any more) locks the new one instead.
func lockSave(path string) (release func(), err error) {
	lp := path + ".lock"
	for {
		f, err := os.OpenFile(lp, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("-save %s: cannot create its lock file %s: %v", path, lp, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(lp)
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				who := strings.TrimSpace(string(holder))
				if who == "" {
					who = "a process that has not said which"
				}
				return nil, fmt.Errorf("-save %s is in use by another job (%s, holding %s): two jobs saving to one path would overwrite and delete each other's checkpoints; give this job its own -save path, or wait until that job ends",
					path, who, lp)
			}
			return nil, fmt.Errorf("-save %s: locking %s: %v", path, lp, err)
		}
		fst, err1 := f.Stat()
		pst, err2 := os.Stat(lp)
		if err1 != nil || err2 != nil || !os.SameFile(fst, pst) {
			f.Close() // removed by its holder meanwhile: lock the new one
			continue
		}
		host, _ := os.Hostname()
		f.Truncate(0)
		f.WriteAt([]byte(fmt.Sprintf("pid %d on host %s, since %s\n", os.Getpid(), host, time.Now().Format(time.DateTime))), 0)
		return func() {
			os.Remove(lp) // while locked: see above
			f.Close()
		}, nil
	}
}

// diskFree is the space free to this user on the file system of dir.
func diskFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}

package dl

import (
	"strings"
	"testing"
)

func TestLazy(t *testing.T) {
	n := 0
	l := Lazy[int]{Load: func() *int { n++; v := n; return &v }}
	if *l.Get() != 1 || *l.Get() != 1 || n != 1 {
		t.Fatalf("Get loaded %d times", n)
	}
	l.Reload()
	if *l.Get() != 2 {
		t.Fatalf("Reload did not replace the state: %d", *l.Get())
	}
}

func TestCandidatesAndMessage(t *testing.T) {
	const env = "GDIST_DL_TEST_LIBRARY"
	t.Setenv(env, "")
	if c := Candidates(env, []string{"a.so", "b.so"}); len(c) != 2 {
		t.Fatalf("defaults: %v", c)
	}
	msg := Unloadable("X", []string{"a.so: no", "b.so: no"}, env, "an x.so")
	if !strings.Contains(msg, "cannot load X (a.so: no; b.so: no); set "+env+" to an x.so") {
		t.Fatalf("message: %s", msg)
	}
	t.Setenv(env, "/opt/x.so")
	if c := Candidates(env, []string{"a.so"}); len(c) != 1 || c[0] != "/opt/x.so" {
		t.Fatalf("env: %v", c)
	}
	if msg := Unloadable("X", []string{"/opt/x.so: no"}, env, "an x.so"); strings.Contains(msg, "set ") {
		t.Fatalf("suggests setting %s although it is set: %s", env, msg)
	}
}

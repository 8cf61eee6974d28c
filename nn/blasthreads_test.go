package nn

import "testing"

func TestChooseBLASThreads(t *testing.T) {
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	cases := []struct {
		name               string
		cores, local, flag int
		getenv             func(string) string
		want               int
		from               string
	}{
		{"2 ranks on 2 cores", 2, 2, 0, env(), 1, "default"},
		{"1 rank on 2 cores", 2, 1, 0, env(), 2, "default"},
		{"4 ranks on 16 cores", 16, 4, 0, env(), 4, "default"},
		{"uneven: 3 ranks on 8 cores", 8, 3, 0, env(), 2, "default"},
		{"more ranks than cores", 2, 8, 0, env(), 1, "default"},
		{"no environment", 8, 2, 0, nil, 4, "default"},
		{"unknown sizes count as 1", 0, 0, 0, env(), 1, "default"},
		{"OPENBLAS_NUM_THREADS", 16, 4, 0, env("OPENBLAS_NUM_THREADS", "3"), 3, "OPENBLAS_NUM_THREADS"},
		{"OpenBLAS's precedence", 16, 4, 0, env("OMP_NUM_THREADS", "2", "GOTO_NUM_THREADS", "5", "OPENBLAS_NUM_THREADS", "7"), 7, "OPENBLAS_NUM_THREADS"},
		{"GOTO before OMP", 16, 4, 0, env("OMP_NUM_THREADS", "2", "GOTO_NUM_THREADS", "5"), 5, "GOTO_NUM_THREADS"},
		{"OMP_NUM_THREADS", 16, 4, 0, env("OMP_NUM_THREADS", " 6 "), 6, "OMP_NUM_THREADS"},
		{"unusable values are skipped", 16, 4, 0, env("OPENBLAS_NUM_THREADS", "0", "GOTO_NUM_THREADS", "many", "OMP_NUM_THREADS", "-1"), 4, "default"},
		{"the flag wins", 16, 4, 8, env("OPENBLAS_NUM_THREADS", "3"), 8, "-blas-threads"},
	}
	for _, tc := range cases {
		n, from := ChooseBLASThreads(tc.cores, tc.local, tc.flag, tc.getenv)
		if n != tc.want || from != tc.from {
			t.Errorf("%s: ChooseBLASThreads(%d, %d, %d) = %d, %q; want %d, %q", tc.name, tc.cores, tc.local, tc.flag, n, from, tc.want, tc.from)
		}
	}
}

func TestSetBLASThreads(t *testing.T) {
	if BLAS != "openblas" {
		if SetBLASThreads(2) != 0 || BLASThreads() != 0 {
			t.Fatalf("without OpenBLAS the thread count is 0")
		}
		return
	}
	was := BLASThreads()
	defer SetBLASThreads(was)
	for _, n := range []int{1, 2} {
		if got := SetBLASThreads(n); got != n {
			t.Errorf("SetBLASThreads(%d) = %d", n, got)
		}
	}
	if got := SetBLASThreads(0); got != 2 {
		t.Errorf("SetBLASThreads(0) changed the count to %d", got)
	}
}

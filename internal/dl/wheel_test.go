package dl

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// WheelLibraries searches $VIRTUAL_ENV, $CONDA_PREFIX and the environment of
// each python3 on $PATH (site-packages, then dist-packages), in that order,
// listing each environment and file once and skipping relative PATH entries.
func TestWheelLibraries(t *testing.T) {
	tmp := t.TempDir()
	touch := func(p string, mode os.FileMode) string {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	lib := func(env, site, rel string) string {
		return touch(filepath.Join(tmp, env, "lib", "python3.12", site, rel), 0o644)
	}
	const a, b = "nvidia/a/lib/liba.so.1", "nvidia/b/lib/libb.so.2"
	venvB, venvA := lib("venv", "site-packages", b), lib("venv", "site-packages", a)
	condaA := lib("conda", "site-packages", a)
	pathB, pathDistA := lib("onpath", "site-packages", b), lib("onpath", "dist-packages", a)
	lib("nopython", "site-packages", a) // its bin has no python3
	lib("relative", "site-packages", a) // on PATH only as a relative entry
	touch(filepath.Join(tmp, "venv", "bin", "python3"), 0o755)
	touch(filepath.Join(tmp, "onpath", "bin", "python3"), 0o755)
	touch(filepath.Join(tmp, "nopython", "bin", "python"), 0o755)
	touch(filepath.Join(tmp, "relative", "bin", "python3"), 0o755)
	rel, err := filepath.Rel(mustGetwd(t), filepath.Join(tmp, "relative", "bin"))
	if err != nil {
		t.Fatal(err)
	}

	t.Setenv("VIRTUAL_ENV", filepath.Join(tmp, "venv")+"/")
	t.Setenv("CONDA_PREFIX", filepath.Join(tmp, "conda"))
	t.Setenv("PATH", filepath.Join(tmp, "nopython", "bin")+":"+rel+":"+filepath.Join(tmp, "venv", "bin")+
		":"+filepath.Join(tmp, "onpath", "bin")+":")
	want := []string{venvA, venvB, condaA, pathB, pathDistA}
	if got := WheelLibraries(a, b); !reflect.DeepEqual(got, want) {
		t.Errorf("WheelLibraries:\n got %q\nwant %q", got, want)
	}

	t.Setenv("VIRTUAL_ENV", "")
	t.Setenv("CONDA_PREFIX", "")
	t.Setenv("PATH", "")
	if got := WheelLibraries(a, b); len(got) != 0 {
		t.Errorf("with no environment: %q", got)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

package devtest

import (
	"os"
	"path/filepath"
	"testing"
)

// UseEnv sets the environment variables kv (name, value pairs; a value of
// "" unsets the variable) for the rest of the test and calls reload (a
// package's Reload) to load its libraries afresh, and again after the
// test, once t.Setenv has restored the environment.
func UseEnv(t testing.TB, reload func(), kv ...string) {
	t.Helper()
	t.Cleanup(reload) // runs after t.Setenv's restores
	for i := 0; i < len(kv); i += 2 {
		t.Setenv(kv[i], kv[i+1])
		if kv[i+1] == "" {
			os.Unsetenv(kv[i])
		}
	}
	reload()
}

// SitePackages is the site-packages directory of the Python environment
// at root, as the libraries' search looks for it.
func SitePackages(root string) string {
	return filepath.Join(root, "lib", "python3.12", "site-packages")
}

// WheelEnv makes a Python environment in a temporary directory holding,
// at each of rels (paths under site-packages), a file that is not a
// library, and makes it the only one the search sees (VIRTUAL_ENV set to
// it, CONDA_PREFIX and PATH empty). It returns the environment's root and
// the files' paths.
func WheelEnv(t testing.TB, rels ...string) (root string, files []string) {
	t.Helper()
	root = t.TempDir()
	for _, rel := range rels {
		p := filepath.Join(SitePackages(root), rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not a library"), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	t.Setenv("VIRTUAL_ENV", root)
	t.Setenv("CONDA_PREFIX", "")
	t.Setenv("PATH", "") // no other python3's environment
	return root, files
}

// Package dl holds what gpu/cuda and comm/nccl share to load their
// libraries with dlopen at run time: the C loader helpers (dl.h, included
// by both shims through #cgo CFLAGS: -I), the lazily loaded, reloadable
// library state (Lazy), the names to try (Candidates), where NVIDIA's pip
// wheels put the libraries (WheelLibraries) and the message that says why
// none loaded (Unloadable).
//
// Environment: the loaders' edge. The variable a caller names for its
// library (gpu/cuda's GDIST_CUDART_PATH, comm/nccl's GDIST_NCCL_PATH, ...) is
// read by libraryVar (Candidates, Unloadable); $VIRTUAL_ENV, $CONDA_PREFIX
// and $PATH by pythonRoots (WheelLibraries). Both read when called, so a
// Reload after the environment changed sees the change.
package dl

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Lazy is a library state loaded on first use by Load, which Reload
// replaces (for tests, or after the environment changed).
type Lazy[T any] struct {
	Load func() *T
	mu   sync.Mutex
	cur  atomic.Pointer[T]
}

// Get returns the state, loading it once.
func (l *Lazy[T]) Get() *T {
	if s := l.cur.Load(); s != nil {
		return s
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.cur.Load(); s != nil {
		return s
	}
	s := l.Load()
	l.cur.Store(s)
	return s
}

// Reload loads the state again and keeps the new one.
func (l *Lazy[T]) Reload() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cur.Store(l.Load())
}

// Candidates are the library names to try: the one the environment
// variable env names, else defaults.
func Candidates(env string, defaults []string) []string {
	if p := libraryVar(env); p != "" {
		return []string{p}
	}
	return defaults
}

// libraryVar is the value of env, the variable a caller names for the
// library it loads (EnvLibrary of gpu/cuda, comm/nccl, ...): the one place
// this package reads it.
func libraryVar(env string) string { return os.Getenv(env) }

// pythonRoots are the prefixes of the Python environments WheelLibraries
// searches, in its order, before cleaning and de-duplication:
// $VIRTUAL_ENV, $CONDA_PREFIX, then the parent of each absolute $PATH entry
// that holds a python3 file. The one place this package reads those
// variables.
func pythonRoots() []string {
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if r := os.Getenv(env); r != "" {
			roots = append(roots, r)
		}
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if !filepath.IsAbs(dir) {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, "python3")); err == nil && !fi.IsDir() {
			roots = append(roots, filepath.Dir(filepath.Clean(dir)))
		}
	}
	return roots
}

// WheelLibraries returns the files at the paths rels (relative to a
// site-packages directory, e.g. "nvidia/nccl/lib/libnccl.so.2") that exist
// in the Python environments found without running Python, in this order:
// $VIRTUAL_ENV, $CONDA_PREFIX, then the prefix (the parent of the
// directory) of each python3 on $PATH, in PATH's order, so that a
// virtualenv whose python3 is first on PATH counts even when it is not
// "activated". In each environment, lib/python3*/site-packages and then
// lib/python3*/dist-packages are searched, each for rels in their order.
// Every environment and file is listed once; relative PATH entries are
// skipped. NVIDIA's wheels (nvidia-cuda-runtime-cu12, nvidia-nccl-cu13,
// ...) install their libraries there, off the library path, so dlopen
// would not find them by name.
func WheelLibraries(rels ...string) []string {
	var out []string
	seenRoot, seen := map[string]bool{}, map[string]bool{}
	for _, root := range pythonRoots() {
		root = filepath.Clean(root)
		if seenRoot[root] {
			continue
		}
		seenRoot[root] = true
		for _, site := range []string{"site-packages", "dist-packages"} {
			for _, rel := range rels {
				m, _ := filepath.Glob(filepath.Join(root, "lib", "python3*", site, rel))
				for _, f := range m {
					if !seen[f] {
						seen[f] = true
						out = append(out, f)
					}
				}
			}
		}
	}
	return out
}

// Unloadable says that what could not be loaded, with each attempt's error
// and, unless env is set, how to point env at a library (hint: "a
// libnccl.so.2 (the pip package ... ships one)").
func Unloadable(what string, tried []string, env, hint string) string {
	msg := "cannot load " + what + " (" + strings.Join(tried, "; ") + ")"
	if libraryVar(env) == "" {
		msg += "; set " + env + " to " + hint
	}
	return msg
}

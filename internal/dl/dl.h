// Shared by the C shims of gpu/cuda and comm/nccl, which re-declare the few
// prototypes they call and load the libraries with dlopen at run time (so
// the project builds with no CUDA headers). Include it after <dlfcn.h>,
// <stdio.h> and <stdlib.h>.
#ifndef GD_DL_H
#define GD_DL_H

// gd_dlopen opens path and allocates a zeroed library struct of size bytes
// whose first field is the handle; on failure it writes why into err and
// returns NULL.
static inline void *gd_dlopen(const char *path, size_t size, char *err, size_t errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	void **l = calloc(1, size);
	if (!l) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l[0] = h;
	return l;
}

// GD_REQ loads the required symbol name into l->field, or writes which
// library lacks it into err, frees l and returns NULL from the enclosing
// function. GD_OPT loads an optional one (NULL if absent).
#define GD_REQ(l, path, err, errlen, field, name)                                 \
	do {                                                                      \
		*(void **)&(l)->field = dlsym((l)->handle, name);                 \
		if (!(l)->field) {                                                \
			snprintf(err, errlen, "%s has no symbol %s", path, name); \
			free(l);                                                  \
			return NULL;                                              \
		}                                                                 \
	} while (0)
#define GD_OPT(l, field, name) (*(void **)&(l)->field = dlsym((l)->handle, name))

#endif
